"""Hypothesis strategies for the decode kernels: kvq4 decode and multi-query causal attention.

A case is one call of ``impl.kvq4_decode.kvq4_decode`` or
``impl.multi_query.multi_query_causal`` plus what the oracles need, as NumPy::

    @given(case=sts.kvq4_cases())
    def test_x(case): kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, block=case.block)

    @given(case=sts.multi_query_cases())
    def test_y(case): multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, splits=case.splits)

Layouts (``CACHE_LAYOUTS``): the K/V handed to the kernel are views of a larger
cache whose other slots hold NaN (float planes) or random bits (packed codes),
so a stray read shows in the output: ``contiguous`` (no view), ``slice`` (the
first N positions), ``window`` (positions off..off+N), ``heads`` (a slice of
heads too), ``transposed`` (stored [.., W, capacity] and viewed back: the
last axis is not unit-stride) and ``reversed`` (stored newest-first and viewed
back with a step of -1: the token axis has a negative stride, which the
kernels' 64-bit address arithmetic must carry).

kvq4: GQA factor 2/4/6/8 over 1-2 KV heads, head dim 256, blocks 64..512
(multiples of 4 and not), N straddling block and sub-chunk edges
(k * block + {-1, 0, 1}, k * ceil(block / 4) + {-1, 0, 1}) or uniform. K/V are
quantized with ``reference.quant.quantize`` (MLX's CPU algorithm, device
independent); ``k32`` / ``v32`` are what the kernel dequantizes
(``fma(scale, code, bias)`` in float32: exact in float64, rounded once), ``kT``
/ ``vT`` what ``mx.dequantize`` gives (``reference.quant.dequantize``, in T).

multi-query: L 1..8, GQA factor so that NQ = REP * L <= 64 (often exactly 64),
D 64/128/256, N >= L straddling 32-key block and 256-key split edges or
uniform, and sometimes forced ``splits`` (up to one key per split, so that
later splits hide all their keys from the early rows: -inf partials).

Both draw score peaks half the time (``attention.score_peaks``): an attention sink
at token 0 and an outlier late, scores 220 and 100 (either the larger), so the
blocks, sub-chunks and splits holding them have maxima more than float32 exp's
range (88.7) apart; the builders take explicit ``peaks`` too.

Arrays come from a NumPy generator seeded by Hypothesis (drawing floats one by
one would dominate the run time; the seed still replays and shrinks).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
from hypothesis import strategies as st

from impl.kvq4_decode import GROUP_SIZE, HEAD_DIM, SUB, QuantizedKV
from impl.multi_query import BK, MAX_ROWS, MAX_SPLITS, MAX_VECTORS, SPLIT_KEYS
from reference import metrics
from reference import quant as quant_ref
from reference.attention import NOISE_FLOOR_TERMS, attention_noise_floor, attention_ref

from .attention import numpy_dtype, plant_score_peaks, score_peaks, to_mx

__all__ = [
    "ALIGNMENT_FAULTS",
    "VECTOR_START",
    "CACHE_LAYOUTS",
    "DECODE_DTYPES",
    "KVQ4_BLOCKS",
    "KVQ4_GQA",
    "MULTI_QUERY_HEAD_DIMS",
    "Kvq4Case",
    "MultiQueryCase",
    "build_kvq4_case",
    "build_multi_query_case",
    "cache_view",
    "misaligned_layout",
    "misaligned_view",
    "decode_error_floor",
    "kvq4_cases",
    "kvq4_oracles",
    "multi_query_cases",
    "multi_query_gate",
    "multi_query_oracles",
    "working_dtype",
]

DECODE_DTYPES = ("bfloat16", "float16", "float32")
CACHE_LAYOUTS = ("contiguous", "slice", "window", "heads", "transposed", "reversed")
KVQ4_GQA = (2, 4, 6, 8)
# 102: a ragged block (not a multiple of SUB = 4), where a sub-chunk could overrun its block's end.
KVQ4_BLOCKS = (64, 100, 102, 128, 256, 512)
MULTI_QUERY_HEAD_DIMS = (64, 128, 256)


def cache_view(x: np.ndarray, dtype: str | None, layout: str, rng: np.random.Generator) -> mx.array:
    """``x`` [1, KVH, N, W] as the view ``layout`` names, inside a larger cache poisoned elsewhere.

    ``dtype``: the float dtype of the plane, or None for packed uint32 codes
    (poisoned with random bits; their NaN scales expose a stray read).
    """
    if layout not in CACHE_LAYOUTS:
        raise ValueError(f"layout must be one of {CACHE_LAYOUTS}, got {layout!r}")
    if layout == "contiguous":
        return to_mx(x, dtype)
    _, kvh, n, w = x.shape
    off = 0 if layout == "slice" else int(rng.integers(1, 9))
    h0 = 1 if layout == "heads" else 0
    capacity = off + n + int(rng.integers(1, 9))
    shape = (1, kvh + 2 * h0, capacity, w)
    if dtype is None:
        cache = rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32)
    else:
        cache = np.full(shape, np.nan, np.float32)
    cache[:, h0:h0 + kvh, off:off + n] = x
    if layout == "transposed":  # stored [1, H, W, capacity]: the view's last axis has stride capacity
        view = to_mx(np.ascontiguousarray(cache.transpose(0, 1, 3, 2)), dtype).transpose(0, 1, 3, 2)
    elif layout == "reversed":  # stored [1, H, capacity, W] newest-first: the view's token stride is -W
        view = to_mx(np.ascontiguousarray(cache[:, :, ::-1]), dtype)[:, :, ::-1]
    else:
        view = to_mx(cache, dtype)
    return view[:, h0:h0 + kvh, off:off + n]


# The ways a view can sit off the 16-byte grid and still be in the multi-query contract (unit last stride, head and
# row strides multiples of 4 elements, a 4-element-aligned start): ``misaligned_view``.
ALIGNMENT_FAULTS = ("head_stride", "row_stride", "start")
# A view that starts one element into its buffer, strides aligned: off the 4-element grid of multi-query's vector
# loads (2 bytes in a 16-bit dtype, 4 in float32), which only a row-contiguous view with an odd offset reaches
# (``flat[1:].reshape(...)``). The CUDA arm reads it by elements (``starts_vector_aligned``); Metal's contract excludes
# it (impl.multi_query's docstring).
VECTOR_START = "vector_start"


def misaligned_layout(n: int, w: int, fault: str) -> tuple[int, int, int]:
    """``misaligned_view``'s (head stride, row stride, start) in elements for N rows of W elements."""
    if fault not in ALIGNMENT_FAULTS + (VECTOR_START,):
        raise ValueError(f"fault must be one of {ALIGNMENT_FAULTS + (VECTOR_START,)}, got {fault!r}")
    if w % 8:
        raise ValueError(f"w (x's last axis) must be a multiple of 8, got {w}")
    capacity = n + 8 + n % 2  # even, so a row stride of W + 4 keeps the head stride a multiple of 8
    row = w + 4 if fault == "row_stride" else w + 8 if fault in ("start", VECTOR_START) else w
    start = 4 if fault == "start" else 1 if fault == VECTOR_START else 0
    return capacity * row + (4 if fault == "head_stride" else 0), row, start


def misaligned_view(x: np.ndarray, dtype: str, fault: str) -> mx.array:
    """``x`` [1, KVH, N, W] (W a multiple of 8) as a view of a NaN-poisoned buffer that is 16-byte aligned in every
    way but one (``fault``): its head stride ``head_stride`` C * W + 4 elements (C = N + 8, rounded up to even), its
    row stride ``row_stride`` W + 4, or its ``start`` 4 elements into the buffer (rows W + 8 apart). 4 elements are
    8 bytes in a 16-bit dtype (16 in float32, which stays aligned): a kernel that copies 16-byte chunks only where
    the strides and the start allow it (multi-query's ring) must take its element path here, for K or V alone.
    ``VECTOR_START``: the start 1 element in (rows W + 8 apart), off the 4-element grid too."""
    _, kvh, n, w = x.shape
    head, row, start = misaligned_layout(n, w, fault)
    buffer = np.full(start + kvh * head + 8, np.nan, np.float32)
    for h in range(kvh):
        for t in range(n):
            at = start + h * head + t * row
            buffer[at:at + w] = x[0, h, t]
    return mx.as_strided(to_mx(buffer, dtype), (1, kvh, n, w), (kvh * head, head, row, 1), start)


class _Case:
    """Readable reprs: Hypothesis prints falsifying examples with these, not the arrays."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id}, seed={self.seed})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(repr(self))


# --- kvq4 decode --------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class Kvq4Case(_Case):
    dtype: str
    h: int
    kvh: int
    n: int
    block: int
    layout: str
    scale: float
    q: np.ndarray  # [1, H, 1, 256] in dtype
    k32: np.ndarray  # [1, KVH, N, 256] float32: the K the kernel dequantizes, fma(scale, code, bias)
    v32: np.ndarray
    kT: np.ndarray  # [1, KVH, N, 256] in dtype: mx.dequantize's K (reference.quant.dequantize)
    vT: np.ndarray
    keys: QuantizedKV = field(repr=False)  # mx views of the packed / scales / biases planes
    values: QuantizedKV = field(repr=False)
    seed: int = 0

    @property
    def q_mx(self) -> mx.array:
        return to_mx(self.q, self.dtype)

    @property
    def rep(self) -> int:
        return self.h // self.kvh

    @property
    def id(self) -> str:
        return f"{self.dtype}-H{self.h}-KVH{self.kvh}-N{self.n}-block{self.block}-{self.layout}"


def _fma_dequantize(packed: np.ndarray, scales: np.ndarray, biases: np.ndarray) -> np.ndarray:
    """float32(scale * code + bias), rounded once: the kernel's fma (the exact value fits float64)."""
    codes = quant_ref.unpack(packed, 4).astype(np.float64)
    s = np.repeat(scales.astype(np.float64), GROUP_SIZE, axis=-1)
    b = np.repeat(biases.astype(np.float64), GROUP_SIZE, axis=-1)
    return (s * codes + b).astype(np.float32)


def build_kvq4_case(rng: np.random.Generator, *, dtype: str, h: int, kvh: int, n: int, block: int = 512,
                    layout: str = "contiguous", amplitude: float = 1.0, peaks=(), plant=None,
                    seed: int = 0) -> Kvq4Case:
    """A case from explicit parameters (``kvq4_cases`` draws them; parity tests pass them). ``peaks``:
    ``(token, score)`` pairs planted in q and the keys before they are quantized (``attention.plant_score_peaks``).
    ``plant``: a function ``(q, k) -> (q, k)`` applied after them, before the keys are quantized (e.g.
    ``attention.plant_rounding_pair`` with its other arguments bound)."""
    np_dtype = numpy_dtype(dtype)
    q = (amplitude * rng.standard_normal((1, h, 1, HEAD_DIM))).astype(np_dtype)
    planes, seen = {}, {}
    for name in ("keys", "values"):
        x = rng.standard_normal((1, kvh, n, HEAD_DIM)).astype(np_dtype)
        if peaks and name == "keys":
            q, x = plant_score_peaks(q, x, peaks, scale=HEAD_DIM ** -0.5, token_axis=2, dtype=dtype)
        if plant is not None and name == "keys":
            q, x = plant(q, x)
        packed, scales, biases = quant_ref.quantize(x, group_size=GROUP_SIZE, bits=4)
        planes[name] = QuantizedKV(cache_view(packed, None, layout, rng), cache_view(scales, dtype, layout, rng),
                                   cache_view(biases, dtype, layout, rng))
        seen[name] = (_fma_dequantize(packed, scales, biases),
                      quant_ref.dequantize(packed, scales, biases, group_size=GROUP_SIZE, bits=4))
    return Kvq4Case(dtype=dtype, h=h, kvh=kvh, n=n, block=block, layout=layout, scale=HEAD_DIM ** -0.5, q=q,
                    k32=seen["keys"][0], v32=seen["values"][0], kT=seen["keys"][1], vT=seen["values"][1],
                    keys=planes["keys"], values=planes["values"], seed=seed)


@st.composite
def _edge_length(draw, units: tuple[int, ...], lowest: int, highest: int) -> int:
    """A length in [lowest, highest], usually one off a multiple of one of ``units``."""
    kind = draw(st.sampled_from(("edge", "edge", "uniform")))
    if kind == "uniform":
        return draw(st.integers(lowest, highest))
    unit = draw(st.sampled_from(units))
    multiple = draw(st.integers(1, max(1, highest // unit)))
    return max(lowest, min(highest, multiple * unit + draw(st.sampled_from((-1, 0, 1)))))


@st.composite
def kvq4_cases(draw, *, dtypes=DECODE_DTYPES, gqa=KVQ4_GQA, blocks=KVQ4_BLOCKS, layouts=CACHE_LAYOUTS,
               max_n: int = 600) -> Kvq4Case:
    """A whole kvq4 decode case (module docstring)."""
    dtype = draw(st.sampled_from(dtypes))
    rep, kvh = draw(st.sampled_from(gqa)), draw(st.integers(1, 2))
    block = draw(st.sampled_from(blocks))
    n = draw(_edge_length((block, -(-block // SUB)), 1, max_n))
    seed = draw(st.integers(0, 2**32 - 1))
    return build_kvq4_case(np.random.default_rng(seed), dtype=dtype, h=kvh * rep, kvh=kvh, n=n, block=block,
                           layout=draw(st.sampled_from(layouts)), amplitude=draw(st.sampled_from((0.5, 1.0, 4.0))),
                           peaks=draw(score_peaks(n, 1)), seed=seed)


def kvq4_oracles(case: Kvq4Case) -> tuple[np.ndarray, np.ndarray]:
    """(float64 oracle on the K/V the kernel dequantizes, naive attention in T on mx.dequantize's K/V).

    The baseline is the unfused path done naively: dequantize to T (rounding
    the kernel never does), then attention rounding every op to T.
    """
    ref = attention_ref(case.q, case.k32, case.v32, scale=case.scale)
    base = attention_ref(case.q, case.kT, case.vT, scale=case.scale, upcast=False, reorder_ops=True)
    return ref, base


# --- multi-query ----------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class MultiQueryCase(_Case):
    dtype: str
    h: int
    kvh: int
    L: int
    n: int
    d: int
    splits: int | None
    layout: str
    scale: float
    q: np.ndarray  # [1, H, L, D] in dtype
    k: np.ndarray  # [1, KVH, N, D] in dtype
    v: np.ndarray
    k_mx: mx.array = field(repr=False)  # views of a poisoned cache (layout)
    v_mx: mx.array = field(repr=False)
    seed: int = 0

    @property
    def q_mx(self) -> mx.array:
        return to_mx(self.q, self.dtype)

    @property
    def nq(self) -> int:
        return self.h // self.kvh * self.L

    @property
    def id(self) -> str:
        splits = f"-splits{self.splits}" if self.splits else ""
        return f"{self.dtype}-H{self.h}-KVH{self.kvh}-L{self.L}-N{self.n}-D{self.d}{splits}-{self.layout}"


def build_multi_query_case(rng: np.random.Generator, *, dtype: str, h: int, kvh: int, L: int, n: int, d: int,
                           splits: int | None = None, layout: str = "contiguous", amplitude: float = 1.0,
                           peaks=(), seed: int = 0) -> MultiQueryCase:
    """A case from explicit parameters (``multi_query_cases`` draws them; parity tests pass them). ``peaks``:
    ``(token, score)`` pairs planted in q and k (``attention.plant_score_peaks``)."""
    np_dtype = numpy_dtype(dtype)
    q = (amplitude * rng.standard_normal((1, h, L, d))).astype(np_dtype)
    k = rng.standard_normal((1, kvh, n, d)).astype(np_dtype)
    v = rng.standard_normal((1, kvh, n, d)).astype(np_dtype)
    if peaks:
        q, k = plant_score_peaks(q, k, peaks, scale=d ** -0.5, token_axis=2, dtype=dtype)
    return MultiQueryCase(dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d, splits=splits, layout=layout,
                          scale=d ** -0.5, q=q, k=k, v=v, k_mx=cache_view(k, dtype, layout, rng),
                          v_mx=cache_view(v, dtype, layout, rng), seed=seed)


@st.composite
def multi_query_cases(draw, *, dtypes=DECODE_DTYPES, head_dims=MULTI_QUERY_HEAD_DIMS, layouts=CACHE_LAYOUTS,
                      max_n: int = 600) -> MultiQueryCase:
    """A whole multi-query case (module docstring)."""
    dtype = draw(st.sampled_from(dtypes))
    L = draw(st.integers(1, MAX_ROWS))
    kvh = draw(st.integers(1, 2))
    most = MAX_VECTORS // L  # REP with NQ <= 64
    rep = draw(st.one_of(st.just(most), st.integers(1, most)))
    d = draw(st.sampled_from(head_dims))
    n = draw(_edge_length((BK, SPLIT_KEYS), L, max_n))
    kind = draw(st.sampled_from(("default", "default", "forced", "one_key_each")))
    splits = {"default": None, "forced": draw(st.integers(1, min(MAX_SPLITS, n))),
              "one_key_each": min(MAX_SPLITS, n)}[kind]
    seed = draw(st.integers(0, 2**32 - 1))
    return build_multi_query_case(np.random.default_rng(seed), dtype=dtype, h=kvh * rep, kvh=kvh, L=L, n=n, d=d,
                                  splits=splits, layout=draw(st.sampled_from(layouts)),
                                  amplitude=draw(st.sampled_from((0.5, 1.0, 4.0))), peaks=draw(score_peaks(n, L)),
                                  seed=seed)


def working_dtype(dtype: str) -> str:
    """The precision multi-query computes in: its Q/K/V/P are half, so float32 inputs work in float16."""
    return "float16" if dtype == "float32" else dtype


def multi_query_oracles(case: MultiQueryCase) -> tuple[np.ndarray, np.ndarray]:
    """(float64 causal oracle, naive causal attention in the working dtype on the inputs rounded to it)."""
    ref = attention_ref(case.q, case.k, case.v, scale=case.scale, mask="causal")
    work = numpy_dtype(working_dtype(case.dtype))
    q, k, v = (x.astype(np.float32).astype(work) for x in (case.q, case.k, case.v))
    base = attention_ref(q, k, v, scale=case.scale, mask="causal", upcast=False, reorder_ops=True)
    return ref, base


def multi_query_gate(gate, out, case: MultiQueryCase, *, case_id: str, kernel: str = "multi_query"):
    """Gate a multi-query output as every multi-query case is: FlashAttention's error ratio against the float64
    causal oracle (factor 2, the naive causal attention in the working precision), with ``decode_error_floor``'s
    floor; returns (the gate's record, the float64 oracle) for gates that follow on the same output."""
    ref, base = multi_query_oracles(case)
    work = working_dtype(case.dtype)
    floor, why = decode_error_floor(ref, work)
    record = gate.error_ratio(out, ref, base, floor=floor, dtype=work,
                              why=(f"FlashAttention's rule: at most 2x as far from the float64 oracle as the naive "
                                   f"causal attention in {work} (the kernel's working precision), plus {why}"),
                              kernel=kernel, case=case_id)
    return record, ref


# --- thresholds shared by the properties and the parity gates -----------------------


def decode_error_floor(ref: np.ndarray, dtype: str, q=None, k=None, v=None, *, scale: float = 1.0,
                       mask=None) -> tuple[float, str]:
    """The error-ratio gate's floor and its derivation, for a kernel working in ``dtype``.

    One ``dtype`` ULP at max|ref| (the gate's default: the output format's
    resolution). For float32 the kernel and the naive float32 baseline carry
    the same kind of float32 noise, so their ratio alone is a coin toss; the
    floor then adds ``attention_noise_floor`` (the first-order effect of the
    error a correct float32 kernel's scores can carry: the D-term dot product
    in any order, the exponential; from the oracle's probabilities), given
    q, k, v.
    """
    ulp = metrics.rounding_noise_floor(ref, dtype)
    if dtype != "float32" or q is None:
        return ulp, f"one {dtype} ULP at max|ref| ({ulp:.3g}): the output format's resolution"
    noise = attention_noise_floor(q, k, v, scale=scale, dtype="float32", mask=mask)
    return ulp + noise, (f"one float32 ULP at max|ref| ({ulp:.3g}) + the float32 score-error floor ({noise:.3g}) "
                         f"{NOISE_FLOOR_TERMS}")


