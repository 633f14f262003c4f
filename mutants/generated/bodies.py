"""Generate the operator mutants of every kernel body file, from its text (docs/generated-mutants.md).

A kernel body file is a ``.metal`` / ``.h`` file that the metal and cuda arms compile (``impl/<kernel>.metal``,
``impl/<kernel>_<piece>.metal``, ``impl/<kernel>.h``, ``impl/<package>/*.metal`` and ``*.h``: the layout
``impl/kernels/compile.py`` describes). Comments, string literals and preprocessor lines are never mutated. The
operators (``OPERATORS``):

* ``relational``: ``<`` to ``<=`` and ``>``, ``>`` to ``>=`` and ``<``, ``<=`` to ``<``, ``>=`` to ``>``, ``==`` to
  ``!=`` and back: only an operator written with a space on either side (so no template bracket, shift or
  arrow), never inside ``static_assert``, never one that makes a comparison with 0 always true (``x >= 0``:
  an unsigned loop that never ends, a hang, not a test result), and never ``i < n`` to ``i <= n`` in the
  condition of a ``for`` whose body subscripts one of the thread's own arrays with ``i`` (the extra iteration
  reads or writes past a register array: undefined behaviour the compiler may delete, the ``bound`` rule's case;
  such a site keeps its place in the id count).
* ``bound``: the bound of an integer comparison one off, ``i < n`` to ``i < n - 1`` and ``i < n + 1``: both sides
  integer (declared ``uint`` / ``int`` / ``ulong`` in the kernel's files, an all-capitals template constant, a
  thread-position attribute, a ``*_shape`` / ``*_strides`` entry, or an integer cast), the bound not a bare
  literal (``i < 8u`` walks an array of 8: its ``+ 1`` is a write past a register array, not a realistic bug).
* ``index``: a subscript one off, ``x[i]`` to ``x[i + 1]``: a single integer index into device or threadgroup
  memory (a buffer argument or a ``threadgroup`` array), not into a thread's array or vector (a name any file of
  the kernel family declares so).
* ``minmax``: ``min`` and ``max`` swapped (``metal::``, ``simd_`` and ``f`` spellings included).
* ``guard``: a guard dropped: ``continue;`` and an early ``return;`` become ``{}``, and a ``?:`` always takes
  one arm (two mutants per conditional: ``c ? a : b`` to ``a`` and to ``b``).
* ``infinity``: ``-INFINITY`` to ``0.0f``, and a ``0.0f`` that initializes or is a ``?:`` arm to ``-INFINITY``.
* ``fma``: ``fma(a, b, c)`` to ``fma(a, c, b)`` (``fma(b, a, c)`` is the same product).
* ``barrier``: a ``threadgroup_barrier(...)`` or ``ROLE_BARRIER(...)`` statement dropped.
* ``shuffle``: the distance of ``simd_shuffle_xor`` / ``_down`` / ``_up`` (and CUDA's ``__shfl_xor_sync`` /
  ``_down_`` / ``_up_``) halved and doubled.

Every mutant is a catalog ``Mutant`` (``GeneratedMutant`` adds its id, operator, file and line): one ``body``
substitution whose old text is the mutated line, grown by its neighbouring lines until it occurs exactly once
in the file (the runner's rule). Its id is ``<file>:<digest>:<operator>:<k>``: ``digest`` hashes the mutated
line's text (stripped), ``k`` counts the mutants of that operator on lines of that text, in order. An edit
elsewhere in the file (lines added above it included) leaves the id as it was; an edit of the line itself
makes a new mutant, as it should. Its ``arms`` are the compiled arms that run the mutated text:
``("cuda", "metal")``, or fewer for a file only some arms compile (``COMPILED_BY``), a region of a file only
one arm runs (``RUN_BY``), or a ``#if defined(__CUDACC__)`` block; a CPU run (graph arm only) leaves them out.
Its ``tests`` are its kernel family's whole test set (``TARGET_TESTS``: files and test functions), which
``resolve_tests`` turns into the node ids of the run's compiled arms before a run.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ..catalog import ARMS, Mutant, Substitution

__all__ = [
    "COMPILED_BY", "GENERATED_ARMS", "NO_SITES", "OPERATORS", "REPO_ROOT", "RUN_BY", "TARGETS", "TARGET_TESTS",
    "GeneratedMutant", "Site", "all_mutants", "arm_of", "body_files", "generate", "mask", "resolve_tests", "sites",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
OPERATORS = ("relational", "bound", "index", "minmax", "guard", "infinity", "fma", "barrier", "shuffle")
GENERATED_ARMS = ("cuda", "metal")  # the compiled arms: the only ones that run a body
TARGETS = ("kvq4_decode", "multi_query", "normalized_argmax", "paged_attention")

# Each kernel family's whole test set: every test that runs one of its bodies (files, or test functions of a file
# shared by the families); ``resolve_tests`` keeps their compiled-arm cases. The paged partial also serves kvq4's
# direct path (STRIDED, load_strided_affine.metal), and kvq4's seed partial writes multi-query's PARTS layout for
# multi-query's merge, so the kvq4 tests belong to those families too.
KVQ4_TESTS = ("parity/test_kvq4_decode.py", "properties/test_kvq4_decode_props.py",
              "parity/test_small_inputs.py::test_kvq4_decode_one_token")
TARGET_TESTS: dict[str, tuple[str, ...]] = {
    "paged_attention": ("parity/test_paged_attention.py", "properties/test_paged_attention_props.py",
                        "parity/test_small_inputs.py::test_paged_attention_small_pool", "parity/test_decode_e2e.py",
                        "parity/test_kv_attend.py", "properties/test_block_table.py", *KVQ4_TESTS),
    "kvq4_decode": KVQ4_TESTS,
    "multi_query": ("parity/test_multi_query.py", "properties/test_multi_query_props.py",
                    "parity/test_small_inputs.py::test_multi_query_smallest_call", *KVQ4_TESTS),
    "normalized_argmax": ("parity/test_normalized_argmax.py", "properties/test_normalized_argmax_props.py",
                          "parity/test_small_inputs.py::test_normalized_argmax_small_logits",
                          "parity/test_decode_e2e.py"),
}

# Body files only some arms compile: every KernelSpec that holds them says these arms (meta_tests checks it).
COMPILED_BY: dict[str, tuple[str, ...]] = {
    "impl/normalized_argmax_fused_scan.metal": ("cuda",),  # FUSED, FUSED_LSE: MLX's CUDA logsumexp
    "impl/multi_query/ring_buffers.metal": ("cuda",),  # PARTIAL_RING: cp.async ring
    "impl/multi_query/ring_stager_loop.metal": ("cuda",),
    "impl/paged_attention/ring.h": ("cuda",),  # MATRIX_PARTIAL_RING: cp.async ring
    "impl/paged_attention/ring_prologue.metal": ("cuda",),
    "impl/paged_attention/ring_fetch.metal": ("cuda",),
    "impl/paged_attention/ring_issue.metal": ("cuda",),
    "impl/paged_attention/ring_osh.metal": ("cuda",),
}
# Text both arms compile but only one runs: (file, first line's text or None for the whole file, the text that
# ends the region or None, arms, why).
RUN_BY: tuple[tuple[str, str | None, str | None, tuple[str, ...], str], ...] = (
    ("impl/multi_query/stager_loop.metal", None, None, ("cuda",),
     "the two-stage partial's stagers: pipeline_stages gives Metal one stage"),
    ("impl/multi_query/partial.metal", "  } else if (tile) {\n", "STAGER_LOOP  }\n", ("cuda",),
     "the two-stage loops: pipeline_stages gives Metal one stage"),
)
# Body files with nothing to mutate, and why (meta_tests holds the generator to producing mutants for the rest).
NO_SITES: dict[str, str] = {
    "impl/multi_query/merge.h": "a preprocessor guard alone",
    "impl/paged_attention/ring.h": "inline PTX (cp.async, createpolicy, ld.shared) behind a guard: no operator",
    "impl/multi_query/buffers.metal": "threadgroup buffer declarations alone",
    "impl/multi_query/ring_buffers.metal": "shared-memory pointer declarations alone",
    "impl/paged_attention/ring_issue.metal": "one call of ring_prologue.metal's issue (its slot arithmetic is mutated "
                                             "there): no operator",
}


@dataclass(frozen=True)
class GeneratedMutant(Mutant):
    """A catalog ``Mutant`` generated from a file's text: its stable id, operator class and where it lies."""

    id: str = ""  # <file>:<digest of the mutated line>:<operator>:<k> (module docstring)
    operator: str = ""
    file: str = ""
    line: int = 0  # 1-based, in the file as it was generated from
    generated: str = "body"  # "body" (this module) or "python" (a Python mutation tool's)

    @property
    def record_fields(self) -> dict:
        """What its ``mutant`` record adds (reports/SCHEMA.md, "Generated mutants")."""
        return {"generated": self.generated, "id": self.id, "operator": self.operator, "file": self.file,
                "line": self.line}


@dataclass(frozen=True)
class Site:
    """One mutation of a file: text[start:end] becomes ``new``."""

    operator: str
    start: int
    end: int
    new: str
    what: str  # the change in words
    # Why the mutation is not a realistic bug, when it is not (it still takes its place in the id count, so a
    # rule never renumbers the mutants around it): file_mutants leaves it out.
    excluded: str = ""


# --- files ---------------------------------------------------------------------------------


def body_files(root: Path = REPO_ROOT) -> dict[str, str]:
    """``{path: target}`` of every kernel body file under ``root`` (paths relative, "/"-separated)."""
    root = Path(root)
    files: dict[str, str] = {}
    for target in TARGETS:
        package = root / "impl" / target
        if package.is_dir():
            paths = [p for p in package.iterdir() if p.suffix in (".metal", ".h")]
        else:
            paths = [root / "impl" / f"{target}.metal", root / "impl" / f"{target}.h",
                     *(root / "impl").glob(f"{target}_*.metal")]
        for path in sorted(p for p in paths if p.is_file()):
            files[path.relative_to(root).as_posix()] = target
    return files


# --- lexing --------------------------------------------------------------------------------


def mask(text: str) -> tuple[str, list[tuple[int, str]]]:
    """``text`` with comments, string and character literals and preprocessor lines blanked (same length,
    newlines kept), and the preprocessor directives as (offset, text)."""
    out = list(text)
    directives: list[tuple[int, str]] = []
    i, n, line_start = 0, len(text), True

    def blank(a: int, b: int) -> None:
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
            continue
        if c == "#" and line_start:
            j = i
            while True:  # a directive runs on over lines ending in a backslash
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and text[k - 1] == "\\" and k < n:
                    j = k + 1
                    continue
                break
            directives.append((i, text[i:k]))
            blank(i, k)
            i = k
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
            line_start = False
            continue
        if not c.isspace():
            line_start = False
        i += 1
    return "".join(out), directives


def _directive_arms(text: str, directives: list[tuple[int, str]]) -> list[tuple[int, int, frozenset | None]]:
    """(start, end, arms) of the ``#if defined(__CUDACC__)`` / ``#if !defined(__CUDACC__)`` regions and their
    ``#else``: cuda alone, metal alone (other conditionals: None, every arm)."""
    regions, stack = [], []
    for offset, line in directives:
        words = line[1:].strip()
        if re.match(r"(if\s+defined\s*\(?\s*__CUDACC__|ifdef\s+__CUDACC__)", words):
            stack.append([offset, frozenset({"cuda"})])
        elif re.match(r"(if\s+!\s*defined\s*\(?\s*__CUDACC__|ifndef\s+__CUDACC__)", words):
            stack.append([offset, frozenset({"metal"})])
        elif re.match(r"if", words):
            stack.append([offset, None])
        elif re.match(r"el(se|if)", words) and stack:
            start, arms = stack[-1]
            regions.append((start, offset, arms))
            stack[-1] = [offset, (frozenset(GENERATED_ARMS) - arms) if arms and words.startswith("else") else None]
        elif re.match(r"endif", words) and stack:
            start, arms = stack.pop()
            regions.append((start, offset, arms))
    return [r for r in regions if r[2] is not None]


def _run_by(path: str, text: str) -> list[tuple[int, int, frozenset]]:
    regions = []
    for file, first, last, arms, _ in RUN_BY:
        if file != path:
            continue
        if first is None:
            regions.append((0, len(text), frozenset(arms)))
            continue
        if text.count(first) != 1 or text.count(last) != 1 or text.index(last) < text.index(first):
            raise ValueError(f"{path}: RUN_BY region {first!r} .. {last!r} is not in the file once, in order")
        regions.append((text.index(first), text.index(last) + len(last), frozenset(arms)))
    return regions


def _close(m: str, i: int) -> int:
    """Index of the bracket closing the one at ``m[i]``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for j in range(i, len(m)):
        if m[j] in pairs:
            stack.append(pairs[m[j]])
        elif m[j] in ")]}":
            if not stack or stack.pop() != m[j]:
                raise ValueError(f"unbalanced brackets at {j}")
            if not stack:
                return j
    raise ValueError(f"unclosed bracket at {i}")


def _args(m: str, open_at: int) -> list[tuple[int, int]]:
    """(start, end) of each argument of the call whose "(" is at ``open_at``, whitespace trimmed."""
    close = _close(m, open_at)
    spans, depth, start = [], 0, open_at + 1
    for j in range(open_at + 1, close + 1):
        c = m[j]
        if c in "([{":
            depth += 1
        elif c in ")]}" and j < close:
            depth -= 1
        if (c == "," and depth == 0) or j == close:
            a, b = start, j
            while a < b and m[a].isspace():
                a += 1
            while b > a and m[b - 1].isspace():
                b -= 1
            spans.append((a, b))
            start = j + 1
    return spans


def _is_colon(m: str, j: int) -> bool:
    return m[j] == ":" and not (j > 0 and m[j - 1] == ":") and not (j + 1 < len(m) and m[j + 1] == ":")


def _stops_right(m: str, j: int) -> int:
    """Length of the operator at ``m[j]`` that ends a relational operand scanned rightwards (0: none)."""
    c, d = m[j], m[j + 1] if j + 1 < len(m) else ""
    if c in ";,?" or _is_colon(m, j):
        return 1
    if c in "&|" and d == c:
        return 2
    if c in "&|^" or c == "=":
        return 1
    if c in "<>":
        return 0 if d == c else 1  # a shift binds tighter than a comparison
    if c == "!" and d == "=":
        return 2
    return 0


def _operand_right(m: str, i: int) -> tuple[int, int]:
    j, depth = i, 0
    while j < len(m) and m[j].isspace():
        j += 1
    start = j
    while j < len(m):
        c = m[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and _stops_right(m, j):
            break
        elif depth == 0 and c in "<>" and j + 1 < len(m) and m[j + 1] == c:
            j += 2
            continue
        j += 1
    end = j
    while end > start and m[end - 1].isspace():
        end -= 1
    return start, end


def _operand_left(m: str, i: int) -> tuple[int, int]:
    """(start, end) of the operand that ends just before ``i`` (a relational operator's left side)."""
    j, depth = i - 1, 0
    while j >= 0 and m[j].isspace():
        j -= 1
    end = j + 1
    while j >= 0:
        c = m[j]
        if c in ")]}":
            depth += 1
        elif c in "([{":
            if depth == 0:
                break
            depth -= 1
        elif depth == 0:
            if c in ";,?=!" or _is_colon(m, j) or (c in "&|" and j > 0 and m[j - 1] == c):
                break
            if c in "<>" and not (j > 0 and m[j - 1] == c) and not (j + 1 < len(m) and m[j + 1] == c):
                break
            if m[max(0, j - 5):j + 1] == "return" and (j < 6 or not (m[j - 6].isalnum() or m[j - 6] == "_")):
                j += 1
                break
        j -= 1
    start = j + 1
    while start < end and m[start].isspace():
        start += 1
    return start, end


# --- types: what is an integer -------------------------------------------------------------

INT_TYPES = ("uint", "int", "ulong", "size_t", "unsigned", "uint32_t", "int32_t", "uint64_t", "int64_t", "ushort",
             "short")
OTHER_TYPES = ("float", "half", "bool", "auto", "T", "InT", "OutT", "float2", "float4", "half2", "half4", "uint2",
               "uint4", "Chunk", "Wide4", "Wide8", "double")
# Metal's thread-position attributes (uint or uint3: their .x/.y/.z are members) and the integer template fields.
INT_BUILTINS = {"thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
                "threads_per_threadgroup", "threadgroups_per_grid", "thread_index_in_simdgroup",
                "simdgroup_index_in_threadgroup", "thread_index_in_threadgroup", "$lanes", "$width"}
INT_FUNCTIONS = {"min", "max", "sg_fragment_row", "sg_fragment_col"}  # integer when their arguments are
_DECL = re.compile(r"\b(?:(?:const|constexpr|threadgroup|thread|static)\s+)*(%s)\s+(?=[A-Za-z_])")
_IDENT = re.compile(r"\$?[A-Za-z_]\w*")
_FLOAT_LITERAL = re.compile(r"(?<![\w.])(\d+\.\d*|\.\d+)(e[+-]?\d+)?f?|\b\d+(e[+-]?\d+)?f\b")


VECTOR_TYPES = ("float2", "float4", "half2", "half4", "uint2", "uint4")


def _declared(masked: str, types: Sequence[str]) -> list[tuple[str, str, bool, bool]]:
    """(name, type, in threadgroup memory, an array) of every variable, parameter and loop counter declared with
    one of ``types``."""
    names = []
    for match in re.finditer(_DECL.pattern % "|".join(types), masked):
        shared = "threadgroup" in match.group()
        j, depth, start = match.end(), 0, match.end()
        parts = []
        while j < len(masked):
            c = masked[j]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and c in ";":
                break
            elif depth == 0 and c == ",":
                parts.append(masked[start:j])
                start = j + 1
            j += 1
        parts.append(masked[start:j])
        for k, part in enumerate(parts):
            name = re.match(r"\s*([A-Za-z_]\w*)\s*(.?)", part)
            if not name or name.group(1) in INT_TYPES + OTHER_TYPES + ("const",):
                continue
            if name.group(2) == "(" and k == 0:  # a function (its result's type), not a variable
                continue
            names.append((name.group(1), match.group(1), shared, name.group(2) == "["))
    return names


@dataclass
class Names:
    """What the kernel family's files declare: integer names, and a thread's own arrays and vectors (registers:
    an index one past their end is undefined behaviour, not a realistic bug)."""

    ints: set[str]
    local: set[str]


def family_names(masked_texts: Iterable[str]) -> Names:
    texts = list(masked_texts)
    ints, other, local, shared = set(), set(), set(), set()
    for m in texts:
        for name, kind, in_threadgroup, array in _declared(m, INT_TYPES + OTHER_TYPES):
            (ints if kind in INT_TYPES else other).add(name)
            if in_threadgroup:
                shared.add(name)
            elif array or kind in VECTOR_TYPES:
                local.add(name)
        # Arrays of other types (metal::simdgroup_float8x8 s[...], Chunk c[...], a template's instance such as
        # metal::simdgroup_matrix<InT, 8, 8> k[...]): the statement's first declarator.
        for statement in re.finditer(r"(?:^|(?<=[;{}]))[ \t]*((?:(?:const|constexpr|threadgroup|thread)\s+)*)"
                                     r"((?:\w+::)*\w+(?:<[^;{}<>]*>)?)\s+(\w+)\s*\[", m, re.M):
            if statement.group(2) in ("return", "else", "typename", "template", "using", "define"):
                continue
            # ... and the declarators after it (metal::simdgroup_matrix<InT, 8, 8> ka[TT], kb[TT]).
            end = m.find(";", statement.end())
            rest = re.sub(r"\[[^\[\]]*\]", "[]", m[statement.start(3):end if end >= 0 else len(m)])
            for declared in re.findall(r"(?:^|,)\s*(\w+)\s*\[", rest):
                (shared if "threadgroup" in statement.group(1) else local).add(declared)
    return Names(ints - other, local - shared)


def _strip_int_casts(expr: str) -> str:
    """``expr`` with function-style integer casts (``uint(x)``) replaced by 0: an integer, whatever x is."""
    while True:
        match = re.search(r"\b(%s)\s*\(" % "|".join(INT_TYPES), expr)
        if not match:
            return expr
        close = _close(expr, match.end() - 1)
        expr = expr[:match.start()] + "0" + expr[close + 1:]


def is_integer(expr: str, names: Names) -> bool:
    """Whether ``expr`` is an integer expression as far as the file's declarations tell (unknown: no)."""
    if "INFINITY" in expr or _FLOAT_LITERAL.search(expr):
        return False
    try:
        expr = _strip_int_casts(expr)
    except ValueError:
        return False
    for match in _IDENT.finditer(expr):
        name, before, after = match.group(), expr[:match.start()].rstrip(), expr[match.end():].lstrip()
        if before.endswith(".") or after.startswith("::") or name in INT_TYPES:
            continue  # a member (.x), a namespace (metal::), a cast ((uint)x)
        if after.startswith("("):
            if name in INT_FUNCTIONS:
                continue
            return False
        if (name in names.ints or name in INT_BUILTINS or re.fullmatch(r"[A-Z][A-Z0-9_]*", name)
                or re.search(r"_(shape|strides)$", name)):
            continue
        return False
    return True


def _is_bare_literal(expr: str) -> bool:
    return re.fullmatch(r"\(?\s*(0x[0-9a-fA-F]+|\d+)[uUlL]*\s*\)?", expr) is not None


def _plus(expr: str, delta: str) -> str:
    """``expr`` with `` - 1`` or `` + 1`` appended (in parentheses when a shift would bind it otherwise)."""
    return f"({expr}){delta}" if re.search(r"<<|>>", expr) else f"{expr}{delta}"


# --- the operators -------------------------------------------------------------------------

# The bound moved the way the relational mutants do not: for integers i < n + 1 is i <= n (that mutant), so i < n
# gets n - 1; i <= n gets n + 1, i > n gets n + 1 (i > n - 1 is i >= n), i >= n gets n - 1.
_BOUND = {"<": " - 1", "<=": " + 1", ">": " + 1", ">=": " - 1"}
_RELATIONAL = {"<": ("<=", ">"), "<=": ("<",), ">": (">=", "<"), ">=": (">",), "==": ("!=",), "!=": ("==",)}


def _line_of(m: str, i: int) -> str:
    return m[m.rfind("\n", 0, i) + 1:(m.find("\n", i) + 1 or len(m) + 1) - 1]


def _for_header(m: str, i: int) -> tuple[int, int] | None:
    """(the header's "(", its ")") of the ``for`` whose condition holds ``m[i]``, else None."""
    depth = 0
    for j in range(i - 1, -1, -1):
        c = m[j]
        if c in ")]}":
            depth += 1
        elif c in "([{":
            if depth == 0:
                if c == "(" and re.search(r"\bfor\s*$", m[:j]):
                    header = m[j + 1:_close(m, j)]
                    if header.count(";") == 2 and j + 1 + header.index(";") < i:
                        return j, _close(m, j)
                return None
            depth -= 1
    return None


def _loop_body(m: str, close: int) -> str:
    """The statement a ``for`` header closing at ``close`` governs: a braced block, or up to its ";" (nested
    headers' semicolons sit inside their parentheses)."""
    j = close + 1
    while j < len(m) and m[j].isspace():
        j += 1
    if j < len(m) and m[j] == "{":
        return m[j:_close(m, j) + 1]
    depth = 0
    for k in range(j, len(m)):
        if m[k] in "([{":
            depth += 1
        elif m[k] in ")]}":
            depth -= 1
        elif m[k] == ";" and depth == 0:
            return m[j:k + 1]
    return m[j:]


def _walks_a_register_array(m: str, i: int, var: str, names: Names) -> bool:
    """Whether the comparison at ``m[i]`` is the condition of a ``for`` over ``var`` whose body subscripts one of
    the thread's own arrays (registers) with it: one more iteration then writes or reads past that array."""
    header = _for_header(m, i)
    if header is None or not re.fullmatch(r"[A-Za-z_]\w*", var):
        return False
    body = _loop_body(m, header[1])
    for match in re.finditer(r"(?<![\w$])([A-Za-z_]\w*)((?:\s*\[[^\[\]]*\])+)", body):  # a[i], s[t][c]
        if match.group(1) in names.local and re.search(rf"\b{var}\b", match.group(2)):
            return True
    return False


def relational_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"(?<=\s)(<=|>=|==|!=|<|>)(?=\s)", m):
        if "static_assert" in _line_of(m, match.start()):
            continue
        op = match.group()
        ls, le = _operand_left(m, match.start())
        rs, re_ = _operand_right(m, match.end())
        if ls >= le or rs >= re_:
            continue
        lhs, rhs = t[ls:le], t[rs:re_]
        # i < N to i <= N in a loop that indexes a register array with i: the extra iteration is past the array's
        # end (undefined behaviour the compiler may delete), not a realistic bug; the bound operator's rule.
        past_registers = op == "<" and _walks_a_register_array(m, match.start(), lhs.strip(), names)
        for new in _RELATIONAL[op]:
            if new == ">=" and re.fullmatch(r"0[uU]?", rhs.strip()):
                continue  # x >= 0 holds for every unsigned x: a loop that never ends
            yield Site("relational", match.start(), match.end(), new, f"`{lhs} {op} {rhs}` -> `{lhs} {new} {rhs}`",
                       "a loop one past a register array" if new == "<=" and past_registers else "")
        if op in _BOUND and not _is_bare_literal(rhs) and is_integer(lhs, names) and is_integer(rhs, names):
            bound = _plus(rhs, _BOUND[op])
            yield Site("bound", rs, re_, bound, f"bound one off: `{lhs} {op} {rhs}` -> `{lhs} {op} {bound}`")


def index_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"(?<![\w.$\])])\b([A-Za-z_]\w*)\s*\[\s*([A-Za-z_]\w*)\s*\]", m):
        array, index = match.group(1), match.group(2)
        if (array in names.local or array in INT_TYPES + OTHER_TYPES or index not in names.ints
                or re.fullmatch(r"[A-Z][A-Z0-9_]*", index)):
            continue  # a register array, or a compile-time index
        start = match.start(2)
        yield Site("index", start, match.end(2), f"{index} + 1",
                   f"index one off: `{array}[{index}]` -> `{array}[{index} + 1]`")


def minmax_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"(?<![\w.$])((?:metal::)?(?:simd_|f)?)(min|max)(?=\s*\()", m):
        new = "max" if match.group(2) == "min" else "min"
        yield Site("minmax", match.start(2), match.end(2), new,
                   f"`{match.group()}` -> `{match.group(1)}{new}`")


def _ternary_bounds(m: str, q: int) -> tuple[int, int, int] | None:
    """(condition start, colon, false arm end) of the conditional whose "?" is at ``q``."""
    depth, nested, colon = 0, 0, None
    for j in range(q + 1, len(m)):
        c = m[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return None
            depth -= 1
        elif depth == 0 and c == "?":
            nested += 1
        elif depth == 0 and _is_colon(m, j):
            if nested:
                nested -= 1
            else:
                colon = j
                break
        elif depth == 0 and c == ";":
            return None
    if colon is None:
        return None
    depth, end = 0, None
    for j in range(colon + 1, len(m)):
        c = m[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                end = j
                break
            depth -= 1
        elif depth == 0 and (c in ";," or _is_colon(m, j)):
            end = j
            break
    if end is None:
        return None
    depth, start = 0, None
    for j in range(q - 1, -1, -1):
        c = m[j]
        if c in ")]}":
            depth += 1
        elif c in "([{":
            if depth == 0:
                start = j + 1
                break
            depth -= 1
        elif depth == 0:
            if c in ";,?" or _is_colon(m, j):
                start = j + 1
                break
            if c == "=" and not (j > 0 and m[j - 1] in "=!<>") and not (j + 1 < len(m) and m[j + 1] == "="):
                start = j + 1
                break
            if m[max(0, j - 5):j + 1] == "return" and (j < 6 or not (m[j - 6].isalnum() or m[j - 6] == "_")):
                start = j + 1
                break
    if start is None:
        return None
    return start, colon, end


def guard_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"\b(continue|return)\s*;", m):
        yield Site("guard", match.start(), match.end(), "{}", f"guard dropped: `{match.group(1)};` -> `{{}}`")
    for match in re.finditer(r"\?", m):
        bounds = _ternary_bounds(m, match.start())
        if bounds is None:
            continue
        start, colon, end = bounds
        while start < match.start() and t[start].isspace():
            start += 1
        while end > colon and t[end - 1].isspace():
            end -= 1
        cond, yes, no = (t[start:match.start()].strip(), t[match.end():colon].strip(), t[colon + 1:end].strip())
        if not (cond and yes and no):
            continue
        for arm, label in ((yes, "true"), (no, "false")):
            yield Site("guard", start, end, arm, f"`{cond} ? {yes} : {no}` always takes its {label} arm: `{arm}`")


def infinity_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"-\s*INFINITY\b", m):
        before = m[:match.start()].rstrip()
        if before and (before[-1].isalnum() or before[-1] in "_)]"):
            continue  # a binary minus
        yield Site("infinity", match.start(), match.end(), "0.0f", "`-INFINITY` -> `0.0f`")
    for match in re.finditer(r"(?<![\w.])0\.0f?(?![\w.])", m):
        before = m[:match.start()].rstrip()
        if not before:
            continue
        initial = before[-1] == "=" and not (len(before) > 1 and before[-2] in "=!<>")
        arm = before[-1] == "?" or (before[-1] == ":" and not before.endswith("::"))
        if initial or arm:
            yield Site("infinity", match.start(), match.end(), "-INFINITY",
                       f"`{match.group()}` -> `-INFINITY` ({'an initial value' if initial else 'a ?: arm'})")


def fma_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"(?<![\w.$:])(?:metal::)?fma\s*\(", m):
        args = _args(m, match.end() - 1)
        if len(args) != 3:
            continue
        (a0, a1), (b0, b1), (c0, c1) = args
        a, b, c = t[a0:a1], t[b0:b1], t[c0:c1]
        if b == c:
            continue
        yield Site("fma", a0, c1, f"{a}, {c}, {b}",
                   f"fma operands swapped: `fma({a}, {b}, {c})` -> `fma({a}, {c}, {b})`")


def barrier_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"\b(threadgroup_barrier|simdgroup_barrier|ROLE_BARRIER)\s*\(", m):
        close = _close(m, match.end() - 1)
        semicolon = re.match(r"\s*;", m[close + 1:])
        if not semicolon:
            continue
        end = close + 1 + semicolon.end()
        yield Site("barrier", match.start(), end, "", f"barrier dropped: `{t[match.start():end]}`")


def shuffle_sites(t: str, m: str, names: Names) -> Iterable[Site]:
    for match in re.finditer(r"\b(simd_shuffle_(?:xor|down|up)|__shfl_(?:xor|down|up)_sync)\s*\(", m):
        args = _args(m, match.end() - 1)
        at = 1 if match.group(1).startswith("simd") else 2
        if len(args) <= at:
            continue
        d0, d1 = args[at]
        d = t[d0:d1]
        atom = d if re.fullmatch(r"[\w.]+", d) else f"({d})"
        for new, label in ((f"{atom} / 2", "halved"), (f"{atom} * 2", "doubled")):
            yield Site("shuffle", d0, d1, new, f"{match.group(1)} distance {label}: `{d}` -> `{new}`")


SITE_FINDERS = (relational_sites, index_sites, minmax_sites, guard_sites, infinity_sites, fma_sites, barrier_sites,
                shuffle_sites)


def sites(text: str, names: Names | None = None) -> list[Site]:
    """Every mutation of ``text`` (one body file), in file order."""
    masked, _ = mask(text)
    names = names or family_names([masked])
    found = [s for finder in SITE_FINDERS for s in finder(text, masked, names)]
    return sorted(found, key=lambda s: (s.start, OPERATORS.index(s.operator)))


# --- mutants -------------------------------------------------------------------------------


def _line_bounds(text: str) -> list[int]:
    starts = [0]
    starts += [i + 1 for i, c in enumerate(text) if c == "\n"]
    return starts


def unique_context(text: str, start: int, end: int, new: str) -> tuple[str, str]:
    """(old, new) texts for a substitution: the lines holding text[start:end], grown by the lines after them, then
    before them, until the old text occurs exactly once in ``text``."""
    starts = _line_bounds(text)
    a = max(i for i, s in enumerate(starts) if s <= start)
    b = max(i for i, s in enumerate(starts) if s <= max(start, end - 1))
    last = len(starts) - 1
    grow_down = True
    while True:
        s = starts[a]
        e = starts[b + 1] - 1 if b < last else len(text)
        old = text[s:e]
        if old.strip() and text.count(old) == 1:
            return old, old[:start - s] + new + old[end - s:]
        if (grow_down or a == 0) and b < last:
            b += 1
        elif a > 0:
            a -= 1
        else:
            raise ValueError(f"no context of offset {start} occurs once")
        grow_down = not grow_down


def _arms_at(offset: int, base: tuple[str, ...], regions: list[tuple[int, int, frozenset]]) -> tuple[str, ...]:
    arms = set(base)
    for start, end, only in regions:
        if start <= offset < end:
            arms &= only
    return tuple(a for a in GENERATED_ARMS if a in arms)


def digest(line: str) -> str:
    return hashlib.sha1(line.strip().encode()).hexdigest()[:8]


def _name(path: str, operator: str, line_digest: str, k: int) -> str:
    stem = re.sub(r"\W", "_", path.removeprefix("impl/"))
    return f"gen_{stem}_{operator}_{line_digest}_{k}"


def file_mutants(path: str, text: str, target: str, names: Names) -> list[GeneratedMutant]:
    """Every mutant of one body file (equivalents included)."""
    masked, directives = mask(text)
    regions = _directive_arms(text, directives) + _run_by(path, text)
    base = COMPILED_BY.get(path, GENERATED_ARMS)
    starts = _line_bounds(text)
    counts: dict[tuple[str, str], int] = defaultdict(int)
    mutants = []
    for site in sites(text, names):
        arms = _arms_at(site.start, base, regions)
        if not arms:
            continue
        line = max(i for i, s in enumerate(starts) if s <= site.start)
        line_text = text[starts[line]:(starts[line + 1] - 1 if line + 1 < len(starts) else len(text))]
        line_digest = digest(line_text)
        k = counts[(line_digest, site.operator)]
        counts[(line_digest, site.operator)] += 1
        if site.excluded:
            continue
        old, new = unique_context(text, site.start, site.end, site.new)
        mutants.append(GeneratedMutant(
            name=_name(path, site.operator, line_digest, k), idea=f"{site.operator}: {site.what}", target=target,
            substitutions=(Substitution(path, old, new, "body"),), tests=TARGET_TESTS[target], arms=arms,
            id=f"{path}:{line_digest}:{site.operator}:{k}", operator=site.operator, file=path, line=line + 1))
    return mutants


def generate(root: Path = REPO_ROOT, *, equivalents: dict[str, str] | None = None, targets: Sequence[str] = (),
             operators: Sequence[str] = ()) -> list[GeneratedMutant]:
    """Every generated mutant of the body files under ``root`` that is not equivalent (``equivalents``: id ->
    why; default ``equivalents.EQUIVALENTS``), in file order; ``targets`` / ``operators`` narrow it."""
    if equivalents is None:
        from .equivalents import EQUIVALENTS as equivalents
    return [m for m in all_mutants(root, targets=targets, operators=operators) if m.id not in equivalents]


def all_mutants(root: Path = REPO_ROOT, *, targets: Sequence[str] = (), operators: Sequence[str] = ()
                ) -> list[GeneratedMutant]:
    """Every generated mutant, equivalents included."""
    unknown = set(targets) - set(TARGETS) or set(operators) - set(OPERATORS)
    if unknown:
        raise ValueError(f"unknown target or operator {sorted(unknown)}: targets {TARGETS}, operators {OPERATORS}")
    root = Path(root)
    files = body_files(root)
    texts = {path: Path(root, path).read_text() for path in files}
    by_target: dict[str, list[str]] = defaultdict(list)
    for path, target in files.items():
        by_target[target].append(path)
    mutants = []
    for target in sorted(by_target):
        if targets and target not in targets:
            continue
        names = family_names(mask(texts[p])[0] for p in by_target[target])
        for path in by_target[target]:
            mutants += [m for m in file_mutants(path, texts[path], target, names)
                        if not operators or m.operator in operators]
    return mutants


# --- the tests a run gives them ------------------------------------------------------------


def arm_of(node_id: str) -> str | None:
    """The arm a test id's parameters name (``test_x[cuda-bfloat16-...]``: cuda), or None."""
    if not node_id.endswith("]") or "[" not in node_id:
        return None
    params = node_id[node_id.index("[") + 1:-1].split("-")
    return next((p for p in params if p in ARMS), None)


def collect(selectors: Sequence[str], *, root: Path = REPO_ROOT, python: str = sys.executable,
            device: str | None = None) -> list[str]:
    """The node ids ``pytest --collect-only`` finds for ``selectors`` in ``root`` (its results file left alone)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "MLXGATE_"))}
    with tempfile.TemporaryDirectory(prefix="mlxgate-collect-") as tmp:
        env.update({"MLXGATE_RESULTS": str(Path(tmp, "results.jsonl")), "PYTHONDONTWRITEBYTECODE": "1"})
        command = [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *selectors]
        if device:
            command += ["--device", device]
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"collecting {' '.join(selectors)} failed (pytest exit {done.returncode}):\n"
                         f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return [line.strip() for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def resolve_tests(mutants: Sequence[GeneratedMutant], arms: Sequence[str], *, root: Path = REPO_ROOT,
                  python: str = sys.executable, device: str | None = None,
                  collected: Sequence[str] | None = None) -> list[GeneratedMutant]:
    """The mutants with their tests (files, test functions) replaced by the node ids of those tests that run on
    the compiled arms among ``arms`` (and among each mutant's own). Mutants none of whose arms is in ``arms``
    keep their tests: the run leaves them out. ``collected`` stands in for the collection (tests)."""
    from ..runner import selects

    compiled = [a for a in arms if a in GENERATED_ARMS]
    running = [m for m in mutants if set(m.arms) & set(compiled)]
    if not running:
        return list(mutants)
    selectors = list(dict.fromkeys(t for m in running for t in m.tests))
    ids = list(collected) if collected is not None else collect(selectors, root=root, python=python, device=device)
    by_selector = {s: [i for i in ids if selects(s, i) and arm_of(i) in compiled] for s in selectors}
    resolved = []
    for m in mutants:
        if not set(m.arms) & set(compiled):
            resolved.append(m)
            continue
        tests = tuple(dict.fromkeys(i for s in m.tests for i in by_selector[s] if arm_of(i) in m.arms))
        if not tests:
            raise ValueError(f"{m.name}: no test of {m.target} runs on {'/'.join(set(m.arms) & set(compiled))}")
        resolved.append(replace(m, tests=tests))
    return resolved
