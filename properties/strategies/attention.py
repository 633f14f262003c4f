"""Hypothesis strategies for attention: head layouts, shapes, dtypes, masks, whole cases.

Every attention test (oracles now, kernels later) draws from here::

    from properties import strategies as sts

    @given(case=sts.attention_cases(dtypes=("bfloat16",), mask_kinds=("causal",)))
    def test_x(case): ...

Arrays are NumPy in the case's dtype (bfloat16 as ``ml_dtypes.bfloat16``) and
come from a NumPy generator seeded by Hypothesis: drawing thousands of floats
element by element would dominate the run time, and the seed still replays and
shrinks (to seed 0 and the smallest shape). Shapes stay small (N <= 48 by
default) so that a hundred examples of float64 attention take well under a
second; pass larger bounds where a kernel's tiling needs them.

Score peaks (the paged, kvq4 and multi-query strategies and gates):
``plant_score_peaks`` makes chosen keys score a chosen value against every
query (an attention sink, an outlier); ``score_peaks`` draws a sink and a late
outlier more than float32 exp's range (``EXP_OVERFLOW``, 88.7) apart;
``segment_score_maxima`` and ``peak_gap`` check that a case's partitions
(splits, blocks) really have maxima that far apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import ml_dtypes
import mlx.core as mx
import numpy as np
from hypothesis import strategies as st

__all__ = [
    "ATTENTION_DTYPES",
    "HEAD_DIMS",
    "HEAD_LAYOUTS",
    "MASK_KINDS",
    "AttentionCase",
    "AttentionShape",
    "EXP_OVERFLOW",
    "EXP_UNDERFLOW",
    "PEAK_HIGH",
    "PEAK_LOW",
    "PEAK_QUERY",
    "RISE_LOW",
    "SCORE_FLOOR",
    "SCORE_LEVELS",
    "attention_cases",
    "attention_masks",
    "attention_shapes",
    "head_counts",
    "hoeffding_kl_limit",
    "lm_head",
    "LM_VOCAB",
    "LOGIT_SCALE",
    "MX_DTYPES",
    "numpy_dtype",
    "peak_gap",
    "plant_rounding_pair",
    "seeded_arrays",
    "plant_score_peaks",
    "score_level_peaks",
    "score_peaks",
    "segment_score_maxima",
    "to_mx",
]

HEAD_DIMS = (64, 80, 96, 128, 256)
ATTENTION_DTYPES = ("float32", "float16", "bfloat16")
HEAD_LAYOUTS = ("mha", "gqa", "mqa")
# none: attend everywhere; causal: the string "causal" (bottom-right);
# bool: a boolean array; additive: a float array in the case's dtype.
MASK_KINDS = ("none", "causal", "bool", "additive")


MX_DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}


def numpy_dtype(name: str) -> np.dtype:
    """NumPy dtype for 'float32' / 'float16' / 'bfloat16' / 'float64'."""
    if name == "bfloat16":
        return np.dtype(ml_dtypes.bfloat16)
    if name in ("float32", "float16", "float64"):
        return np.dtype(name)
    raise ValueError(f"dtype must be float64/float32/float16/bfloat16, got {name!r}")


@dataclass(frozen=True)
class AttentionShape:
    """q [batch, hq, L, dk], k [batch, hkv, N, dk], v [batch, hkv, N, dv]."""

    batch: int
    hq: int
    hkv: int
    L: int
    N: int
    dk: int
    dv: int

    @property
    def group(self) -> int:
        return self.hq // self.hkv

    @property
    def layout(self) -> str:
        return "mha" if self.hq == self.hkv else ("mqa" if self.hkv == 1 else "gqa")

    @property
    def scores(self) -> tuple[int, int, int, int]:
        return (self.batch, self.hq, self.L, self.N)


@st.composite
def head_counts(draw, layouts=HEAD_LAYOUTS, max_kv_heads: int = 4, max_group: int = 8) -> tuple[int, int]:
    """(Hq, Hkv) with Hq % Hkv == 0: MHA (Hq == Hkv), GQA (group 2..max_group, Hkv >= 2), MQA (Hkv == 1)."""
    layout = draw(st.sampled_from(layouts))
    if layout == "mha":
        hkv = draw(st.integers(1, max_kv_heads))
        return hkv, hkv
    if layout == "mqa":
        return draw(st.integers(2, max_group)), 1
    hkv = draw(st.integers(2, max(2, max_kv_heads)))
    return hkv * draw(st.integers(2, max_group)), hkv


@st.composite
def attention_shapes(draw, *, max_batch: int = 2, max_L: int = 8, max_N: int = 48, head_dims=HEAD_DIMS,
                     layouts=HEAD_LAYOUTS, allow_L_gt_N: bool = True, same_dv: bool = False) -> AttentionShape:
    """Small attention shapes; L != N is common, L > N only if ``allow_L_gt_N``.

    ``dv`` is usually ``dk`` and sometimes another head dim (MLA-style), unless ``same_dv``.
    """
    hq, hkv = draw(head_counts(layouts=layouts))
    L = draw(st.integers(1, max_L))
    N = draw(st.integers(1 if allow_L_gt_N else L, max(max_N, L)))
    dk = draw(st.sampled_from(head_dims))
    dv = dk if same_dv else draw(st.one_of(st.just(dk), st.sampled_from(head_dims)))
    return AttentionShape(draw(st.integers(1, max_batch)), hq, hkv, L, N, dk, dv)


def _mask_shape(draw, shape: AttentionShape) -> tuple[int, ...]:
    b, hq, L, N = shape.scores
    return draw(st.sampled_from([(L, N), (1, 1, L, N), (b, 1, L, N), (b, hq, L, N), (hq, L, N)]))


@st.composite
def attention_masks(draw, shape: AttentionShape, kind: str, dtype: str = "float32", *,
                    allow_fully_masked: bool = False):
    """A mask of ``kind`` for ``shape``: None, "causal", bool or additive array.

    Array masks take one of the broadcastable shapes [L,N], [1,1,L,N], [B,1,L,N],
    [Hq,L,N], [B,Hq,L,N]. Unless ``allow_fully_masked``, every row keeps at least
    one visible key (a random one is forced visible), so the fully-masked policy
    does not enter; with it, some rows may be hidden entirely.
    """
    if kind == "none":
        return None
    if kind == "causal":
        return "causal"
    if kind not in MASK_KINDS:
        raise ValueError(f"kind must be one of {MASK_KINDS}, got {kind!r}")
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    mshape = _mask_shape(draw, shape)
    keep = draw(st.sampled_from([0.25, 0.5, 0.9]))
    visible = rng.random(mshape) < keep
    if allow_fully_masked:
        rows = rng.random(mshape[:-1]) < 0.3
        visible[rows] = False
    else:
        forced = rng.integers(0, shape.N, size=mshape[:-1])
        np.put_along_axis(visible, forced[..., None], True, axis=-1)
    if kind == "bool":
        return visible
    bias = rng.normal(0.0, 2.0, mshape)
    return np.where(visible, bias, -np.inf).astype(numpy_dtype(dtype))


@dataclass(frozen=True)
class AttentionCase:
    """One attention problem: arrays in ``dtype`` plus the keyword arguments of ``attention_ref``."""

    shape: AttentionShape
    dtype: str
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float
    mask_kind: str
    mask: object = None
    window: int | None = None
    sinks: np.ndarray | None = None
    seed: int = field(default=0, compare=False)

    def __repr__(self) -> str:  # the arrays would make Hypothesis reports unreadable
        return f"AttentionCase({self.id}, seed={self.seed}, scale={self.scale:.6g})"

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis' pretty printer
        printer.text(repr(self))

    def kwargs(self) -> dict:
        """``scale``, ``mask``, ``window``, ``sinks`` for ``attention_ref``."""
        return {"scale": self.scale, "mask": self.mask, "window": self.window, "sinks": self.sinks}

    @property
    def id(self) -> str:
        s = self.shape
        return (f"{self.dtype}-{s.layout}-B{s.batch}-Hq{s.hq}-Hkv{s.hkv}-L{s.L}-N{s.N}-Dk{s.dk}-Dv{s.dv}"
                f"-{self.mask_kind}" + (f"-w{self.window}" if self.window else "")
                + ("-sinks" if self.sinks is not None else ""))


@st.composite
def attention_cases(draw, *, dtypes=ATTENTION_DTYPES, shapes=None, mask_kinds=MASK_KINDS,
                    windows: bool = False, sinks: bool = False, allow_fully_masked: bool = False,
                    amplitudes=(0.5, 1.0, 3.0)) -> AttentionCase:
    """A whole case: shape, dtype, q/k/v ~ amplitude * N(0, 1) rounded to dtype, scale, mask.

    * ``windows``: sometimes add a sliding window (1 .. N + 1).
    * ``sinks``: sometimes add per-head sink logits ~ N(0, 2) in dtype.
    * ``allow_fully_masked``: array masks may hide whole rows (causal masks with
      L > N always do).
    * scale is usually ``Dk ** -0.5``, sometimes 1 or ``0.3 * Dk ** -0.5``.
    """
    shape = draw(shapes if shapes is not None else attention_shapes())
    dtype = draw(st.sampled_from(dtypes))
    kind = draw(st.sampled_from(mask_kinds))
    seed = draw(st.integers(0, 2**32 - 1))
    amp = draw(st.sampled_from(amplitudes))
    s = shape
    q, k, v, sink = seeded_arrays(s, dtype, seed, amp)
    scale = draw(st.sampled_from([s.dk ** -0.5, 1.0, 0.3 * s.dk ** -0.5]))
    mask = draw(attention_masks(s, kind, dtype, allow_fully_masked=allow_fully_masked))
    window = draw(st.one_of(st.none(), st.integers(1, s.N + 1))) if windows else None
    sink = sink if sinks and draw(st.booleans()) else None
    return AttentionCase(s, dtype, q, k, v, float(scale), kind, mask, window, sink, seed)


def seeded_arrays(shape: AttentionShape, dtype: str, seed: int, amplitude: float):
    """q, k, v ~ amplitude * N(0, 1) and per-head sink logits ~ N(0, 2), in ``dtype``, from ``seed``: the arrays
    ``attention_cases`` draws for a case of that seed and amplitude (which keeps the sinks only where it draws them),
    so a case a search reported can be rebuilt as a fixed example."""
    rng = np.random.default_rng(seed)
    t, s = numpy_dtype(dtype), shape
    q, k, v = ((amplitude * rng.standard_normal(dims)).astype(t) for dims in
               ((s.batch, s.hq, s.L, s.dk), (s.batch, s.hkv, s.N, s.dk), (s.batch, s.hkv, s.N, s.dv)))
    return q, k, v, (2.0 * rng.standard_normal(s.hq)).astype(t)


def to_mx(a: np.ndarray, dtype: str | None = None) -> mx.array:
    """NumPy (bfloat16 as ml_dtypes) -> mx.array: float planes in ``dtype`` (exact for values of it, NaN
    kept); ``dtype=None`` keeps the array's own dtype (uint32 planes)."""
    if dtype is None:
        return mx.array(a)
    return mx.array(a.astype(np.float32)).astype(MX_DTYPES[dtype])


# --- the KL gate's LM head (shared by every attention kernel's KL gate) ----------

LM_VOCAB = 512
LOGIT_SCALE = 8.0


def lm_head(d: int) -> np.ndarray:
    """A fixed random LM head W [d, LM_VOCAB], N(0, LOGIT_SCALE^2 / d): logits of unit-RMS rows have std LOGIT_SCALE."""
    return np.random.default_rng(1234 + d).standard_normal((d, LM_VOCAB)) * LOGIT_SCALE / np.sqrt(d)


def hoeffding_kl_limit(eps: float, w: np.ndarray) -> tuple[float, str]:
    """KL limit for outputs within ``eps`` per element, through the LM head ``w``.

    The logit error dz_j = sum_d e_d W_dj is at most eps * ||W_:,j||_1, and by
    Hoeffding's lemma KL(p || p e^dz / Z) <= (max dz - min dz)^2 / 8 <=
    (eps * max_j ||W_:,j||_1)^2 / 2.
    """
    w1 = float(np.max(np.abs(w).sum(axis=0)))
    limit = (eps * w1) ** 2 / 2
    return limit, (f"Hoeffding: KL <= (eps * max_j ||W_j||_1)^2 / 2 with ||W_j||_1 <= {w1:.4g} "
                   f"(fixed LM head N(0, {LOGIT_SCALE:g}^2/D), {LM_VOCAB} logits)")


# --- score peaks: softmax partitions whose maxima lie more than exp's range apart ----------------------------

# float32's exp overflows past log(FLT_MAX) = 88.72: a merge that rescales a partition by exp(m_p - ref) with any
# reference below max_p m_p - 88.72 (a partition's own max, the first slice's, a thread's) makes inf, then NaN.
EXP_OVERFLOW = float(np.log(np.finfo(np.float32).max))
PEAK_QUERY = 4.0  # the value every query row holds in dim 0 once ``plant_score_peaks`` ran
# The scores the strategies and the parity gates plant: the higher is PEAK_HIGH - PEAK_LOW = 120 above the lower and
# more above every other token's (a few units), so the partitions holding them and the rest have maxima more than
# EXP_OVERFLOW apart.
PEAK_HIGH, PEAK_LOW = 220.0, 100.0
# exp(x) is 0 in float32 for x below -EXP_UNDERFLOW (103.28: the log of its least subnormal, 2^-149).
EXP_UNDERFLOW = float(-np.log(np.finfo(np.float32).smallest_subnormal))
# Every score this far below zero: exp(score - 0) is 0 in float32 (past -EXP_UNDERFLOW, with room for the dtype's
# rounding of the planted keys: bf16 moves a score by up to 2^-8 of it, 0.8), so a
# running or combining max that starts at 0 instead of -inf (exp(s - max(0, ...))) zeroes every weight and the output
# is 0 / 0, where the true max gives weights near 1. SCORE_FLOOR - 6 .. SCORE_FLOOR (token t at SCORE_FLOOR - t % 7).
SCORE_FLOOR = -200.0
# "floor": every score in SCORE_FLOOR - 6 .. SCORE_FLOOR; "zero": every score exactly 0 (every key 0), where a
# combine that takes a max of 0 for "no visible token" (the -inf it should test) drops every partial; "rise": every
# score RISE_LOW but the last token's, exactly 0, so where the last token's block, step or partition follows others
# of its own running max (a geometry's choice), that max climbs from RISE_LOW to exactly 0, and a rescale that tests
# the new max against 0 for "nothing seen yet" (the -inf it should test) keeps the earlier keys' weights unscaled:
# e^3 = 20 times too heavy. The last token is the last query row's.
SCORE_LEVELS = ("floor", "zero", "rise")
RISE_LOW = -3.0


def score_level_peaks(length: int, level: str) -> tuple[tuple[int, float], ...]:
    """``plant_score_peaks``'s peaks that set EVERY one of ``length`` tokens' scores (``SCORE_LEVELS``)."""
    if level not in SCORE_LEVELS:
        raise ValueError(f"level must be one of {SCORE_LEVELS}, got {level!r}")
    if level == "floor":
        return tuple((t, SCORE_FLOOR - t % 7) for t in range(length))
    if level == "zero":
        return tuple((t, 0.0) for t in range(length))
    return tuple((t, 0.0 if t == length - 1 else RISE_LOW) for t in range(length))


def plant_score_peaks(q: np.ndarray, k: np.ndarray, peaks, *, scale: float, token_axis: int,
                      dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(q, k) with ``peaks`` planted: copies in which every query row (any head, any row) holds ``PEAK_QUERY`` in
    dim 0, and the key of each ``(token, score)`` in ``peaks`` (along ``token_axis`` of k, every KV head) is
    ``(b, 0, ..., 0)`` with ``b = score / (scale * PEAK_QUERY)`` rounded to ``dtype``: every query's score against
    it is ``scale * PEAK_QUERY * b``, ``score`` to the dtype's rounding of b (an attention sink when the token is 0,
    an outlier elsewhere). The other keys keep their values: their scores move by ``scale * PEAK_QUERY * k[0]``,
    a few units at most. Quantized pools then store the planted keys exactly enough (a group of one value and
    zeros: code 15 or 255 times its scale)."""
    q, k = q.copy(), k.copy()
    q[..., 0] = PEAK_QUERY
    for token, score in peaks:
        _plant_key(k, token, token_axis, 0, score / (scale * PEAK_QUERY), dtype)
    return q, k


def _plant_key(k: np.ndarray, token: int, token_axis: int, dim: int, value: float, dtype: str) -> None:
    """Token ``token``'s key (along ``token_axis`` of ``k``, every other axis) becomes ``value`` in dim ``dim``
    and 0 elsewhere, rounded to ``dtype`` (through float32, as MLX casts), in place."""
    row = [slice(None)] * k.ndim
    row[token_axis] = token
    key = np.zeros(k[tuple(row)].shape, np.float64)
    key[..., dim] = value
    k[tuple(row)] = key.astype(np.float32).astype(numpy_dtype(dtype))


def plant_rounding_pair(q: np.ndarray, k: np.ndarray, tokens: tuple[int, int], *, score: float, scale: float,
                        token_axis: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(q, k) where the rounding of ``q * scale`` to ``dtype`` decides between two tokens: every query row holds in
    dims 0 and 1 the values of ``dtype`` in [1, 2) whose product with ``scale`` (``scale`` as ``dtype`` holds it, the
    product exact in float64) rounds up and down the most, relative; token ``tokens[0]``'s key is ``(x, 0, ...)`` and
    ``tokens[1]``'s ``(0, y, 0, ...)``, with ``x`` and ``y`` (rounded to ``dtype``) making both scores ``score``
    against the rounded products. Against the unrounded ones the two scores then differ by up to
    ``score * 2 * u`` (u the dtype's unit roundoff; at score 100 and scale 0.1: 0.61 in bfloat16, 0.097 in float16)
    and the softmax splits them otherwise; the other keys keep their values, their scores a few units, far below.
    A kernel that rounds ``q * scale`` where the contract does not (or the reverse) moves the output by about a
    tenth of ``|v_a - v_b|``. ``scale`` must not be a power of two (every product would be exact)."""
    np_dtype = numpy_dtype(dtype)
    s = float(np.float64(np.float32(scale).astype(np_dtype)))
    if s <= 0 or np.log2(s) == np.round(np.log2(s)):
        raise ValueError(f"scale={scale!r} must be positive and not a power of two in {dtype} (products exact)")
    candidates = np.unique(np.linspace(1.0, 2.0, 4096, endpoint=False).astype(np_dtype)).astype(np.float64)
    rounded = (candidates * s).astype(np_dtype).astype(np.float64)
    relative = (rounded - candidates * s) / (candidates * s)  # the rounding's relative error, exact in float64
    up, down = candidates[np.argmax(relative)], candidates[np.argmin(relative)]
    q, k = q.copy(), k.copy()
    q[..., 0], q[..., 1] = up, down
    for token, dim, value in ((tokens[0], 0, up), (tokens[1], 1, down)):
        _plant_key(k, token, token_axis, dim, score / float(np.float64(value * s).astype(np_dtype)), dtype)
    return q, k


def segment_score_maxima(q: np.ndarray, k: np.ndarray, *, scale: float, segment: int) -> np.ndarray:
    """The float64 max of the visible scores ``scale * q . k`` of each query row over each run of ``segment`` keys
    (a softmax partition, split or block): [Hq, L, ceil(N / segment)], -inf where a run has no visible key. q [1, Hq,
    L, D], k [1, Hkv, N, D] (query head h reads KV head h // (Hq / Hkv)), bottom-right causal (row i sees keys
    j <= N - L + i)."""
    _, hq, L, _ = q.shape
    _, hkv, N, _ = k.shape
    keys = np.repeat(k.astype(np.float64)[0], hq // hkv, axis=0)  # [Hq, N, D]
    scores = scale * (q.astype(np.float64)[0] @ keys.swapaxes(-1, -2))  # [Hq, L, N]
    visible = np.arange(N)[None, :] <= (N - L + np.arange(L))[:, None]
    scores = np.where(visible, scores, -np.inf)
    runs = -(-N // segment)
    padded = np.full((hq, L, runs * segment), -np.inf)
    padded[..., :N] = scores
    return padded.reshape(hq, L, runs, segment).max(axis=-1)


def peak_gap(maxima: np.ndarray) -> float:
    """The least, over query rows, of how far below a row's largest segment max (``segment_score_maxima``) its next
    largest lies (segments without a visible key left out; inf for a row with one segment): above
    ``EXP_OVERFLOW``, a merge that rescales by exp(m_s - ref) with any reference but the largest max overflows."""
    ordered = np.sort(maxima, axis=-1)
    if ordered.shape[-1] < 2:
        return float("inf")
    return float(np.min(ordered[..., -1] - ordered[..., -2]))


@st.composite
def score_peaks(draw, n: int, rows: int) -> tuple[tuple[int, float], ...]:
    """Usually none; else a sink at token 0 and an outlier at a token every one of the ``rows`` query rows sees,
    PEAK_HIGH and PEAK_LOW (``attention``: more than float32 exp's range apart, and above every other score), the
    larger first ("sink") or late ("late"). Blocks, sub-chunks and splits holding them then have maxima more than
    88.7 apart from each other and from the rest."""
    kind = draw(st.sampled_from(("none", "none", "sink", "late")))
    if kind == "none" or n - rows < 1:
        return ()
    late = draw(st.integers(max(1, (n - rows) // 2), n - rows))
    return ((0, PEAK_HIGH), (late, PEAK_LOW)) if kind == "sink" else ((0, PEAK_LOW), (late, PEAK_HIGH))
