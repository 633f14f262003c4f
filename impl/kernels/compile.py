"""Turn one kernel body into an ``mx.fast.metal_kernel`` or an ``mx.fast.cuda_kernel``.

A ``KernelSpec`` is a kernel written once: its body in the Metal subset that
``mx.fast.metal_kernel`` accepts, its input/output names and an optional header
of helper functions declared ``METAL_FUNC``. A ``Launch`` is one call of it
(inputs, template arguments, grid, threadgroup, outputs). ``Launch.run(arm)``
compiles the spec for the arm and calls it:

* ``metal``: ``mx.fast.metal_kernel(header=METAL_PRELUDE + header, source=body)``.
* ``cuda``:  ``mx.fast.cuda_kernel(header=CUDA_PRELUDE + header, source=body)``,
  where ``CUDA_PRELUDE`` (``metal_compat.cuh``) defines the Metal names the
  bodies use. ``Launch.cuda_source()`` renders the translation unit MLX would
  compile, for the nvcc test (``impl/kernels/test_cuda_compile.py``).

A spec whose body uses what only one arm has says so (``arms``: a CUDA-only
variant, e.g. one with ``cp.async``), and a launch may ask for dynamic shared
memory (``shared_memory``, bytes: CUDA's ``extern __shared__``, which
``mx.fast.cuda_kernel`` takes at construction and opts the kernel into above
48 KiB; an H200 allows 227 KiB per threadgroup).

Kernel names: MLX's CUDA backend caches compiled modules by kernel name alone
(in memory and as PTX under ``$TMPDIR/mlx/<version>/ptx``), and names carry
only the template arguments, not the input dtypes or the source. So the name
given to MLX is ``<spec.name>_<digest>``, the digest covering the preludes, the
header, the body, the argument names (their order is the parameters'), the input dtypes, a launch's output dtypes
and input ranks (``Launch.variant``: MLX renders both into the code), and its dynamic shared memory when it asks
for some (MLX opts a kernel into it once, when it first loads the name): a bf16 call and an f16 call of one spec,
two output dtypes, or an edited body or prelude, can never pick up each other's compiled kernel
(``test_kernel_names.py``).

Kernel text lives in files beside the Python that builds the spec, read at import by
``kernel_text(__file__, name)`` (UTF-8, no newline translation: a file holds its string byte for byte, so
moving a body into a file renames no kernel). As in MLX's ``mlx/backend/metal/kernels/``, one kernel family
per place: a kernel module ``impl/<kernel>.py`` keeps ``impl/<kernel>.metal`` (its body),
``impl/<kernel>_<piece>.metal`` (pieces its Python puts in the body's markers) and ``impl/<kernel>.h`` (its
header of ``METAL_FUNC`` helpers) beside it; a kernel package ``impl/<kernel>/`` (``__init__.py`` the contract
and the call, ``launch.py`` the specs and launches, ``graph.py`` the graph arm) holds ``<body>.metal`` per
kernel (``partial.metal``, ``merge.metal``), ``<piece>.metal`` for the pieces and ``<kernel>.h`` for the
shared header. A body is what ``mx.fast.metal_kernel`` takes (a function body, not a whole kernel); a piece
may be a fragment that fills a marker mid-line (then it has no final newline) or a ``string.Template`` with
``$name`` fields (``impl/paged_attention/load_*.metal``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

import mlx.core as mx

from impl.checks import check_int

__all__ = [
    "CUDA_PRELUDE",
    "COMPILED_ARMS",
    "MAX_DYNAMIC_SHARED_BYTES",
    "METAL_PRELUDE",
    "SIMDGROUP_HEADER",
    "KernelSpec",
    "Launch",
    "TemplateArg",
    "compiled_kernel",
    "full_header",
    "kernel_text",
]

COMPILED_ARMS = ("metal", "cuda")

CUDA_PRELUDE = "\n".join(Path(__file__).with_name(f).read_text() for f in ("metal_compat.cuh", "metal_simdgroup.cuh"))
# metal_stdlib already defines METAL_FUNC (inline, always_inline); the guard
# keeps one header valid for both compilers.
METAL_PRELUDE = ("#ifndef METAL_FUNC\n#define METAL_FUNC inline\n#endif\n"
                 # a run-time loop unrolled by 8 (metal_compat.cuh: the CUDA spelling, and what it does not do)
                 '#define UNROLL_BY_8 _Pragma("clang loop unroll_count(8)")\n'
                 # 16-bit floats held in 32-bit words (metal_compat.cuh has the CUDA spellings and the why)
                 "METAL_FUNC float bf16_lo_as_float(uint w) { return as_type<float>(w << 16); }\n"
                 "METAL_FUNC float bf16_hi_as_float(uint w) { return as_type<float>(w & 0xffff0000u); }\n"
                 "METAL_FUNC float half_bits_as_float(uint x) { return float(as_type<half>(ushort(x))); }\n")


def kernel_text(module_file: str, name: str) -> str:
    """The text of ``name``, a kernel body, piece or header beside ``module_file`` (a module's ``__file__``), as
    the file's bytes decoded from UTF-8 with no newline translation (module docstring)."""
    with open(Path(module_file).with_name(name), encoding="utf-8", newline="") as f:
        return f.read()


# The Metal spellings of the simdgroup-matrix names beyond Metal's own (the fragment layout, the paired products and
# loads): the first part of every header whose bodies use simdgroup matrices. The CUDA prelude defines them first.
SIMDGROUP_HEADER = kernel_text(__file__, "simdgroup.h")


TemplateArg = int | bool | mx.Dtype
# The most dynamic shared memory a threadgroup may ask for: an H100 / H200 (sm_90) block's opt-in maximum,
# 227 KiB (CUDA programming guide, compute capability 9.0): on the H200 with MLX 0.32.4, kernels asking for 16 KiB
# up to 227 KiB of dynamic shared memory launched and read back correctly.
MAX_DYNAMIC_SHARED_BYTES = 227 * 1024


@dataclass(frozen=True)
class KernelSpec:
    """One kernel body and its signature names (the body is the product: written once)."""

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    source: str
    header: str = ""
    ensure_row_contiguous: bool = True
    arms: tuple[str, ...] = COMPILED_ARMS  # the compiled arms whose compiler takes this body

    def __post_init__(self):
        # Types first: a str for a names tuple would be read letter by letter, and a list would only fail when
        # compiled_kernel's cache hashes the spec.
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a str, got {type(self.name).__name__}")
        for field in ("input_names", "output_names", "arms"):
            _check_str_tuple(field, getattr(self, field))
        for field, text in (("source", self.source), ("header", self.header)):
            if not isinstance(text, str):
                raise TypeError(f"{field} must be a str, got {type(text).__name__}")
        if not self.source.strip():
            raise ValueError("source must be a kernel body, got a blank string")
        if not isinstance(self.ensure_row_contiguous, bool):
            raise TypeError(f"ensure_row_contiguous must be a bool, got {type(self.ensure_row_contiguous).__name__}")
        if not self.arms or not set(self.arms) <= set(COMPILED_ARMS):
            raise ValueError(f"arms must be a non-empty subset of {COMPILED_ARMS}, got {self.arms!r}")
        if not self.name.isidentifier():
            raise ValueError(f"name must be a C identifier, got {self.name!r}")
        names = self.input_names + self.output_names
        if len(set(names)) != len(names) or not all(n.isidentifier() for n in names):
            raise ValueError(f"input_names and output_names must be distinct identifiers, got {names}")
        if not self.output_names:
            raise ValueError("output_names must name at least one output")


def _check_str_tuple(field: str, value) -> None:
    if not isinstance(value, tuple) or not all(isinstance(item, str) for item in value):
        raise TypeError(f"{field} must be a tuple of str, got {value!r}")


def full_header(spec: KernelSpec, arm: str) -> str:
    """The ``header`` argument for ``arm``: prelude, then the spec's header behind an include guard.

    The guard lets several kernels' translation units be concatenated (the
    nvcc test batches them) without redefining a shared helper.
    """
    prelude = {"metal": METAL_PRELUDE, "cuda": CUDA_PRELUDE}.get(arm)
    if prelude is None:
        raise ValueError(f"arm must be one of {COMPILED_ARMS}, got {arm!r}")
    if not spec.header.strip():
        return prelude
    guard = f"MLXGATE_HEADER_{_digest(spec.header)}"  # by content: kernels sharing a header share its guard
    return f"{prelude}\n#ifndef {guard}\n#define {guard}\n{spec.header}\n#endif  // {guard}\n"


def _digest(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:10]


def kernel_name(spec: KernelSpec, input_dtypes: tuple[mx.Dtype, ...], shared_memory: int = 0,
                variant: tuple[str, ...] = ()) -> str:
    """The name handed to MLX: unique per prelude, header, body, argument names, input dtypes, dynamic shared memory
    and ``variant`` (a launch's output dtypes and input ranks: MLX renders them into the code it compiles under this
    name, so two launches differing only there must not share it; module docstring).

    The preludes are part of the name because MLX caches compiled kernels by name (the CUDA
    backend on disk too): an edited prelude must never be served a build of the old one. So is a
    launch's dynamic shared memory (when it asks for any): MLX's CUDA backend sets a kernel's
    shared-memory opt-in once, when it first loads the name, so two sizes must not share one.
    """
    preludes = _preludes_digest(METAL_PRELUDE, CUDA_PRELUDE)
    extra = (f"shared_memory={shared_memory}",) if shared_memory else ()
    names = (",".join(spec.input_names), ",".join(spec.output_names))
    return f"{spec.name}_{_digest(preludes, spec.header, spec.source, *names, *map(str, input_dtypes), *extra, *variant)}"


@lru_cache(maxsize=4)
def _preludes_digest(metal: str, cuda: str) -> str:
    return _digest(metal, cuda)  # ~20 KB of text: hashed once per prelude version, not per call


@lru_cache(maxsize=None)
def compiled_kernel(spec: KernelSpec, arm: str, input_dtypes: tuple[mx.Dtype, ...], shared_memory: int = 0,
                    variant: tuple[str, ...] = ()):
    """The ``mx.fast`` kernel object for ``spec`` on ``arm`` (built once per input dtypes and dynamic shared
    memory: MLX takes the latter at construction)."""
    factory = {"metal": mx.fast.metal_kernel, "cuda": mx.fast.cuda_kernel}.get(arm)
    if factory is None:
        raise ValueError(f"arm must be one of {COMPILED_ARMS}, got {arm!r}")
    if arm not in spec.arms:
        raise ValueError(f"{spec.name} is a {'/'.join(spec.arms)}-only kernel; arm {arm!r} cannot compile it")
    extra = {}
    if shared_memory:
        if arm != "cuda":
            raise ValueError(f"shared_memory (dynamic shared memory) is CUDA's; arm {arm!r} has none")
        extra["shared_memory"] = shared_memory
    return factory(name=kernel_name(spec, input_dtypes, shared_memory, variant), input_names=list(spec.input_names),
                   output_names=list(spec.output_names), source=spec.source, header=full_header(spec, arm),
                   ensure_row_contiguous=spec.ensure_row_contiguous, **extra)


@dataclass(frozen=True)
class Launch:
    """One call of a kernel: everything ``mx.fast.*_kernel(...)(**kwargs)`` takes.

    Built by the kernel modules without launching anything, so the nvcc test can
    render exactly the translation unit a real call compiles.
    """

    spec: KernelSpec
    inputs: tuple[mx.array, ...]
    template: tuple[tuple[str, TemplateArg], ...]
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    output_shapes: tuple[tuple[int, ...], ...]
    output_dtypes: tuple[mx.Dtype, ...]
    shared_memory: int = 0  # bytes of dynamic shared memory (CUDA: the body's extern __shared__ array)

    def __post_init__(self):
        # What MLX would refuse only when the kernel is called, or would launch as given (an extent of 0 threads),
        # refused where the launch is built, naming the field.
        if not isinstance(self.spec, KernelSpec):
            raise TypeError(f"spec must be a KernelSpec, got {type(self.spec).__name__}")
        at = f"{self.spec.name}: "
        for i, a in enumerate(_sequence(f"{at}inputs", self.inputs)):
            if not isinstance(a, mx.array):  # the kernel's name and variant read each input's dtype and ndim
                raise TypeError(f"{at}inputs[{i}] must be an mx.array, got {type(a).__name__}")
        _check_template(at, self.template)
        for field in ("grid", "threadgroup"):
            extents = _sequence(f"{at}{field}", getattr(self, field))
            if len(extents) != 3:
                raise ValueError(f"{at}{field} must be 3 ints (x, y, z), got {extents!r}")
            for axis, n in zip("xyz", extents):
                check_int(f"{at}{field}.{axis}", n, minimum=1)
        for i, shape in enumerate(_sequence(f"{at}output_shapes", self.output_shapes)):
            for j, n in enumerate(_sequence(f"{at}output_shapes[{i}]", shape)):
                check_int(f"{at}output_shapes[{i}][{j}]", n, minimum=0)
        for i, dtype in enumerate(_sequence(f"{at}output_dtypes", self.output_dtypes)):
            if not isinstance(dtype, mx.Dtype):
                raise TypeError(f"{at}output_dtypes[{i}] must be an mx.Dtype, got {dtype!r}")
        if isinstance(self.shared_memory, bool) or not isinstance(self.shared_memory, int) or not (
                0 <= self.shared_memory <= MAX_DYNAMIC_SHARED_BYTES):
            raise ValueError(f"{self.spec.name}: shared_memory must be an int in [0, {MAX_DYNAMIC_SHARED_BYTES}] "
                             f"bytes, got {self.shared_memory!r}")
        if len(self.inputs) != len(self.spec.input_names):
            raise ValueError(f"{self.spec.name}: {len(self.inputs)} inputs for names {self.spec.input_names}")
        if not (len(self.output_shapes) == len(self.output_dtypes) == len(self.spec.output_names)):
            raise ValueError(f"{self.spec.name}: outputs must match names {self.spec.output_names}")

    @property
    def input_dtypes(self) -> tuple[mx.Dtype, ...]:
        return tuple(a.dtype for a in self.inputs)

    @cached_property
    def variant(self) -> tuple[str, ...]:
        """What MLX renders into the kernel's code besides the spec and input dtypes: output dtypes, input ranks."""
        return (*(f"out:{d}" for d in self.output_dtypes), *(f"ndim:{a.ndim}" for a in self.inputs))

    @property
    def name(self) -> str:
        return kernel_name(self.spec, self.input_dtypes, self.shared_memory, self.variant)

    def run(self, arm: str) -> list[mx.array]:
        kernel = compiled_kernel(self.spec, arm, self.input_dtypes, self.shared_memory, self.variant)
        return kernel(inputs=list(self.inputs), template=list(self.template), grid=self.grid,
                      threadgroup=self.threadgroup, output_shapes=list(self.output_shapes),
                      output_dtypes=list(self.output_dtypes))

    @property
    def cuda_function(self) -> str:
        """The ``__global__`` function MLX generates: ``custom_kernel_<name><template hash>``."""
        from .cuda_source import template_hash

        return f"custom_kernel_{self.name}{template_hash(self.template)}"

    @property
    def metal_function(self) -> str:
        """The kernel's ``[[host_name]]`` in the unit MLX generates for Metal (``metal_source.py``)."""
        from .metal_source import metal_kernel_name

        return metal_kernel_name(self.name, self.template, [(a.dtype, a.ndim, a.size) for a in self.inputs],
                                 self.output_dtypes)

    def metal_source(self) -> str:
        """The source ``mx.fast.metal_kernel`` builds for this call, after MLX's preamble (``metal_source.py``)."""
        from .metal_source import metal_translation_unit

        return metal_translation_unit(self.name, full_header(self.spec, "metal"), self.spec.source,
                                      [(n, a.dtype, a.ndim, a.size) for n, a in zip(self.spec.input_names, self.inputs)],
                                      list(zip(self.spec.output_names, self.output_dtypes)), self.template)

    def mlx_metal_source(self) -> str:
        """The same unit as MLX itself renders it (traced by ``mx.export_function``; no Metal device needed)."""
        from .metal_source import mlx_metal_source

        kernel = compiled_kernel(self.spec, "metal", self.input_dtypes, self.shared_memory, self.variant)
        return mlx_metal_source(kernel, self.inputs, template=list(self.template), grid=self.grid,
                                threadgroup=self.threadgroup, output_shapes=list(self.output_shapes),
                                output_dtypes=list(self.output_dtypes))

    def cuda_source(self) -> str:
        """The translation unit ``mx.fast.cuda_kernel`` builds for this call (``cuda_source.py``)."""
        from .cuda_source import cuda_translation_unit

        return cuda_translation_unit(self.name, full_header(self.spec, "cuda"), self.spec.source,
                                     [(n, a.dtype, a.ndim) for n, a in zip(self.spec.input_names, self.inputs)],
                                     list(zip(self.spec.output_names, self.output_dtypes)), self.template)


def _sequence(field: str, value) -> tuple | list:
    """``value`` if it is a tuple or a list (MLX takes either); a str, a dict or a number is refused by name."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{field} must be a tuple, got {type(value).__name__}")
    return value


def _check_template(at: str, template) -> None:
    """(name, value) pairs with distinct C identifiers for names, each value an int, a bool or an mx.Dtype: what MLX
    takes (it refuses anything else, a NumPy integer too, only when the kernel is called)."""
    names = []
    for i, entry in enumerate(_sequence(f"{at}template", template)):
        if not isinstance(entry, (tuple, list)) or len(entry) != 2:
            raise TypeError(f"{at}template[{i}] must be a (name, value) pair, got {entry!r}")
        name, value = entry
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{at}template[{i}]'s name must be a C identifier, got {name!r}")
        if not isinstance(value, (int, mx.Dtype)):  # a bool is an int
            raise TypeError(f"{at}template argument {name} must be an int, a bool or an mx.Dtype, "
                            f"got {type(value).__name__}")
        names.append(name)
    if len(set(names)) != len(names):
        raise ValueError(f"{at}template names must be distinct, got {names}")


# How many traces a kernel module's compiled call keeps (``lru_cache(maxsize=TRACES_KEPT)`` over a
# builder keyed by ``input_signature``). kvq4 and multi-query take the KV cache itself as input, so
# N is in their inputs' shapes and grows every decode step: a trace serves one step's layers (they
# share N: the first traces, the rest replay it) and old ones must go. One mx.compile'd function
# traced for every N keeps each trace for the life of the process (measured with MLX 0.32.4 on a
# CPU: 134 MB against 34 MB over 20000 lengths, ~5 KB per length); a dropped function frees its
# traces, and a new trace costs about one uncompiled call. (Paged attention needs none of this: its
# inputs' shapes change only when the padded block table doubles.)
TRACES_KEPT = 16


def input_signature(arrays) -> tuple:
    """What a compiled call's trace depends on: each input's shape and dtype."""
    return tuple((a.shape, a.dtype) for a in arrays)

