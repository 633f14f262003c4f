"""Probes of what the Metal arm's bodies assume and only an Apple GPU settles.

No Mac has run the metal arm yet. The CUDA arm runs the same bodies behind a prelude that *models* Metal
(``impl/kernels/metal_compat.cuh``, ``metal_simdgroup.cuh``), and the front-end check type-checks the Metal units
against a stand-in of Metal's library (``impl/kernels/metal_frontend.py``); neither can say what Apple's compiler
and GPU do. These probes ask the GPU directly, one question each, and ``parity/test_metal_probes.py`` holds the
answers against what the project assumes, in the macos-metal job's ``make gate`` (under Metal's shader and API
validation: ``.github/workflows/macos-metal.yml``).

Contract: each probe is a ``KernelSpec`` with ``arms=("metal",)`` and a builder taking no arguments that returns the
``Launch`` its test runs, inputs included (deterministic), so the unit a test compiles is the unit the front-end
check renders and type-checks on Linux (``metal_probe_launches()`` lists them all). Beside each: the NumPy
expectation, computed from first principles, never from the CUDA prelude. The specs carry no ``compile_options``:
``compiled_kernel`` builds them exactly as it builds the product's kernels (MLX's default math mode).

What each settles (the test's docstring says what a pass proves):

1. ``FRAGMENT`` (``fragment_launch``): which (row, column) of an 8x8 ``simdgroup_float8x8`` /
   ``simdgroup_half8x8`` each lane's ``thread_elements()[0..1]`` hold, against ``sg_fragment_row`` /
   ``sg_fragment_col`` of ``impl/multi_query/multi_query.h`` (``fragment_row`` / ``fragment_col`` here are its
   Python port); and the write direction: elements placed by that layout, then ``simdgroup_store``\\ d.
2. ``LOAD`` (``load_launch``): ``simdgroup_load``'s ``matrix_origin`` and ``transpose_matrix`` from device and
   threadgroup memory with ``elements_per_row`` = 40 > 8: the project reads the origin as ``ulong2(column, row)``
   of the *source* and the transpose as applied to the 8x8 block found there (``metal_simdgroup.cuh``'s model;
   multi_query.h's ``simdgroup_load_x4`` is four loads at origins (8i, 0), transposed for the key fragments). Each
   load is stored twice: ``simdgroup_store``\\ d (no layout assumed) and lane by lane from ``thread_elements()``.
   ``LOAD_CASES`` lists the slots; ``load_expected`` computes the project's reading and the swapped one, (row,
   column), which for a transposed load is also an origin in the transposed matrix's own coordinates, so a
   failure says which one the GPU follows.
3. ``THREADGROUP_WIDTH`` (``threadgroup_width_launch``) and ``argmax_launches``: a 1024-thread group. MLX refuses a
   launch whose threadgroup exceeds the pipeline's ``maxTotalThreadsPerThreadgroup``, which depends on the
   compiled kernel (its registers), not only on the device: MLX users report 896, 640 and 448 for 1024-thread
   kernels on Apple GPUs whose trivial kernels take 1024. ``impl/normalized_argmax.py`` launches
   ``MAX_THREADS`` = 1024-thread groups at every vocabulary of 3969 or more; ``argmax_launches`` builds the row
   kernel (the metal arm's call) at that geometry per dtype and vocabulary, and the fused variant wherever its
   ``arms`` include metal (today they do not: it is CUDA-only). The trivial kernel tells a limit of the device
   from one of the kernel.
4. ``CONVERT`` (``conversion_launch``): float32 -> half and -> bfloat as the bodies spell them (``half(x)``,
   ``static_cast<half>(x)``, an implicit ``half h = x``, ``T(x)`` with T MLX's ``float16_t``; ``bfloat(x)``,
   ``static_cast<bfloat>(x)``, ``T(x)`` with ``bfloat16_t``), bit for bit against round-to-nearest-even
   (``half_rne_bits``: NumPy's float16 cast; ``bfloat_rne_bits``: RNE on the float32 bits) over
   ``conversion_values()``: the ties between chosen neighbours of each format (even below, even above), the
   float32 values either side, subnormals of both formats and of float32, overflow to infinity, infinities,
   signed zeros and NaNs (NaN compared as NaN).
5. ``SPECIALS`` (``specials_launch``): the -inf / NaN arithmetic the bodies' masking rests on (``-INFINITY`` as the
   empty max, ``exp(-inf) = 0``, NaN failing every comparison so ``x > -INFINITY ? x : -INFINITY`` maps NaN to
   -inf, ``simd_max`` over -inf lanes, ``select``), on runtime values the compiler cannot fold, under the
   default compile options (MLX 0.32.4: math mode "safe", which its documentation says keeps exp(-inf) == 0;
   whichever implementation ``exp`` resolves to there is the one gated, as the bodies call it).
   ``SPECIAL_CHECKS`` lists each expression and its IEEE result; those no body relies
   on (``metal::fast::exp``, ``max`` with a NaN operand, ``simd_max`` over a NaN lane) are findings, not gates.
   ``specials_kernel(math_mode)`` builds the same unit under another math mode (a name of its own: MLX caches
   compiled kernels by name) for the test's record of what the default protects against.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from impl import multi_query as mq
from impl import normalized_argmax as argmax
from impl.kernels import KernelSpec, Launch, full_header

__all__ = ["ARGMAX_VOCABS", "CONVERT", "CONVERSION_OUTPUTS", "FRAGMENT", "LOAD", "LOAD_CASES", "LOAD_COLS",
           "LOAD_ORIGINS", "LOAD_ROWS", "LOAD_SLOTS", "LoadCase", "SPECIALS", "SPECIAL_CHECKS",
           "SPECIAL_VALUES", "SpecialCheck", "THREADGROUP_LIMIT", "THREADGROUP_WIDTH", "argmax_launches",
           "argmax_logits", "bfloat_rne_bits", "conversion_groups", "conversion_launch", "conversion_values",
           "fragment_col", "fragment_launch", "fragment_row", "half_rne_bits", "held_order", "load_expected",
           "load_launch", "load_source_matrix", "metal_probe_launches", "special_expected",
           "specials_kernel", "specials_launch", "threadgroup_width_launch"]

METAL_ONLY = ("metal",)
SIMD = 32

# --- 1. fragment ownership --------------------------------------------------------------------------------------


def fragment_row(lane: int) -> int:
    """Row of the 8x8 that lane ``lane``'s thread_elements() hold: multi_query.h's ``sg_fragment_row``."""
    return ((lane // 4) & 4) + ((lane // 2) % 4)


def fragment_col(lane: int) -> int:
    """Column of lane ``lane``'s thread_elements()[0] (element 1 is the next column): ``sg_fragment_col``."""
    return ((lane // 4) & 2) * 2 + (lane % 2) * 2


FRAGMENT_SOURCE = """
  const uint lane = thread_index_in_simdgroup;
  const uint fm = sg_fragment_row(lane), fn = sg_fragment_col(lane);
  metal::simdgroup_float8x8 mf;
  metal::simdgroup_half8x8 mh;
  metal::simdgroup_load(mf, a, (ulong)8);
  metal::simdgroup_load(mh, ah, (ulong)8);
  metal::simdgroup_float8x8 wf;
  metal::simdgroup_half8x8 wh;
  for (uint e = 0; e < 2u; ++e) {
    held_f[2u * lane + e] = mf.thread_elements()[e];
    held_h[2u * lane + e] = mh.thread_elements()[e];
    assumed[2u * lane + e] = fm * 8u + fn + e;
    wf.thread_elements()[e] = float(fm * 8u + fn + e);
    wh.thread_elements()[e] = half(float(fm * 8u + fn + e));
  }
  metal::simdgroup_store(wf, wrote_f, (ulong)8);
  metal::simdgroup_store(wh, wrote_h, (ulong)8);
"""
# a / ah: the 8x8 with element (r, c) = r * 8 + c (exact in half). held_*: lane l's thread_elements()[e] at slot
# 2l + e; assumed: what multi_query.h's layout says that slot holds (the header as Metal compiled it); wrote_*: the
# matrix whose lanes set thread_elements() by that layout, stored row-major.
FRAGMENT = KernelSpec("metal_probe_fragment", ("a", "ah"), ("held_f", "held_h", "assumed", "wrote_f", "wrote_h"),
                      FRAGMENT_SOURCE, header=mq.HEADER, arms=METAL_ONLY)


def fragment_launch() -> Launch:
    values = np.arange(64, dtype=np.float32)
    return Launch(FRAGMENT, (mx.array(values), mx.array(values.astype(np.float16))), (), grid=(SIMD, 1, 1),
                  threadgroup=(SIMD, 1, 1), output_shapes=((64,),) * 5,
                  output_dtypes=(mx.float32, mx.float16, mx.uint32, mx.float32, mx.float16))


# --- 2. simdgroup_load: origin and transpose -------------------------------------------------------------------

LOAD_ROWS, LOAD_COLS = 40, 40  # the source: element (r, c) = r * 40 + c, < 1600: exact in half
# Origins as ulong2(column, row). Both readings of each (column, row or row, column) stay inside the 40 x 40
# source, so under shader validation the other reading is a wrong answer, never an out-of-bounds fault.
LOAD_ORIGINS = ((0, 0), (8, 0), (16, 0), (6, 5), (16, 8))


@dataclass(frozen=True)
class LoadCase:
    """One load of the probe: output slot ``slot`` of the ``element`` outputs (64 values each)."""

    slot: int
    element: str  # "float" (outputs stored_f / held_f) or "half" (stored_h / held_h)
    memory: str  # "device" (the kernel's input) or "threadgroup" (a copy of it)
    transpose: bool
    origin: tuple[int, int]  # (column, row): ulong2(origin) for "origin"; the pointer offset for "pointer"
    via: str  # "origin": ulong2(col, row); "pointer": src + row * 40 + col, origin 0; "x4[i]": simdgroup_load_x4

    @property
    def name(self) -> str:
        how = {"origin": f"ulong2({self.origin[0]}, {self.origin[1]})",
               "pointer": f"src + {self.origin[1]} * {LOAD_COLS} + {self.origin[0]}"}.get(self.via, self.via)
        return f"{self.element} from {self.memory}, {how}, transpose={str(self.transpose).lower()}"


def _load_cases() -> tuple[LoadCase, ...]:
    cases = []
    for element in ("float", "half"):
        slot = 0
        for memory in ("device", "threadgroup"):
            for transpose in (False, True):
                for origin in LOAD_ORIGINS:
                    for via in ("origin", "pointer"):
                        cases.append(LoadCase(slot, element, memory, transpose, origin, via))
                        slot += 1
        if element == "half":  # the key / value fragments' load: threadgroup half, both transposes
            for transpose in (False, True):
                for i in range(4):
                    cases.append(LoadCase(slot, element, "threadgroup", transpose, (8 * i, 0), f"x4[{i}]"))
                    slot += 1
    return tuple(cases)


LOAD_CASES = _load_cases()
LOAD_SLOTS = {element: sum(c.element == element for c in LOAD_CASES) for element in ("float", "half")}


def _load_line(case: LoadCase) -> str:
    matrix = {"float": "metal::simdgroup_float8x8", "half": "metal::simdgroup_half8x8"}[case.element]
    src = {("float", "device"): "sf", ("half", "device"): "sh", ("float", "threadgroup"): "tf",
           ("half", "threadgroup"): "th"}[case.element, case.memory]
    outs = {"float": "stored_f, held_f", "half": "stored_h, held_h"}[case.element]
    flag = str(case.transpose).lower()
    col, row = case.origin
    if case.via == "origin":
        load = f"metal::simdgroup_load(m, {src}, (ulong){LOAD_COLS}, ulong2({col}, {row}), {flag});"
    elif case.via == "pointer":
        load = f"metal::simdgroup_load(m, {src} + {row * LOAD_COLS + col}u, (ulong){LOAD_COLS}, ulong2(0, 0), {flag});"
    else:
        raise ValueError(case.via)
    return f"  {{ {matrix} m; {load} mlxgate_probe_emit(m, {outs}, {case.slot}u, lane); }}\n"


def _x4_lines() -> str:
    lines = ""
    for transpose in (False, True):
        first = next(c.slot for c in LOAD_CASES if c.via == "x4[0]" and c.transpose == transpose)
        lines += (f"  {{ metal::simdgroup_half8x8 w[4];\n"
                  f"    simdgroup_load_x4(w[0], w[1], w[2], w[3], th, (ulong){LOAD_COLS}, {str(transpose).lower()});\n"
                  f"    for (uint i = 0; i < 4u; ++i) mlxgate_probe_emit(w[i], stored_h, held_h, {first}u + i, lane);"
                  " }\n")
    return lines


LOAD_SOURCE = (f"""
  const uint lane = thread_index_in_simdgroup;
  threadgroup float tf[{LOAD_ROWS * LOAD_COLS}];
  threadgroup half th[{LOAD_ROWS * LOAD_COLS}];
  for (uint i = lane; i < {LOAD_ROWS * LOAD_COLS}u; i += 32u) {{
    tf[i] = sf[i];
    th[i] = sh[i];
  }}
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
""" + "".join(_load_line(c) for c in LOAD_CASES if c.via in ("origin", "pointer")) + _x4_lines())

# Each load's matrix, stored twice at its slot: row-major by simdgroup_store (no layout assumed) and lane l's
# thread_elements()[e] at 2l + e (what the bodies read). multi_query.h supplies simdgroup_load_x4.
LOAD_HEADER = mq.HEADER + """
template <typename T>
METAL_FUNC void mlxgate_probe_emit(metal::simdgroup_matrix<T, 8, 8> m, device T* stored, device T* held, uint slot,
                                   uint lane) {
  metal::simdgroup_store(m, stored + 64u * slot, (ulong)8);
  held[64u * slot + 2u * lane] = m.thread_elements()[0];
  held[64u * slot + 2u * lane + 1u] = m.thread_elements()[1];
}
"""
LOAD = KernelSpec("metal_probe_load", ("sf", "sh"), ("stored_f", "held_f", "stored_h", "held_h"), LOAD_SOURCE,
                  header=LOAD_HEADER, arms=METAL_ONLY)


def load_source_matrix() -> np.ndarray:
    """The 40 x 40 source: element (r, c) = r * 40 + c (float32)."""
    return np.arange(LOAD_ROWS * LOAD_COLS, dtype=np.float32).reshape(LOAD_ROWS, LOAD_COLS)


def load_launch() -> Launch:
    source = load_source_matrix().reshape(-1)
    f, h = LOAD_SLOTS["float"] * 64, LOAD_SLOTS["half"] * 64
    return Launch(LOAD, (mx.array(source), mx.array(source.astype(np.float16))), (), grid=(SIMD, 1, 1),
                  threadgroup=(SIMD, 1, 1), output_shapes=((f,), (f,), (h,), (h,)),
                  output_dtypes=(mx.float32, mx.float32, mx.float16, mx.float16))


def load_expected(case: LoadCase, reading: str = "project") -> np.ndarray:
    """The 8x8 (float32) ``case`` loads under ``reading``: ``"project"``, the origin is ulong2(column, row) of the
    source and the transpose applies to the block there; ``"swapped"``, the origin is (row, column) of the source,
    which for a transposed load is also the origin in the transposed matrix's own coordinates. A pointer-offset
    load has no origin to read: both readings give the block at the offset."""
    col, row = case.origin
    if reading == "swapped" and case.via != "pointer":
        col, row = row, col
    elif reading not in ("project", "swapped"):
        raise ValueError(f"reading must be 'project' or 'swapped', got {reading!r}")
    block = load_source_matrix()[row:row + 8, col:col + 8]
    return block.T.copy() if case.transpose else block.copy()


def held_order(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` (8x8) as the lanes hold it under the assumed layout: slot 2l + e = (row(l), col(l) + e)."""
    return np.array([matrix[fragment_row(lane), fragment_col(lane) + e] for lane in range(SIMD) for e in (0, 1)],
                    dtype=matrix.dtype)


# --- 3. 1024-thread groups ---------------------------------------------------------------------------------------

THREADGROUP_LIMIT = argmax.MAX_THREADS  # the widest group the product launches (normalized argmax's rows)
THREADGROUP_WIDTH_SOURCE = """
  const uint t = thread_position_in_threadgroup.x;
  seen[t] = t * step[t % 8u];
  if (t == 0) width[0] = threads_per_threadgroup.x;
"""
THREADGROUP_WIDTH = KernelSpec("metal_probe_threadgroup_width", ("step",), ("seen", "width"),
                               THREADGROUP_WIDTH_SOURCE, arms=METAL_ONLY)
# Vocabularies at which the row kernel takes MAX_THREADS threads (any V >= 3969): Llama's and Qwen's.
ARGMAX_VOCABS = (32000, 151936)


def threadgroup_width_launch() -> Launch:
    """Every thread t of one THREADGROUP_LIMIT-thread group writes t (step is ones), thread 0 the group's width."""
    return Launch(THREADGROUP_WIDTH, (mx.ones((8,), mx.uint32),), (), grid=(THREADGROUP_LIMIT, 1, 1),
                  threadgroup=(THREADGROUP_LIMIT, 1, 1), output_shapes=((THREADGROUP_LIMIT,), (1,)),
                  output_dtypes=(mx.uint32, mx.uint32))


def argmax_logits(dtype: mx.Dtype, vocab: int, rows: int = 4) -> mx.array:
    """Seeded logits [rows, vocab] in ``dtype``, each row's maximum planted at a distinct column."""
    rng = np.random.default_rng(vocab)
    x = rng.standard_normal((rows, vocab)).astype(np.float32) * 3.0
    for r in range(rows):
        x[r, (r * 7919 + 11) % vocab] = 40.0
    return mx.array(x).astype(dtype)


def argmax_launches(dtype: mx.Dtype, vocab: int) -> list[Launch]:
    """The launches the metal arm's normalized argmax makes for ``argmax_logits(dtype, vocab)``: every argmax
    spec whose ``arms`` include metal, at its production geometry (``row_launch`` / ``fused_launch``)."""
    x = argmax_logits(dtype, vocab)
    launches = [argmax.row_launch(x, mx.logsumexp(x, axis=-1, keepdims=True)), argmax.fused_launch(x)]
    return [launch for launch in launches if "metal" in launch.spec.arms]


# --- 4. float32 -> half / bfloat ----------------------------------------------------------------------------------

CONVERT_SOURCE = """
  const uint i = thread_position_in_grid.x;
  const float v = x[i];
  const half implicit_h = v;
  h_ctor[i] = as_type<ushort>(half(v));
  h_cast[i] = as_type<ushort>(static_cast<half>(v));
  h_implicit[i] = as_type<ushort>(implicit_h);
  h_t[i] = as_type<ushort>(H(v));
  b_ctor[i] = as_type<ushort>(bfloat(v));
  b_cast[i] = as_type<ushort>(static_cast<bfloat>(v));
  b_t[i] = as_type<ushort>(B(v));
"""
# Output name -> (format, the spelling converted).
CONVERSION_OUTPUTS = {
    "h_ctor": ("half", "half(x)"),
    "h_cast": ("half", "static_cast<half>(x)"),
    "h_implicit": ("half", "half h = x"),
    "h_t": ("half", "T(x), T = float16_t"),
    "b_ctor": ("bfloat", "bfloat(x)"),
    "b_cast": ("bfloat", "static_cast<bfloat>(x)"),
    "b_t": ("bfloat", "T(x), T = bfloat16_t"),
}
CONVERT = KernelSpec("metal_probe_convert", ("x",), tuple(CONVERSION_OUTPUTS), CONVERT_SOURCE, arms=METAL_ONLY)


def _half_neighbours() -> list[tuple[float, float]]:
    """(h, the next half above h) as float64, for chosen non-negative finite halves h: subnormals, the normal
    boundary, around 1, and the largest (whose next value, 65536, is past the format: its tie overflows)."""
    chosen = (0x0000, 0x0001, 0x0002, 0x0003, 0x03FE, 0x03FF, 0x0400, 0x0401, 0x3BFF, 0x3C00, 0x3C01, 0x3C02,
              0x4248, 0x5A3F, 0x7BFE, 0x7BFF)
    pairs = []
    for bits in chosen:
        lo = float(np.uint16(bits).view(np.float16))
        hi = 65536.0 if bits == 0x7BFF else float(np.uint16(bits + 1).view(np.float16))
        pairs.append((lo, hi))
    return pairs


def _bits(value: float) -> int:
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def _conversion_table() -> list[tuple[str, int]]:
    """(group, float32 bits) of every input. Bits, not floats: a signalling NaN's payload must reach the GPU."""
    table: list[tuple[str, int]] = []
    # Half: each tie between neighbours, the float32 values either side, the lower neighbour itself; both signs.
    for lo, hi in _half_neighbours():
        mid = (lo + hi) / 2
        assert float(np.float32(mid)) == mid  # every midpoint of two halves is a float32
        group = "half subnormal" if hi <= 2.0**-14 else ("half overflow" if hi == 65536.0 else "half tie")
        m = _bits(mid)
        for sign in (0, 0x80000000):
            table += [(group, bits ^ sign) for bits in (m, m - 1, m + 1, _bits(lo))]
    # Bfloat: the tie (b << 16 | 0x8000), the float32 values either side, b itself and one float32 ulp above it.
    for b in (0x0000, 0x0001, 0x0002, 0x0003, 0x007E, 0x007F, 0x0080, 0x0081, 0x3F7F, 0x3F80, 0x3F81, 0x3F82,
              0x4049, 0x7F7E, 0x7F7F):
        group = "bfloat subnormal" if b < 0x0080 else ("bfloat overflow" if b == 0x7F7F else "bfloat tie")
        mid = (b << 16) | 0x8000
        for sign in (0, 0x80000000):
            table += [(group, bits | sign) for bits in (mid, mid - 1, mid + 1, b << 16, (b << 16) + 1)]
    # FLT_MAX, 1e6, 65520 (half's overflowing tie) and the float32 below it, all with both signs.
    table += [("overflow", bits) for bits in (0x7F7FFFFF, 0xFF7FFFFF, 0x49742400, 0xC9742400, 0x477FF000,
                                              0x477FEFFF, 0xC77FF000, 0xC77FEFFF)]
    # float32 subnormals (the smallest, mid-range, the largest), FLT_MIN, 2^-25 (half's tie with 0) either side.
    table += [("float32 subnormal", bits) for bits in (0x00000001, 0x00000002, 0x00400000, 0x007FFFFF, 0x80000001,
                                                       0x80400000, 0x00800000, 0x33000000, 0x33000001, 0x32FFFFFF)]
    table += [("infinity and zero", bits) for bits in (0x7F800000, 0xFF800000, 0x00000000, 0x80000000)]
    # NaNs: quiet, negative, signalling with the payload in the low 16 bits (a truncating bfloat conversion would
    # make those infinities), a high payload, all ones.
    table += [("nan", bits) for bits in (0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FA00000, 0x7FFFFFFF)]
    table += [("padding", 0x3F800000)] * (-len(table) % 64)  # 1.0, to whole 64-thread groups
    return table


def conversion_values() -> np.ndarray:
    """The float32 inputs, a multiple of 64 of them (``conversion_groups()`` names each one's group)."""
    return np.array([bits for _, bits in _conversion_table()], dtype=np.uint32).view(np.float32)


def conversion_groups() -> list[str]:
    return [group for group, _ in _conversion_table()]


def conversion_launch() -> Launch:
    n = len(conversion_values())
    return Launch(CONVERT, (mx.array(conversion_values()),), (("H", mx.float16), ("B", mx.bfloat16)),
                  grid=(n, 1, 1), threadgroup=(64, 1, 1), output_shapes=((n,),) * len(CONVERSION_OUTPUTS),
                  output_dtypes=(mx.uint16,) * len(CONVERSION_OUTPUTS))


def half_rne_bits(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to half, nearest even (NumPy's float32 -> float16 cast), as uint16 bits."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to infinity is the rounding's answer
        return np.asarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)


def bfloat_rne_bits(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` rounded to bfloat, nearest even, as uint16 bits: the top half of the float32 bits plus
    0x7fff and the kept part's lowest bit, carried (an overflow carries into the exponent: infinity). A NaN keeps
    its sign and top payload bits with the quiet bit set (rounding could carry a NaN into an infinity)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, (u >> 16) | 0x0040, rounded).astype(np.uint16)


# --- 5. -inf / NaN under the default math mode -------------------------------------------------------------------


@dataclass(frozen=True)
class SpecialCheck:
    """One expression over the runtime values (``SPECIALS_SOURCE``), its IEEE result, and whether a body relies
    on it (a gate) or not (a finding: recorded, never failed)."""

    name: str
    expression: str  # Metal, of ninf, pinf, qnan, one, zero, mtwo, three and the SIMD results peak, empty, nanlane
    expected: float | bool  # a bool: the expression is a condition, stored as 1.0 / 0.0
    relied_on: bool = True


NAN = float("nan")
INF = float("inf")
SPECIAL_CHECKS = (
    # exp at -inf: a masked score (-inf) minus the running max gives weight 0
    SpecialCheck("exp(-inf) == 0", "exp(ninf)", 0.0),
    SpecialCheck("metal::exp(-inf) == 0", "metal::exp(ninf)", 0.0),
    SpecialCheck("metal::precise::exp(-inf) == 0", "metal::precise::exp(ninf)", 0.0),
    SpecialCheck("exp(-inf - 1) == 0 (a masked score minus a finite max)", "exp(ninf - one)", 0.0),
    SpecialCheck("exp(0) == 1 (a score equal to the max)", "exp(zero)", 1.0),
    SpecialCheck("exp(+inf) == +inf", "exp(pinf)", INF),
    SpecialCheck("online-softmax step from the empty max: 0 * exp(-inf - 3) + exp(3 - 3) == 1",
                 "zero * exp(ninf - three) + exp(three - three)", 1.0),
    SpecialCheck("metal::fast::exp(-inf) (no body calls fast::)", "metal::fast::exp(ninf)", 0.0, relied_on=False),
    SpecialCheck("metal::fast::exp(-inf - 1) (no body calls fast::)", "metal::fast::exp(ninf - one)", 0.0,
                 relied_on=False),
    # -inf - -inf is NaN: why the bodies guard exp(m - next) when both are -inf
    SpecialCheck("-inf - -inf is NaN", "ninf - ninf", NAN),
    SpecialCheck("-inf - (-INFINITY) is NaN", "ninf - (-INFINITY)", NAN),
    SpecialCheck("exp(-inf - -inf) is NaN", "exp(ninf - ninf)", NAN),
    SpecialCheck("isnan(-inf - -inf)", "isnan(ninf - ninf)", True),
    # the literals the bodies start from
    SpecialCheck("-INFINITY is -inf", "-INFINITY", -INF),
    SpecialCheck("INFINITY is +inf", "INFINITY", INF),
    SpecialCheck("-(-inf) is +inf", "-ninf", INF),
    # max with the empty max
    SpecialCheck("metal::max(1, -INFINITY) == 1", "metal::max(one, -INFINITY)", 1.0),
    SpecialCheck("metal::max(-inf, -INFINITY) == -inf", "metal::max(ninf, -INFINITY)", -INF),
    SpecialCheck("metal::max(-INFINITY, -2) == -2", "metal::max(-INFINITY, mtwo)", -2.0),
    SpecialCheck("max(-inf, 3) == 3", "max(ninf, three)", 3.0),
    SpecialCheck("simd_max: -inf on 31 lanes, 3 on one", "peak", 3.0),
    SpecialCheck("simd_max: -inf on every lane", "empty", -INF),
    SpecialCheck("metal::max(NaN, 1) (no body relies on it)", "metal::max(qnan, one)", 1.0, relied_on=False),
    SpecialCheck("metal::max(1, NaN) (no body relies on it)", "metal::max(one, qnan)", 1.0, relied_on=False),
    SpecialCheck("metal::fmax(NaN, 1) (no body relies on it)", "metal::fmax(qnan, one)", 1.0, relied_on=False),
    SpecialCheck("simd_max: NaN on one lane, 1 elsewhere (no body relies on it)", "nanlane", 1.0, relied_on=False),
    # classification
    SpecialCheck("isnan(NaN)", "isnan(qnan)", True),
    SpecialCheck("isnan(1) is false", "isnan(one)", False),
    SpecialCheck("isnan(-inf) is false", "isnan(ninf)", False),
    SpecialCheck("isinf(-inf)", "isinf(ninf)", True),
    SpecialCheck("isinf(+inf)", "isinf(pinf)", True),
    SpecialCheck("isinf(NaN) is false", "isinf(qnan)", False),
    SpecialCheck("isinf(1) is false", "isinf(one)", False),
    # NaN compares false: the argmax body's `mine > -INFINITY ? mine : -INFINITY` maps NaN to -inf
    SpecialCheck("NaN > -INFINITY is false", "qnan > -INFINITY", False),
    SpecialCheck("NaN < 1 is false", "qnan < one", False),
    SpecialCheck("1 > NaN is false", "one > qnan", False),
    SpecialCheck("NaN == NaN is false", "qnan == qnan", False),
    SpecialCheck("NaN != NaN is true", "qnan != qnan", True),
    SpecialCheck("NaN >= NaN is false", "qnan >= qnan", False),
    SpecialCheck("NaN <= 1 is false", "qnan <= one", False),
    SpecialCheck("x > -INFINITY ? x : -INFINITY maps NaN to -inf", "qnan > -INFINITY ? qnan : -INFINITY", -INF),
    SpecialCheck("x > -INFINITY ? x : -INFINITY keeps 1", "one > -INFINITY ? one : -INFINITY", 1.0),
    # -inf compares as a number: `ms == -INFINITY` skips an empty partition
    SpecialCheck("-inf == -INFINITY", "ninf == -INFINITY", True),
    SpecialCheck("-inf > -INFINITY is false", "ninf > -INFINITY", False),
    SpecialCheck("1 > -INFINITY", "one > -INFINITY", True),
    SpecialCheck("-inf < -2", "ninf < mtwo", True),
    # select(a, b, c) is c ? b : a
    SpecialCheck("select(-inf, 1, NaN > 0) == -inf", "select(ninf, one, qnan > zero)", -INF),
    SpecialCheck("select(0, 1, isnan(NaN)) == 1", "select(zero, one, bool(isnan(qnan)))", 1.0),
    SpecialCheck("select(1, NaN, 1 > 0) is NaN", "select(one, qnan, one > zero)", NAN),
    # the lse of a row whose max is infinite: isinf(max) ? max : log(sum) + max
    SpecialCheck("log(0) == -inf", "log(zero)", -INF),
    SpecialCheck("isinf(max) ? max : log(1) + max with max -inf", "isinf(ninf) ? ninf : log(one) + ninf", -INF),
    # 16-bit conversions of the specials
    SpecialCheck("float(half(-inf)) == -inf", "float(half(ninf))", -INF),
    SpecialCheck("float(half(NaN)) is NaN", "float(half(qnan))", NAN),
    SpecialCheck("float(bfloat(-inf)) == -inf", "float(bfloat(ninf))", -INF),
)
SPECIAL_VALUES = np.array([-INF, INF, NAN, 1.0, 0.0, -2.0, 3.0, 0.5], dtype=np.float32)


def _specials_source() -> str:
    lines = []
    for i, check in enumerate(SPECIAL_CHECKS):
        condition = isinstance(check.expected, bool)
        value = f"(({check.expression}) ? 1.0f : 0.0f)" if condition else f"float({check.expression})"
        lines.append(f"    r[{i}] = {value};  // {check.name}")
    return ("""
  const float ninf = v[0], pinf = v[1], qnan = v[2], one = v[3], zero = v[4], mtwo = v[5], three = v[6];
  const uint lane = thread_index_in_simdgroup;
  const float peak = simd_max(lane == 5u ? three : ninf);
  const float empty = simd_max(ninf);
  const float nanlane = simd_max(lane == 7u ? qnan : one);
  if (lane == 0u) {
""" + "\n".join(lines) + "\n  }\n")


SPECIALS_SOURCE = _specials_source()
SPECIALS = KernelSpec("metal_probe_specials", ("v",), ("r",), SPECIALS_SOURCE, arms=METAL_ONLY)


def specials_launch() -> Launch:
    """One SIMD group over ``SPECIAL_VALUES`` (-inf, +inf, NaN, 1, 0, -2, 3, 0.5); lane 0 writes r[i] for
    ``SPECIAL_CHECKS[i]``."""
    return Launch(SPECIALS, (mx.array(SPECIAL_VALUES),), (), grid=(SIMD, 1, 1), threadgroup=(SIMD, 1, 1),
                  output_shapes=((len(SPECIAL_CHECKS),),), output_dtypes=(mx.float32,))


def special_expected() -> np.ndarray:
    return np.array([float(c.expected) for c in SPECIAL_CHECKS], dtype=np.float32)


def specials_kernel(math_mode: str):
    """``SPECIALS`` as ``mx.fast.metal_kernel`` builds it with ``compile_options={"math_mode": math_mode}``, under
    a name of its own (MLX caches compiled kernels by name: the default-mode build must not be served). For the
    test's record only; the product's kernels are built by ``compiled_kernel``, with no compile options."""
    launch = specials_launch()
    return mx.fast.metal_kernel(name=f"{launch.name}_{math_mode}", input_names=list(SPECIALS.input_names),
                                output_names=list(SPECIALS.output_names), source=SPECIALS.source,
                                header=full_header(SPECIALS, "metal"), compile_options={"math_mode": math_mode})


# --- all of them ----------------------------------------------------------------------------------------------------


def metal_probe_launches() -> list[Launch]:
    """Every launch the probes' tests make: the five probe units and the argmax instances at production geometry
    (per dtype and ``ARGMAX_VOCABS``), for the front-end check to render and type-check."""
    launches = [fragment_launch(), load_launch(), threadgroup_width_launch(), conversion_launch(), specials_launch()]
    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        for vocab in ARGMAX_VOCABS:
            launches += argmax_launches(dtype, vocab)
    return launches
