"""The Metal arm's front-end check on Linux: each unit MLX would compile, type-checked by upstream clang.

A Metal unit is what ``mx.fast.metal_kernel`` hands Metal's compiler: MLX's preamble (``metal::utils()``,
``mlx/backend/metal/kernels/utils.h`` with ``bf16.h``, ``bf16_math.h``, ``complex.h``, ``defines.h``) followed by
the generated source (``metal_source``). ``check_unit`` type-checks exactly that, MLX's own preamble included
(its headers ship in the MLX wheel, ``mlx/include``), with clang's C++ for OpenCL 2021 front end
(``-fsyntax-only``, target spir64) against ``metal_stand_in/metal_stdlib``, the project's model of Metal's
standard library (its header comment lists what it models and what it cannot).

Before clang, the unit is lowered, line for line (a diagnostic's line is the unit's):

* Metal's attributes (``[[kernel]]``, ``[[buffer(i)]]``, ``[[host_name(...)]]``, the thread-position
  attributes, ``[[function_constant(i)]]``, ...) become blanks (a function constant's declaration gets ``= {}``:
  OpenCL's constant space wants an initializer); an attribute this list does not know is left for clang, which
  refuses it. The buffer indices are collected: Metal has 31 buffer slots (0..30).
* Metal's vector constructors, ``float4(x, y, z, w)``, ``float4(h4)``, ``metal::vec<T, 4>(...)``, become calls
  of the stand-in's ``vec_make`` (its vectors are clang's ``ext_vector_type``, which has no constructors).
* A threadgroup declaration ``threadgroup T x[N], y;`` (OpenCL allows ``__local`` variables only in kernel
  functions, which may not be templates) becomes references into threadgroup memory,
  ``threadgroup T (&x)[N] = *(threadgroup T (*)[N])metal_threadgroup_slot<sizeof(T[N]), id>();``: same type
  for the code that uses it, and clang evaluates each declaration's size in the instance being checked. The
  sizes are read back from clang's AST dump of the slot's instantiations and summed: at most 32 KiB
  (``THREADGROUP_MEMORY_MAX``, Apple GPUs' ``maxThreadgroupMemoryLength``).

``Checked`` holds the verdict: clang's errors (each mapped to the kernel body's, the header's or the
preamble's line where the unit says which is which), threadgroup bytes, buffers. ``check_launches`` runs a
list of ``Launch`` objects' units in parallel, one clang process per unit.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BUFFERS_MAX", "CLANG", "Checked", "Regions", "SKIP_REASON", "STAND_IN", "THREADGROUP_MEMORY_MAX",
           "check_launches", "check_unit", "launch_regions", "lower", "mlx_include"]

STAND_IN = Path(__file__).with_name("metal_stand_in")
THREADGROUP_MEMORY_MAX = 32 * 1024  # bytes of threadgroup memory per threadgroup on Apple GPUs (Metal feature set tables)
BUFFERS_MAX = 31  # Metal's buffer argument table: [[buffer(0)]] .. [[buffer(30)]]
METAL_VERSION = 310  # MSL 3.1: what MLX asks for on macOS 14, the oldest macOS MLX's Metal build supports


def _find_clang() -> str | None:
    """clang 17 or newer (C++ for OpenCL 2021 with the generic address space): ``clang-19`` first (Debian's
    package, what ``scripts/ci-tools.sh clang-19`` installs), or ``$MLXGATE_CLANG``."""
    for name in (os.environ.get("MLXGATE_CLANG"), "clang-19", "clang-20", "clang-18", "clang-17"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


CLANG = _find_clang()
SKIP_REASON = "clang-19 is not installed: scripts/ci-tools.sh clang-19 installs it (Debian's package)"

FLAGS = ("-x", "clcpp", "-cl-std=clc++2021", "-cl-no-stdinc", "-target", "spir64", "-fdeclspec",
         # Metal has no double: with fp64 off, clang refuses the type (`use of type 'double' requires ...`)
         "-Xclang", "-cl-ext=-cl_khr_fp64,-__opencl_c_fp64",
         "-fsyntax-only", "-ferror-limit=0", "-fno-color-diagnostics", "-fno-caret-diagnostics",
         "-Werror=unknown-attributes",
         "-Xclang", "-ast-dump", "-Xclang", "-ast-dump-filter", "-Xclang", "metal_threadgroup_slot")


def mlx_include() -> Path:
    """The MLX wheel's headers: ``mlx/include`` holds ``mlx/backend/metal/kernels/utils.h``."""
    import mlx.core

    return Path(mlx.core.__file__).parent / "include"


PREAMBLE = '#include "mlx/backend/metal/kernels/utils.h"\n'  # metal::utils(), from the installed MLX

# Metal's attributes the lowering blanks (MSL 3.1, section 5: function, argument and variable attributes).
METAL_ATTRIBUTES = frozenset({
    "kernel", "vertex", "fragment", "host_name", "buffer", "texture", "sampler", "threadgroup", "function_constant",
    "user", "max_total_threads_per_threadgroup", "stage_in", "visible", "early_fragment_tests",
    "dispatch_quadgroups_per_threadgroup", "dispatch_simdgroups_per_threadgroup", "dispatch_threads_per_threadgroup",
    "grid_origin", "grid_size", "quadgroup_index_in_threadgroup", "quadgroups_per_threadgroup",
    "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup", "thread_execution_width",
    "thread_index_in_quadgroup", "thread_index_in_simdgroup", "thread_index_in_threadgroup",
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threadgroups_per_grid", "threads_per_grid", "threads_per_simdgroup", "threads_per_threadgroup",
})
_ATTRIBUTE = re.compile(r"\[\[(?P<items>[^\[\]]*)\]\]")
_ATTRIBUTE_ITEM = re.compile(r"\s*(?P<name>\w+)\s*(\((?P<args>[^()]*)\))?\s*(,|$)")
# `threadgroup T a[N][M], b;` on one line: a type (no pointer or reference) and declarators with no initializer.
_THREADGROUP_DECL = re.compile(r"^(?P<indent>\s*)threadgroup\s+(?P<type>[A-Za-z_][\w:<>, ]*?)\s+"
                               r"(?P<decls>[A-Za-z_]\w*\s*(\[[^\]]+\]\s*)*(,\s*[A-Za-z_]\w*\s*(\[[^\]]+\]\s*)*)*);"
                               r"(?P<tail>\s*(//.*)?)$")
_DECLARATOR = re.compile(r"([A-Za-z_]\w*)\s*((?:\[[^\]]+\]\s*)*)")
# Metal's vector constructors, float4(...) and vec<T, 4>(...): calls of the stand-in's vec_make.
_VECTOR_CONSTRUCTOR = re.compile(r"(?<![\w.:])(?:metal::)?((?:packed_)?(?:float|half|bfloat|int|uint|short|ushort|char"
                                 r"|uchar|long|ulong|bool)(?:2|3|4|8|16))\s*\(")
_VEC_CONSTRUCTOR = re.compile(r"(?<![\w.])(?:metal::)?vec\s*<([^<>()]*)>\s*\(")


@dataclass(frozen=True)
class Regions:
    """Where a unit's parts start (1-based lines of the generated source), to name a diagnostic's line."""

    header: int = 1       # the kernel's header (after the prelude), or 0 if none
    header_end: int = 0   # its last line
    body: int = 0         # the body's first line, 0 if unknown
    body_end: int = 0


@dataclass
class Checked:
    """One unit's verdict."""

    label: str
    errors: list[str] = field(default_factory=list)
    threadgroup_bytes: int = 0
    buffers: int = 0  # buffer slots the unit's kernel uses (its highest [[buffer(i)]] + 1)
    warnings: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.errors


def lower(source: str) -> tuple[str, list[int], list[str]]:
    """``source`` with Metal's attributes blanked and threadgroup declarations made references (module
    docstring), line for line; the buffer indices it declares; and problems the lowering itself finds."""
    buffers: list[int] = []
    problems: list[str] = []

    def attribute(match: re.Match) -> str:
        items = list(_ATTRIBUTE_ITEM.finditer(match.group("items")))
        if not items or "".join(i.group(0) for i in items) != match.group("items") or any(
                i.group("name") not in METAL_ATTRIBUTES for i in items):
            return match.group(0)  # not (only) Metal's: clang judges it
        for item in items:
            if item.group("name") == "buffer":
                try:
                    buffers.append(int(item.group("args")))
                except (TypeError, ValueError):
                    problems.append(f"[[buffer({item.group('args')})]]: not an integer index")
        if any(i.group("name") == "function_constant" for i in items) and \
                match.string[match.end():].lstrip(" ").startswith(";"):
            return "= {}".ljust(len(match.group(0)))  # a function constant: OpenCL's constant space wants a value
        return " " * len(match.group(0))

    lowered = _ATTRIBUTE.sub(attribute, source)
    lowered = _VECTOR_CONSTRUCTOR.sub(r"::metal::vec_make<::metal::\1>(", lowered)
    lowered = _VEC_CONSTRUCTOR.sub(r"::metal::vec_make<::metal::vec<\1>>(", lowered)
    lines, slot = [], 0
    for line in lowered.split("\n"):
        decl = _THREADGROUP_DECL.match(line)
        if decl:
            parts = []
            for name, dims in _DECLARATOR.findall(decl.group("decls")):
                element, dims = decl.group("type").strip(), dims.strip()
                typed = f"{element}{dims}" if dims else element
                ref = f"(&{name}){dims}" if dims else f"&{name}"
                ptr = f"(*){dims}" if dims else "*"
                parts.append(f"threadgroup {element} {ref} = *(threadgroup {element} {ptr})"
                             f"metal_threadgroup_slot<sizeof({typed}), {slot}>();")
                slot += 1
            line = decl.group("indent") + " ".join(parts) + decl.group("tail")
        lines.append(line)
    return "\n".join(lines), buffers, problems


_SLOT = re.compile(r"FunctionDecl .* metal_threadgroup_slot .*implicit_instantiation\n"
                   r"\W*TemplateArgument integral '(\d+)UL'\n\W*TemplateArgument integral '(\d+)'")
_DIAGNOSTIC = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+):(?P<col>\d+): (?P<kind>error|warning|fatal error): "
                         r"(?P<message>.*)$", re.MULTILINE)


def _place(line: int, regions: Regions | None) -> str:
    if regions is None:
        return f"line {line}"
    if regions.body and regions.body <= line <= regions.body_end:
        return f"body line {line - regions.body + 1}"
    if regions.header and regions.header <= line <= regions.header_end:
        return f"header line {line - regions.header + 1}"
    return f"unit line {line}"


def check_unit(source: str, label: str, regions: Regions | None = None, preamble: str = PREAMBLE,
               workdir: str | None = None) -> Checked:
    """Type-check one Metal unit (``preamble`` + ``source``, as MLX compiles it) with clang (module docstring)."""
    if CLANG is None:
        raise RuntimeError(SKIP_REASON)
    lowered, buffers, problems = lower(source)
    checked = Checked(label, errors=[f"{label}: {p}" for p in problems], buffers=max(buffers, default=-1) + 1)
    for index in sorted(set(buffers)):
        if index >= BUFFERS_MAX:
            checked.errors.append(f"{label}: [[buffer({index})]]: Metal has {BUFFERS_MAX} buffer slots (0..30)")
    offset = preamble.count("\n")
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        path = os.path.join(tmp, "unit.metal")
        with open(path, "w", encoding="utf-8") as f:
            f.write(preamble + lowered)
        run = subprocess.run([CLANG, *FLAGS, "-isystem", str(STAND_IN), "-I", str(mlx_include()),
                              f"-D__METAL_VERSION__={METAL_VERSION}", "-D__METAL__", path],
                             capture_output=True, text=True, timeout=300)
    for d in _DIAGNOSTIC.finditer(run.stderr):
        where = (_place(int(d["line"]) - offset, regions) if os.path.basename(d["file"]) == "unit.metal"
                 else f"{os.path.basename(d['file'])}:{d['line']}")
        text = f"{label}: {where}: {d['message']}"
        (checked.warnings if d["kind"] == "warning" else checked.errors).append(text)
    if run.returncode != 0 and not checked.errors:
        checked.errors.append(f"{label}: clang exited {run.returncode}: {run.stderr.strip()[-400:]}")
    seen = {}
    for size, slot_id in _SLOT.findall(run.stdout):
        seen[int(slot_id)] = int(size)
    checked.threadgroup_bytes = sum(seen.values())
    if checked.threadgroup_bytes > THREADGROUP_MEMORY_MAX:
        checked.errors.append(f"{label}: {checked.threadgroup_bytes} bytes of threadgroup memory: Metal allows "
                              f"{THREADGROUP_MEMORY_MAX} per threadgroup")
    return checked


def launch_regions(launch) -> Regions:
    """The header's and the body's lines in ``launch``'s Metal unit."""
    from .compile import full_header

    unit = launch.metal_source()
    header = full_header(launch.spec, "metal")
    start = unit.index(launch.spec.source, len(header))
    body = unit[:start].count("\n") + 1
    if launch.spec.header.strip():
        first = header.index(launch.spec.header)
        h0 = header[:first].count("\n") + 1
        regions_header = (h0, h0 + launch.spec.header.count("\n"))
    else:
        regions_header = (0, 0)
    return Regions(*regions_header, body, body + launch.spec.source.count("\n"))


def launch_label(launch) -> str:
    """A launch as a line names it: the spec, its template values and its inputs' Metal address spaces."""
    from .metal_source import address_space

    template = ", ".join(f"{n}={v}" for n, v in launch.template)
    spaces = ",".join("c" if address_space(a.ndim, a.size) == "constant" else "d" for a in launch.inputs)
    return f"{launch.spec.name}<{template}>[{spaces}]"


def check_launches(launches, workers: int | None = None) -> list[Checked]:
    """Each launch's Metal unit type-checked, distinct units once, in parallel."""
    units = {}
    for launch in launches:
        units.setdefault(launch.metal_source(), launch)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 2) as pool:
        return list(pool.map(lambda item: check_unit(item[0], launch_label(item[1]), launch_regions(item[1])),
                             units.items()))
