"""``reference.attention``: the float64 oracle against a naive loop, the torch twin and MLX.

* The oracle against a scalar Python loop written from the contract's formulas
  (GQA head map, bottom-right causal, window, sinks, fully masked rows) and
  against the torch float64 twin (SDPA with ``enable_gqa``): max |diff| 1e-12.
* Exact identities: additive ``-inf`` == boolean False; sinks rescale the
  output by ``Z / (Z + exp(sink))``; paged == contiguous; float64 baseline ==
  oracle.
* MLX's ``mx.fast.scaled_dot_product_attention`` on the CPU against the oracle
  under FlashAttention's error-ratio rule (f32/f16/bf16, GQA, masks, L != N,
  windows as boolean masks, sinks) on every row with a visible key (or a sink),
  and MLX's own behaviours where it departs from the default policy (rows
  without a visible key), each a named test recording a ``gate.finding`` of what
  the installed MLX does, next to the oracle's policies it checks.
* Bad input raises ValueError/TypeError naming the argument.
"""

from __future__ import annotations

import math

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from properties import strategies as sts
from reference import metrics
from reference.attention import (
    NOISE_FLOOR_TERMS,
    UNIT_ROUNDOFF,
    attention_noise_floor,
    attention_ref,
    attention_ref_torch,
    key_visibility,
    paged_attention_ref,
    split_merge_ref,
)
from reference.masks import causal_mask
from reference.tests.helpers import relied_on

SDPA = "mx.fast.scaled_dot_product_attention"
ORACLE = "attention_ref"
DTYPES = ("float32", "float16", "bfloat16")
POLICIES = ("zeros", "mlx_mean")
F64_ATOL = 1e-12

# What the project relies on in MLX's SDPA and exp, and where: said by any failing check of it below.
SDPA_RELIED_ON = (
    "MLX {version}'s mx.fast.scaled_dot_product_attention (CPU) left FlashAttention's error-ratio bound of the "
    "float64 oracle on rows with a visible key (or a sink): the project relies on it there (the control paths "
    "impl/kv/view.py and impl/paged_attention's fallback, and parity/decoder.py's dense reference, attend with it); "
    "rows without a visible key are MLX's fully-masked policy, recorded as findings, not gated")
CAUSAL_RELIED_ON = (
    "MLX {version}'s mask='causal' is no longer masks.causal_mask(L, N - L) (bottom-right aligned): the project "
    "relies on it: impl/kv/view.py's control path and parity/decoder.py pass mask='causal' to MLX's SDPA while the "
    "direct kernel (impl.paged_attention) and attention_ref mask bottom-right")
EXP_RELIED_ON = (
    "MLX {version}'s CPU exp (float32) is less accurate than 2 (|x| + 2) u: attention_noise_floor "
    "(reference/attention.py) bounds the exponential's error by exactly that, and the error-ratio gates of MLX's "
    "SDPA here and of the float32 decode kernels take their floor from it: widen it before trusting those gates")


# The gate fixture only records; sharing it across Hypothesis examples is safe.
PROPERTY_SETTINGS = settings(
    suppress_health_check=list(settings.default.suppress_health_check) + [HealthCheck.function_scoped_fixture])


def to_mlx(x):
    if x is None or isinstance(x, str):
        return x
    x = np.asarray(x)
    if x.dtype == ml_dtypes.bfloat16:  # NumPy has no bfloat16: hand MLX the bits
        return mx.array(x.view(np.uint16)).view(mx.bfloat16)
    return mx.array(x)


def mlx_sdpa(q, k, v, *, scale, mask=None, sinks=None) -> np.ndarray:
    out = mx.fast.scaled_dot_product_attention(to_mlx(q), to_mlx(k), to_mlx(v), scale=scale, mask=to_mlx(mask),
                                               sinks=to_mlx(sinks), stream=mx.cpu)
    return metrics.to_numpy(out)


def as_mlx_case(case: sts.AttentionCase) -> sts.AttentionCase:
    """The case as MLX can state it: SDPA has no window, so the window joins the mask.

    With a boolean (or no) mask the window becomes boolean; with an additive
    mask the window's hidden keys become additive -inf, which is what MLX then
    sees (and, for a fully masked row, turns into NaN rather than the mean).
    """
    if case.window is None:
        return case
    s = case.shape
    visible = key_visibility(s.L, s.N, causal=isinstance(case.mask, str), window=case.window)
    if case.mask is None or isinstance(case.mask, str):
        mask = visible
    elif case.mask.dtype == np.bool_:
        mask = visible & case.mask
    else:
        mask = np.where(visible, case.mask, -np.inf).astype(case.mask.dtype)
    return sts.AttentionCase(s, case.dtype, case.q, case.k, case.v, case.scale, case.mask_kind, mask, None,
                             case.sinks, case.seed)


def check_float64(gate, actual, expected, *, atol: float, why: str, **context):
    """max |actual - expected| <= atol, through the error-ratio gate with a zero baseline.

    (baseline = expected, so the bound is exactly the floor ``atol``.)
    """
    return gate.error_ratio(actual, expected, expected, floor=atol, dtype="float64", why=why, **context)


F64_WHY = ("float64 vs float64: both sides round each score and weight at eps64 = 2.2e-16; over Dk <= 256 "
           "terms of |q k| <= ~10 and softmax sums of N <= 48 the output moves by ~1e-13 (measured max "
           "5.9e-13 over 3000 draws), so 1e-12 separates rounding from any semantic difference; "
           "ill-conditioned draws widen it to u64 * the attention condition bound (attention_noise_floor)")


def f64_atol(case: sts.AttentionCase) -> float:
    return max(F64_ATOL, attention_noise_floor(case.q, case.k, case.v, **case.kwargs(), dtype="float64"))


# --- an independent scalar oracle ----------------------------------------------


def naive_attention(q, k, v, *, scale, mask=None, window=None, sinks=None, fully_masked="zeros"):
    """The contract's formulas, one query row at a time, in Python floats."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    B, Hq, L, _ = q.shape
    Hkv, N, Dv = k.shape[1], k.shape[2], v.shape[3]
    group = Hq // Hkv
    array_mask = None
    if mask is not None and not isinstance(mask, str):
        array_mask = np.broadcast_to(np.asarray(mask), (B, Hq, L, N))
    out = np.zeros((B, Hq, L, Dv))
    for b in range(B):
        for h in range(Hq):
            kv = h // group
            for i in range(L):
                position = i + N - L
                logits, hidden_finite = {}, []
                for j in range(N):
                    s = scale * sum(float(q[b, h, i, d]) * float(k[b, kv, j, d]) for d in range(q.shape[3]))
                    visible = True
                    if isinstance(mask, str) and j > position:
                        visible = False
                    if window is not None and not position - j < window:
                        visible = False
                    if array_mask is not None:
                        m = array_mask[b, h, i, j]
                        if array_mask.dtype == np.bool_:
                            visible = visible and bool(m)
                        else:
                            s += float(m)
                    if visible and s != -math.inf:
                        logits[j] = s
                    elif not visible and s != -math.inf:
                        hidden_finite.append(j)
                sink = None if sinks is None else float(np.asarray(sinks, dtype=np.float64)[h])
                if not logits and sink is None:
                    if fully_masked == "mlx_mean":
                        out[b, h, i] = (np.mean([v[b, kv, j] for j in hidden_finite], axis=0)
                                        if hidden_finite else np.nan)
                    continue
                top = max(list(logits.values()) + ([sink] if sink is not None else []))
                total = sum(math.exp(s - top) for s in logits.values()) + (math.exp(sink - top) if sink is not None else 0)
                for j, s in logits.items():
                    out[b, h, i] += math.exp(s - top) / total * v[b, kv, j]
    return out


SMALL = sts.attention_shapes(max_batch=2, max_L=4, max_N=6, head_dims=(4, 8), layouts=("mha", "gqa", "mqa"))


@PROPERTY_SETTINGS
@given(case=sts.attention_cases(shapes=SMALL, dtypes=("float64", "float32", "bfloat16"), windows=True, sinks=True,
                                allow_fully_masked=True),
       policy=st.sampled_from(POLICIES))
def test_oracle_matches_naive_loop(gate, case, policy):
    got = attention_ref(case.q, case.k, case.v, **case.kwargs(), fully_masked=policy)
    want = naive_attention(case.q, case.k, case.v, **case.kwargs(), fully_masked=policy)
    check_float64(gate, got, want, atol=f64_atol(case), why=F64_WHY, kernel=ORACLE, case=f"{case.id}-{policy}")


# --- the torch twin --------------------------------------------------------------


@PROPERTY_SETTINGS
@given(case=sts.attention_cases(dtypes=("float64", "float32", "float16", "bfloat16"), windows=True, sinks=True,
                                allow_fully_masked=True),
       policy=st.sampled_from(POLICIES))
def test_oracle_matches_torch_twin(gate, case, policy):
    got = attention_ref(case.q, case.k, case.v, **case.kwargs(), fully_masked=policy)
    twin = attention_ref_torch(case.q, case.k, case.v, **case.kwargs(), fully_masked=policy)
    check_float64(gate, twin, got, atol=f64_atol(case), why=F64_WHY, kernel="attention_ref_torch",
                  case=f"{case.id}-{policy}")


# --- exact identities ------------------------------------------------------------


@PROPERTY_SETTINGS
@given(case=sts.attention_cases(dtypes=("float64",), mask_kinds=("bool",), allow_fully_masked=True))
def test_additive_minus_inf_is_boolean_false(gate, case):
    additive = np.where(case.mask, 0.0, -np.inf)
    as_bool = attention_ref(case.q, case.k, case.v, scale=case.scale, mask=case.mask)
    as_add = attention_ref(case.q, case.k, case.v, scale=case.scale, mask=additive)
    gate.bit_exact(as_add, as_bool, what="exp(-inf) is exactly 0 either way", kernel=ORACLE, case=case.id)


@PROPERTY_SETTINGS
@given(case=sts.attention_cases(shapes=sts.attention_shapes(allow_L_gt_N=False), dtypes=("float64",),
                                mask_kinds=("none", "causal", "bool")),
       sink_shift=st.floats(-6.0, 6.0))
def test_sinks_rescale_by_denominator(gate, case, sink_shift):
    """With sink logits t_h: out_sink = out * Z / (Z + exp(t_h)), Z = sum_j exp(s_j) over visible keys."""
    s = case.shape
    sinks = np.full(s.hq, sink_shift)
    plain = attention_ref(case.q, case.k, case.v, scale=case.scale, mask=case.mask)
    sunk = attention_ref(case.q, case.k, case.v, scale=case.scale, mask=case.mask, sinks=sinks)
    k = np.repeat(case.k.astype(np.float64), s.group, axis=1)
    scores = case.scale * case.q.astype(np.float64) @ np.swapaxes(k, -1, -2)
    visible = np.ones(s.scores, bool) & key_visibility(s.L, s.N, causal=isinstance(case.mask, str), window=None)
    if isinstance(case.mask, np.ndarray):
        visible = visible & case.mask
    top = np.max(np.where(visible, scores, -np.inf), axis=-1, keepdims=True)
    Z = np.sum(np.where(visible, np.exp(scores - top), 0.0), axis=-1, keepdims=True)
    expected = plain * Z / (Z + np.exp(sinks[None, :, None, None] - top))
    check_float64(gate, sunk, expected, atol=f64_atol(case), why=F64_WHY, kernel=ORACLE, case=case.id)


@PROPERTY_SETTINGS
@given(case=sts.attention_cases(dtypes=("float64",), windows=True, sinks=True))
def test_float64_baseline_is_the_oracle(gate, case):
    """upcast=False on float64 inputs computes in float64: the same numbers, scaling K or Q."""
    oracle = attention_ref(case.q, case.k, case.v, **case.kwargs())
    for reorder in (False, True):
        base = attention_ref(case.q, case.k, case.v, **case.kwargs(), upcast=False, reorder_ops=reorder)
        check_float64(gate, base, oracle, atol=f64_atol(case), why=F64_WHY, kernel=ORACLE,
                      case=f"{case.id}-reorder{reorder}")


@pytest.mark.parametrize("reorder", [True, False], ids=["scale-k", "scale-q"])
def test_baseline_scales_the_operand_its_flag_names(gate, reorder):
    """``reorder_ops`` picks which operand is scaled and rounded first (the module docstring's step 1), the rest of
    the steps as documented, each in float32 rounded to float16. Written out here step by step and compared
    bit for bit, with a scale no power of two (0.1: either product rounds, so the two orders differ, by 4.9e-4
    at this input); a power-of-two scale, which every other test takes, makes both orders exact."""
    f16, f32 = np.float16, np.float32
    q = np.array([-1.603515625, -2.6484375, -0.496826171875, 0.8408203125], f16).reshape(1, 1, 1, 4)
    k = np.array([[2.271484375, 0.2193603515625, -1.10546875, -1.5693359375],
                  [1.4970703125, 3.26953125, 0.54541015625, -2.466796875]], f16).reshape(1, 1, 2, 4)
    v = np.array([-0.95849609375, 1.599609375], f16).reshape(1, 1, 2, 1)
    s = f32(0.1)
    qs, ks = (q, (k.astype(f32) * s).astype(f16)) if reorder else ((q.astype(f32) * s).astype(f16), k)
    scores = (qs.astype(f32) @ np.swapaxes(ks, -1, -2).astype(f32)).astype(f16).astype(f32)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = (weights / weights.sum(axis=-1, keepdims=True)).astype(f16)
    expected = (probs.astype(f32) @ v.astype(f32)).astype(f16)
    got = attention_ref(q, k, v, scale=0.1, upcast=False, reorder_ops=reorder)
    gate.bit_exact(got, expected, what="the documented steps written out", kernel=ORACLE,
                   case=f"baseline-order-{'k' if reorder else 'q'}")
    other = attention_ref(q, k, v, scale=0.1, upcast=False, reorder_ops=not reorder)
    assert not np.array_equal(other, expected), "the two orders agree here: the case cannot tell them apart"


@pytest.mark.parametrize("dtype", DTYPES)
def test_baseline_rounds_in_the_input_dtype(gate, dtype):
    rng = np.random.default_rng(7)
    t = sts.numpy_dtype(dtype)
    q, k, v = (rng.standard_normal(shape).astype(t) for shape in ((1, 4, 3, 64), (1, 2, 9, 64), (1, 2, 9, 64)))
    base = attention_ref(q, k, v, scale=0.125, mask="causal", upcast=False, reorder_ops=True)
    oracle = attention_ref(q, k, v, scale=0.125, mask="causal")
    assert base.dtype == t and oracle.dtype == np.float64
    # Every op rounds to T once: the baseline is off by a few ULPs of T, never by more than
    # the error a product of Dk=64 terms plus a softmax of N=9 can pile up (~(Dk + N) * u * |out|).
    u = UNIT_ROUNDOFF[dtype]
    gate.nmse(base, oracle, limit=((64 + 9) * u) ** 2,
              why=f"naive {dtype} attention: relative error <= (Dk + N) * u = 73 * {u:.3g} per element",
              kernel=ORACLE, case=f"baseline-{dtype}")
    # ... and it does round in T at every step: a "baseline" computed in float64 and cast to T once at the end would
    # pass the bound above, but it sits at the one-rounding error, which step-by-step rounding exceeds (measured:
    # 2.25e-14 against 5.7e-16 in float32, 6.1e-6 against 2.7e-6 in bfloat16; fixed seed).
    once = metrics.nmse(oracle.astype(t), oracle)
    assert metrics.nmse(base, oracle) > once, (metrics.nmse(base, oracle), once)


# --- paged -----------------------------------------------------------------------


@st.composite
def paged_cases(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    hq, hkv = draw(sts.head_counts(max_kv_heads=2, max_group=4))
    block_size = draw(st.sampled_from((1, 2, 4, 8, 16)))
    length = draw(st.integers(1, 40))
    n = draw(st.integers(1, min(length, 8)))
    needed = -(-length // block_size)
    num_blocks = needed + draw(st.integers(0, 4))
    table = rng.permutation(num_blocks)[: needed + draw(st.integers(0, num_blocks - needed))]
    dk, dv = draw(st.sampled_from((16, 64))), draw(st.sampled_from((16, 64)))
    dtype = sts.numpy_dtype(draw(st.sampled_from(("float32", "bfloat16", "float16"))))
    q = rng.standard_normal((1, hq, n, dk)).astype(dtype)
    k = rng.standard_normal((1, hkv, length, dk)).astype(dtype)
    v = rng.standard_normal((1, hkv, length, dv)).astype(dtype)

    def scatter(x, d):
        pool = rng.standard_normal((num_blocks, hkv, block_size, d)).astype(dtype)  # junk in unused slots
        for t in range(length):
            pool[table[t // block_size], :, t % block_size] = x[0, :, t]
        return pool

    return q, k, v, scatter(k, dk), scatter(v, dv), table, length


@PROPERTY_SETTINGS
@given(data=paged_cases(), mask=st.sampled_from([None, "causal"]))
def test_paged_equals_contiguous(gate, data, mask):
    q, k, v, key_pool, value_pool, table, length = data
    scale = q.shape[-1] ** -0.5
    paged = paged_attention_ref(q, key_pool, value_pool, list(table), length, scale=scale, mask=mask)
    flat = attention_ref(q, k, v, scale=scale, mask=mask)
    gate.bit_exact(paged, flat, what="the table gathers the very same K/V", kernel="paged_attention_ref",
                   case=f"len{length}-bs{key_pool.shape[2]}-{mask}")


# --- MLX's SDPA on the CPU ----------------------------------------------------------


def policy_free_rows(problem: sts.AttentionCase) -> np.ndarray:
    """[B, Hq, L]: rows whose oracle value is the same under every fully-masked policy (a visible key, or a sink).
    The others are rows without a visible key: there MLX's output is its own policy, recorded, not gated."""
    p = problem
    zeros = attention_ref(p.q, p.k, p.v, **p.kwargs(), fully_masked="zeros")
    mean = attention_ref(p.q, p.k, p.v, **p.kwargs(), fully_masked="mlx_mean")
    return ((zeros == mean) | (np.isnan(zeros) & np.isnan(mean))).all(axis=-1)


def error_ratio_gate(gate, actual, problem: sts.AttentionCase, **context):
    """MLX's output vs the oracle, FlashAttention's rule, on the rows with a visible key (or a sink).

    Rows without one (``policy_free_rows``) are left out: set to 0 on all three sides. Their value is MLX's
    fully-masked policy (the oracle models MLX 0.32's as ``fully_masked="mlx_mean"``), which the named tests below
    record; an MLX that changed it must not turn the suite red.
    """
    p = problem
    keep = policy_free_rows(p)[..., None]
    oracle = attention_ref(p.q, p.k, p.v, **p.kwargs(), fully_masked="mlx_mean")
    baseline = attention_ref(p.q, p.k, p.v, **p.kwargs(), upcast=False, reorder_ops=True, fully_masked="mlx_mean")
    actual, oracle, baseline = (np.where(keep, a, np.zeros((), a.dtype)).astype(a.dtype)
                                for a in (np.asarray(actual), oracle, baseline))
    ulp = metrics.rounding_noise_floor(oracle, p.dtype)
    scores = attention_noise_floor(p.q, p.k, p.v, **p.kwargs(), dtype=p.dtype)
    left_out = int(keep.size - np.count_nonzero(keep))
    why = (f"FlashAttention's rule: |mlx - oracle| <= 2 |naive {p.dtype} - oracle| + floor; floor = one "
           f"{p.dtype} ULP at max|ref| ({ulp:.3g}) + the score-error bound ({scores:.3g}) {NOISE_FLOOR_TERMS}; "
           "small cases' naive error can be luckily small"
           + (f"; {left_out} rows without a visible key left out (MLX's fully-masked policy: recorded, not gated)"
              if left_out else ""))
    with relied_on(SDPA_RELIED_ON):
        return gate.error_ratio(actual, oracle, baseline, floor=ulp + scores, why=why, **context)


def fully_masked_behaviour(rows: np.ndarray, case: sts.AttentionCase, dtype: str) -> tuple[str, float]:
    """What MLX returned on rows [B, Hq, r, Dv] without a visible key: (behaviour, max|row - mean(V)|)."""
    rows = rows.astype(np.float64)
    with np.errstate(invalid="ignore"):
        distance = float(np.max(np.abs(rows - v_mean(case)[:, :, None, :])))
    # MLX 0.32 computes the mean in T through a softmax of N equal logits (weights 1/N rounded to T) and a weighted
    # sum: N = 6 rounded products and sums of values <= max|mean|, a few ULPs of T at it; 4 ULPs covers that.
    if distance <= 4 * metrics.rounding_noise_floor(v_mean(case), dtype):
        return "the mean of V (not 0)", distance
    if np.isnan(rows).all():
        return "NaN", distance
    if (rows == 0).all():
        return "0", distance
    return "neither the mean of V, 0 nor NaN", distance


def one_key_and_a_sink(seed: int, d: int, amplitude: float) -> sts.AttentionCase:
    """float32, scale 1, one key and a sink, as ``attention_cases`` draws them (``sts.seeded_arrays``): cases the
    search found.

    * seed 16, D = 96, amplitude 0.5: the key sits 8.6 below the sink. MLX 0.32.4's CPU matmul misses its score by
      3.4 u S_j (53 u), which the output carries as a relative error of 60 u: beyond one rounding of the score
      (u S_j), within the D-term dot product's gamma_D S_j. The naive float32 baseline is nearly exact here.
    * seed 18, D = 256, amplitude 3: the key sits 95 below the sink, so the output is subnormal (3e-41) and MLX's
      CPU exp flushes it to 0: within the flush-to-zero term, tiny (N + 1)(1 + max|v|).

    Both lie in attention_noise_floor's bound; the bound's terms that cover them are what the examples hold.
    """
    shape = sts.AttentionShape(1, 1, 1, 1, 1, d, d)
    q, k, v, sink = sts.seeded_arrays(shape, "float32", seed, amplitude)
    return sts.AttentionCase(shape, "float32", q, k, v, 1.0, "none", None, None, sink, seed)


@PROPERTY_SETTINGS
@given(case=sts.attention_cases(dtypes=DTYPES, windows=True, sinks=True, allow_fully_masked=True))
@example(case=one_key_and_a_sink(16, 96, 0.5))
@example(case=one_key_and_a_sink(18, 256, 3.0))
def test_mlx_sdpa_within_error_ratio(gate, case):
    mlx_case = as_mlx_case(case)
    out = mlx_sdpa(case.q, case.k, case.v, scale=case.scale, mask=mlx_case.mask, sinks=case.sinks)
    error_ratio_gate(gate, out, mlx_case, kernel=SDPA, case=case.id)


def fixed_case(dtype: str, *, L=4, N=6, hq=4, hkv=2, d=64, seed=3, sinks=False) -> sts.AttentionCase:
    rng = np.random.default_rng(seed)
    t = sts.numpy_dtype(dtype)
    shape = sts.AttentionShape(1, hq, hkv, L, N, d, d)
    q, k, v = (rng.standard_normal(dims).astype(t) for dims in ((1, hq, L, d), (1, hkv, N, d), (1, hkv, N, d)))
    sink = rng.standard_normal(hq).astype(t) if sinks else None
    return sts.AttentionCase(shape, dtype, q, k, v, d ** -0.5, "bool", None, None, sink, seed)


def with_mask(case: sts.AttentionCase, mask, kind: str) -> sts.AttentionCase:
    return sts.AttentionCase(case.shape, case.dtype, case.q, case.k, case.v, case.scale, kind, mask, case.window,
                             case.sinks, case.seed)


def v_mean(case: sts.AttentionCase) -> np.ndarray:
    """[B, Hq, Dv]: each query head's KV head's mean value vector, in float64."""
    return np.repeat(case.v.astype(np.float64).mean(axis=2), case.shape.group, axis=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlx_fully_masked_boolean_row_is_mean_of_v(gate, dtype):
    case = fixed_case(dtype)
    mask = np.ones((case.shape.L, case.shape.N), bool)
    mask[1] = False
    case = with_mask(case, mask, "bool")
    out = mlx_sdpa(case.q, case.k, case.v, scale=case.scale, mask=mask)
    error_ratio_gate(gate, out, case, kernel=SDPA, case=f"fully-masked-bool-{dtype}")  # the other rows
    # The oracle's policies (the project's contract): "zeros" gives 0, "mlx_mean" (MLX 0.32's) the mean of V.
    assert np.all(attention_ref(case.q, case.k, case.v, scale=case.scale, mask=mask)[:, :, 1] == 0)
    check_float64(gate, attention_ref(case.q, case.k, case.v, scale=case.scale, mask=mask,
                                      fully_masked="mlx_mean")[:, :, 1], v_mean(case), atol=F64_ATOL, why=F64_WHY,
                  kernel=ORACLE, case=f"fully-masked-bool-mlx_mean-{dtype}")
    row = out[:, :, 1:2]
    behaviour, distance_to_mean = fully_masked_behaviour(row, case, dtype)
    gate.finding(f"MLX SDPA: a fully masked boolean row returns {behaviour}",
                 {"mlx": mx.__version__, "dtype": dtype, "behaviour": behaviour,
                  "max|row - mean(V)|": distance_to_mean, "max|row|": float(np.max(np.abs(row.astype(np.float64)))),
                  "attention_ref policy it matches": {"the mean of V (not 0)": "mlx_mean", "0": "zeros"}.get(behaviour),
                  "why (MLX 0.32)": "the fallback substitutes finfo(dtype).min for masked scores: N equal logits"},
                 kernel=SDPA)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlx_fully_masked_additive_row_is_nan(gate, dtype):
    case = fixed_case(dtype)
    t = sts.numpy_dtype(dtype)
    mask = np.zeros((case.shape.L, case.shape.N), t)
    mask[2] = -np.inf
    case = with_mask(case, mask, "additive")
    out = mlx_sdpa(case.q, case.k, case.v, scale=case.scale, mask=mask)
    error_ratio_gate(gate, out, case, kernel=SDPA, case=f"fully-masked-additive-{dtype}")  # the other rows: no NaN
    # The oracle's policies: "zeros" gives 0; "mlx_mean" (MLX 0.32's) NaN: no key is hidden by a boolean part.
    assert np.all(attention_ref(case.q, case.k, case.v, scale=case.scale, mask=mask)[:, :, 2] == 0)
    assert np.isnan(attention_ref(case.q, case.k, case.v, scale=case.scale, mask=mask,
                                  fully_masked="mlx_mean")[:, :, 2]).all()
    nan_rows = np.isnan(out.astype(np.float64)).all(axis=-1)
    behaviour, distance_to_mean = fully_masked_behaviour(out[:, :, 2:3], case, dtype)
    gate.finding(f"MLX SDPA: a row fully masked by an additive -inf mask is {behaviour}",
                 {"mlx": mx.__version__, "dtype": dtype, "behaviour": behaviour,
                  "nan_rows": np.argwhere(nan_rows).tolist(),
                  "max|row - mean(V)|": distance_to_mean,
                  "attention_ref policy it matches": {"NaN": "mlx_mean", "0": "zeros"}.get(behaviour),
                  "why (MLX 0.32)": "softmax over all -inf: max is -inf, -inf - -inf is NaN"}, kernel=SDPA)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlx_causal_more_queries_than_keys(gate, dtype):
    case = with_mask(fixed_case(dtype, L=7, N=4), "causal", "causal")
    out = mlx_sdpa(case.q, case.k, case.v, scale=case.scale, mask="causal")
    error_ratio_gate(gate, out, case, kernel=SDPA, case=f"causal-L7-N4-{dtype}")  # rows 3..6
    # Rows i < L - N see no key (j <= i + N - L < 0). The oracle's policies: "zeros" 0, "mlx_mean" the mean of V.
    # (The project never asks for this: impl/kv/view.py refuses mask="causal" with n > length.)
    assert np.all(attention_ref(case.q, case.k, case.v, scale=case.scale, mask="causal")[:, :, :3] == 0)
    check_float64(gate, attention_ref(case.q, case.k, case.v, scale=case.scale, mask="causal", fully_masked="mlx_mean")
                  [:, :, :3], np.broadcast_to(v_mean(case)[:, :, None, :], out[:, :, :3].shape), atol=F64_ATOL,
                  why=F64_WHY, kernel=ORACLE, case=f"causal-L7-N4-mlx_mean-{dtype}")
    behaviour, distance = fully_masked_behaviour(out[:, :, :3], case, dtype)  # 4 ULPs: as the test above
    gate.finding(f"MLX SDPA: mask='causal' with L > N gives the first L - N rows {behaviour}",
                 {"mlx": mx.__version__, "dtype": dtype, "L": 7, "N": 4, "behaviour": behaviour,
                  "max|row - mean(V)|": distance,
                  "why (MLX 0.32)": "bottom-right alignment leaves those rows without keys; boolean masking -> mean"},
                 kernel=SDPA)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mlx_sinks_absorb_fully_masked_rows(gate, dtype):
    case = fixed_case(dtype, sinks=True)
    mask = np.ones((case.shape.L, case.shape.N), bool)
    mask[0] = False
    case = with_mask(case, mask, "bool")
    out = mlx_sdpa(case.q, case.k, case.v, scale=case.scale, mask=mask, sinks=case.sinks)
    error_ratio_gate(gate, out, case, kernel=SDPA, case=f"sinks-{dtype}")  # every row: the sink row's value is 0
    for policy in POLICIES:  # the contract: with a sink, a fully masked row puts all its mass on the sink
        gate.bit_exact(attention_ref(case.q, case.k, case.v, scale=case.scale, mask=mask, sinks=case.sinks,
                                     fully_masked=policy)[:, :, 0], np.zeros(out[:, :, 0].shape),
                       what="a fully masked row with a sink is 0", kernel=ORACLE, case=f"sinks-{policy}-{dtype}")
    row = out[:, :, 0].astype(np.float64)
    exact = bool(np.all(row == 0))
    gate.finding("MLX SDPA supports sinks=[Hq]: one extra logit per head in the softmax denominator; a fully masked "
                 "row with a sink is " + ("exactly 0" if exact else "near 0, not exactly 0"),
                 {"mlx": mx.__version__, "dtype": dtype, "fully masked row with a sink": "exactly 0" if exact else
                  "not exactly 0", "max|row|": float(np.max(np.abs(row))),
                  "why (MLX 0.32)": "exp(finfo.min - sink) underflows to 0 in float32"}, kernel=SDPA)


def test_mlx_cpu_exp_error_grows_with_argument(gate):
    """Why attention_noise_floor counts 2 (|s_j - max| + 2) u: MLX's CPU exp errs up to ~(|x| + 2) u, not 1 ULP."""
    u = UNIT_ROUNDOFF["float32"]
    x = -np.linspace(0.0, 87.0, 200_001).astype(np.float32)  # exp(x) stays a normal float32
    got = np.array(mx.exp(mx.array(x), stream=mx.cpu)).astype(np.float64)
    exact = np.exp(x.astype(np.float64))
    rel = np.abs(got - exact) / exact
    ratio = float(np.max(rel / ((np.abs(x.astype(np.float64)) + 2) * u)))
    worst_ulps = float(np.max(rel) / (2 * u))
    below = np.float32([-88.0, -95.0, -103.0])
    flushed = np.array(mx.exp(mx.array(below), stream=mx.cpu))
    # MLX 0.32.4 (x86-64): worst 32 ULPs on [-87, 0], where a correctly rounded exp has 1: the growth that
    # attention_noise_floor counts. A more accurate exp only makes that term loose, so it is recorded, not asserted.
    accuracy = ("relative error grows like |x| * u" if worst_ulps > 4 else
                f"within {worst_ulps:.2g} ULPs on [-87, 0] (attention_noise_floor's |s_j - max| term is loose)")
    subnormals = "subnormal results flush to 0" if np.all(flushed == 0) else "subnormal results are not all flushed"
    gate.finding(f"MLX CPU exp (float32): {accuracy}; {subnormals}",
                 {"mlx": mx.__version__, "max rel error / ((|x| + 2) u)": ratio,
                  "max error in float32 ULPs on [-87, 0]": worst_ulps,
                  "exp([-88, -95, -103]) on MLX CPU": flushed.tolist(),
                  "exact": np.exp(below.astype(np.float64)).tolist()}, kernel="mx.exp")
    # Argument reduction rounds x*log2(e) in float32: an absolute exponent error ~|x| u, i.e. a
    # relative error ~|x| u in the result, plus ~2 u from the polynomial. Bound it by twice that.
    with relied_on(EXP_RELIED_ON):
        assert ratio <= 2.0, f"max rel error / ((|x| + 2) u) = {ratio:.3g} > 2"


@pytest.mark.parametrize("L, N", [(1, 1), (3, 3), (2, 9), (5, 12)])
def test_oracle_causal_is_mlx_causal(gate, L, N):
    """mask='causal' in MLX and a causal_mask(L, N - L) array give identical bytes: same bottom-right rule."""
    case = fixed_case("float32", L=L, N=N)
    by_string = mlx_sdpa(case.q, case.k, case.v, scale=case.scale, mask="causal")
    by_array = mlx_sdpa(case.q, case.k, case.v, scale=case.scale, mask=causal_mask(L, N - L))
    with relied_on(CAUSAL_RELIED_ON):
        gate.bit_exact(by_string, by_array, what="MLX's causal string vs the oracle's causal_mask", kernel=SDPA,
                       case=f"L{L}-N{N}")
    gate.bit_exact(key_visibility(L, N, causal=True, window=None), causal_mask(L, N - L),
                   what="attention_ref's causal rule is masks.causal_mask", kernel=ORACLE, case=f"L{L}-N{N}")


# --- bad input -------------------------------------------------------------------------


def arrays(hq=8, hkv=2, L=3, N=5, d=16, dtype=np.float32):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((1, hq, L, d)).astype(dtype), rng.standard_normal((1, hkv, N, d)).astype(dtype),
            rng.standard_normal((1, hkv, N, d)).astype(dtype))


def test_rejects_head_counts_that_do_not_divide():
    q, _, _ = arrays(hq=8)
    _, k, v = arrays(hkv=3)
    with pytest.raises(ValueError, match="k has 3 heads, Hq=8 is not a multiple"):
        attention_ref(q, k, v, scale=1.0)


@pytest.mark.parametrize("change, match", [
    (lambda q, k, v: (q[0], k, v), "q must have 4 axes"),
    (lambda q, k, v: (q, k[..., :8], v), "k has head dim 8 but q has Dk=16"),
    (lambda q, k, v: (q, k, v[:, :, :4]), "v has 4 keys but k has N=5"),
    (lambda q, k, v: (q, k, v[:, :1]), "v has 1 heads but k has 2"),
    (lambda q, k, v: (q, np.concatenate([k, k]), v), "batch sizes differ"),
])
def test_rejects_inconsistent_shapes(change, match):
    with pytest.raises(ValueError, match=match):
        attention_ref(*change(*arrays()), scale=1.0)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"mask": "full"}, ValueError, "mask must be None, 'causal'"),
    ({"mask": np.ones((2, 3, 5), bool)}, ValueError, r"mask of shape \(2, 3, 5\) does not broadcast"),
    # compatible with the scores' shape but larger (a prefill mask at a decode step): refused, as MLX does
    ({"mask": np.zeros((2, 1, 3, 5), np.float32)}, ValueError, r"mask of shape \(2, 1, 3, 5\) does not broadcast"),
    ({"mask": np.full((3, 5), np.inf)}, ValueError, "additive mask must not contain NaN or \\+inf"),
    ({"mask": np.ones((3, 5), np.int32)}, ValueError, "mask array must be bool or float"),
    ({"window": 0}, ValueError, "window must be None or a positive int"),
    ({"sinks": np.zeros(3)}, ValueError, r"sinks must have shape \[Hq\] = \(8,\)"),
    ({"sinks": np.full(8, np.nan)}, ValueError, "sinks must be finite"),
    ({"scale": float("nan")}, ValueError, "scale must be finite"),
    ({"scale": "1"}, TypeError, "scale must be a real number"),
    ({"fully_masked": "mean"}, ValueError, "fully_masked must be one of"),
])
def test_rejects_bad_arguments(kwargs, error, match):
    options = {"scale": 1.0, **kwargs}
    with pytest.raises(error, match=match):
        attention_ref(*arrays(), **options)
    with pytest.raises(error, match=match):
        attention_ref_torch(*arrays(), **options)


def test_rejects_integer_and_mixed_dtypes():
    q, k, v = arrays()
    with pytest.raises(ValueError, match="q must be float64/float32/float16/bfloat16"):
        attention_ref(q.astype(np.int32), k, v, scale=1.0)
    with pytest.raises(ValueError, match="upcast=False computes in one input dtype"):
        attention_ref(q, k.astype(np.float16), v, scale=1.0, upcast=False)


def test_paged_rejects_bad_tables():
    q, _, _ = arrays(hq=4, hkv=2, L=2)
    pool = np.zeros((3, 2, 4, 16), np.float32)
    with pytest.raises(ValueError, match="block_table has 1 blocks but length=6 needs 2 of block_size 4"):
        paged_attention_ref(q, pool, pool, [0], 6, scale=1.0)
    with pytest.raises(ValueError, match="block_table refers to block 3, outside the pool's 3 blocks"):
        paged_attention_ref(q, pool, pool, [0, 3], 6, scale=1.0)
    with pytest.raises(ValueError, match=r"length must be an int in \[1, "):
        paged_attention_ref(q, pool, pool, [0], 0, scale=1.0)
    with pytest.raises(ValueError, match="block_table must be a 1-D sequence of ints"):
        paged_attention_ref(q, pool, pool, [[0, 1]], 6, scale=1.0)
    with pytest.raises(ValueError, match=r"q must have shape \[1, Hq, n, Dk\]"):
        paged_attention_ref(np.concatenate([q, q]), pool, pool, [0, 1], 6, scale=1.0)
    with pytest.raises(ValueError, match="value_pool has"):
        paged_attention_ref(q, pool, pool[:, :, :2], [0, 1], 6, scale=1.0)


# --- split_merge_ref ----------------------------------------------------------


def test_split_merge_ref_equals_attention_over_the_whole_range():
    """Splitting the keys, attending each part with its own max and merging gives the oracle's attention over all
    keys (the identity the kernels' partial + merge rely on), for splits of any size, an empty one included."""
    rng = np.random.default_rng(7)
    q, k, v = rng.normal(size=(1, 2, 3, 16)), rng.normal(size=(1, 2, 50, 16)), rng.normal(size=(1, 2, 50, 16))
    scale = 0.25
    edges = [0, 7, 7, 30, 50]  # the second split is empty: max -inf, sum 0, O 0
    o, m, l = [], [], []
    for a, b in zip(edges, edges[1:]):
        s = scale * np.einsum("bhld,bhnd->bhln", q, k[:, :, a:b])
        top = s.max(axis=-1) if b > a else np.full(s.shape[:-1], -np.inf)
        p = np.exp(s - top[..., None]) if b > a else s
        o.append(np.einsum("bhln,bhnd->bhld", p, v[:, :, a:b]))
        m.append(top)
        l.append(p.sum(axis=-1))
    merged = split_merge_ref(np.stack(o), np.stack(m), np.stack(l))
    # Both sides are float64 computations of the same sums in another order: their difference is a few float64
    # roundings (u = 1.1e-16) of values of order 1; 1e-12 leaves four decades for the order and the exp's rounding.
    np.testing.assert_allclose(merged, attention_ref(q, k, v, scale=scale), rtol=1e-12, atol=1e-12)


def test_split_merge_ref_ignores_what_a_no_key_split_holds():
    """A -inf split weighs 0 even if its O and l hold garbage (a kernel's buffers may), and a lone finite split is
    its own O / l."""
    o = np.array([[[2.0, 4.0]], [[np.nan, 1e30]]])
    m = np.array([[1.5], [-np.inf]])
    l = np.array([[2.0], [np.nan]])
    np.testing.assert_array_equal(split_merge_ref(o, m, l), [[1.0, 2.0]])


@pytest.mark.parametrize("args, match", [
    ((np.zeros((2,)), np.zeros((2,)), np.zeros((2,))), "opart must be"),
    ((np.zeros((2, 3, 4)), np.zeros((2, 3)), np.zeros((3, 2))), "opart must be"),
    ((np.zeros((2, 1, 4)), np.array([[0.0], [np.nan]]), np.ones((2, 1))), "mpart must hold"),
    ((np.zeros((2, 1, 4)), np.full((2, 1), -np.inf), np.ones((2, 1))), "mpart: every row"),
    ((np.full((1, 1, 4), np.inf), np.zeros((1, 1)), np.ones((1, 1))), "opart and lpart must be finite"),
    ((np.zeros((1, 1, 4), dtype=np.int32), np.zeros((1, 1)), np.ones((1, 1))), "opart must be float"),
    ((np.ones((2, 1, 4)), np.zeros((2, 1)), np.zeros((2, 1))), "lpart must be positive"),  # 0 / 0: inf came back
    ((np.ones((2, 1, 4)), np.zeros((2, 1)), np.array([[1.0], [-1.0]])), "lpart must be positive"),
])
def test_split_merge_ref_refuses_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        split_merge_ref(*args)
