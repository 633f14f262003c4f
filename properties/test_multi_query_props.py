"""Properties of multi-query causal decode (``impl.multi_query``), every available arm.

Hypothesis draws whole cases (``properties.strategies.decode.multi_query_cases``):
L 1..8 query rows, GQA factors up to NQ = 64 query vectors per KV head (often
exactly 64), head dims 64/128/256, cache lengths across 32-key block and
256-key split edges, default or forced key splits (down to one key per split,
so that later splits hide all their keys from the early rows), bf16 / f16 /
f32, and K/V that are views of a larger NaN-poisoned cache (token and head
slices, transposed storage: the strided-load path); half the cases plant an
attention sink at key 0 and an outlier late, more than float32 exp's range
(88.7) apart (``properties.strategies.attention.score_peaks``), so the splits'
maxima do too: the merge must rescale to the largest of all of them.

* the output matches the float64 causal oracle under FlashAttention's
  error-ratio rule against the naive computation in the kernel's working
  precision (T, or float16 for float32 inputs: the kernel rounds Q, K, V and P
  to half), and so is finite;
* the layout is invisible: views and contiguous copies give the same bytes;
* causality: changing every key and value after row i's limit N - L + i
  leaves rows 0..i bit-identical (masked keys get probability exactly 0);
* NQ = REP * L = 64 runs, 65 and more raise ValueError naming q;
* bad input raises ValueError / TypeError naming the argument, before any launch.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.multi_query import MAX_ROWS, MAX_VECTORS, TARGET_THREADGROUPS, default_splits, multi_query_causal
from properties.strategies.decode import (build_multi_query_case, decode_error_floor, multi_query_cases,
                                          multi_query_oracles, working_dtype)

# The gate fixture is a stateless recorder: sharing it across examples is intended.
FIXTURES_OK = settings(suppress_health_check=[*settings.default.suppress_health_check,
                                              HealthCheck.function_scoped_fixture])
KERNEL = "multi_query"


def run(case, arm, *, k=None, v=None):
    return multi_query_causal(case.q_mx, case.k_mx if k is None else k, case.v_mx if v is None else v,
                              scale=case.scale, splits=case.splits, arm=arm)


def gate_against_oracle(gate, case, out):
    ref, base = multi_query_oracles(case)
    work = working_dtype(case.dtype)
    floor, why = decode_error_floor(ref, work)
    gate.error_ratio(out, ref, base, floor=floor, dtype=work,
                     why=(f"FlashAttention's rule: at most 2x as far from the float64 oracle as the naive causal "
                          f"attention in {work} (the kernel's working precision), plus {why}"),
                     kernel=KERNEL, case=case.id)


@FIXTURES_OK
@given(case=multi_query_cases())
def test_matches_float64_oracle(arm, gate, case):
    out = run(case, arm)
    assert out.shape == (1, case.h, case.L, case.d) and out.dtype == case.q_mx.dtype
    gate_against_oracle(gate, case, out)


@pytest.mark.parametrize("L", [1, 3, 8])
def test_fully_masked_splits_are_skipped(arm, gate, L):
    """One key per split: the last L - 1 splits hide their key from the first rows (-inf partials)."""
    n = 20
    case = build_multi_query_case(np.random.default_rng(L), dtype="float16", h=4, kvh=2, L=L, n=n, d=64, splits=n,
                                  layout="window")
    out = run(case, arm)
    gate_against_oracle(gate, case, out)


@FIXTURES_OK
@given(case=multi_query_cases(layouts=("slice", "window", "heads", "transposed", "reversed"), max_n=300))
def test_layout_is_invisible(arm, gate, case):
    copied = run(case, arm, k=mx.contiguous(case.k_mx), v=mx.contiguous(case.v_mx))
    gate.bit_exact(run(case, arm), copied, what=f"{case.layout} views vs contiguous copies",
                   kernel=KERNEL, case=case.id)


@FIXTURES_OK
@given(case=multi_query_cases(layouts=("contiguous",), max_n=300), data=st.data())
def test_rows_never_see_later_keys(arm, gate, case, data):
    i = data.draw(st.integers(0, case.L - 1), label="row")
    limit = case.n - case.L + i  # row i sees keys <= limit
    rng = np.random.default_rng(case.seed + 1)
    k, v = np.array(case.k_mx.astype(mx.float32)), np.array(case.v_mx.astype(mx.float32))
    k[:, :, limit + 1:] = rng.standard_normal(k[:, :, limit + 1:].shape)
    v[:, :, limit + 1:] = rng.standard_normal(v[:, :, limit + 1:].shape)
    dtype = case.k_mx.dtype
    changed = run(case, arm, k=mx.array(k).astype(dtype), v=mx.array(v).astype(dtype))
    gate.bit_exact(changed[:, :, :i + 1], run(case, arm)[:, :, :i + 1],
                   what=f"rows 0..{i} after changing keys and values past position {limit}", kernel=KERNEL,
                   case=case.id)


@settings(deadline=None)
@given(L=st.integers(1, MAX_ROWS), over=st.booleans())
def test_query_vectors_per_kv_head_are_bounded(L, over):
    rep = MAX_VECTORS // L + (1 if over else 0)
    q, kv = mx.zeros((1, 2 * rep, L, 8), mx.float16), mx.zeros((1, 2, L + 3, 8), mx.float16)
    if rep * L > MAX_VECTORS:
        with pytest.raises(ValueError, match=f"{rep * L} query vectors per KV head"):
            multi_query_causal(q, kv, kv, scale=1.0, arm="graph")
    else:
        assert multi_query_causal(q, kv, kv, scale=1.0, arm="graph").shape == (1, 2 * rep, L, 8)


def test_default_splits_follow_the_seed_up_to_the_target_grid():
    """ceil(n / 256) (the seed's) until splits x KV heads reaches TARGET_THREADGROUPS, never past MAX_SPLITS."""
    assert [default_splits(n, 1) for n in (1, 256, 257, 512, 513, 32768, 32769, 10**6)] == [1, 1, 2, 2, 3, 128, 128, 128]
    assert [default_splits(n, 8) for n in (4096, 8192, 8193, 32768, 10**6)] == [16, 32, 32, 32, 32]
    assert default_splits(32768, 8) * 8 == TARGET_THREADGROUPS
    assert [default_splits(10**6, kvh) for kvh in (1, 2, 3, 64, 600)] == [128, 128, 86, 4, 1]


# --- bad input ---------------------------------------------------------------------

def small_case():
    return build_multi_query_case(np.random.default_rng(0), dtype="bfloat16", h=4, kvh=2, L=2, n=40, d=64)


BAD_INPUTS = {
    "rows": (lambda c: dict(q=mx.zeros((1, 4, 9, 64), mx.bfloat16)), ValueError, "L=9 query rows"),
    "nq": (lambda c: dict(q=mx.zeros((1, 66, 2, 64), mx.bfloat16)), ValueError, "66 query vectors"),
    "head_dim": (lambda c: dict(q=mx.zeros((1, 4, 2, 60), mx.bfloat16), k=c.k_mx[..., :60], v=c.v_mx[..., :60]),
                 ValueError, "head dim D=60"),
    "head_dim_big": (lambda c: dict(q=mx.zeros((1, 4, 2, 264), mx.bfloat16)), ValueError, "head dim D=264"),
    "keys_head_dim": (lambda c: dict(k=c.k_mx[..., :32]), ValueError, "keys have head dim 32"),
    "values_shape": (lambda c: dict(v=c.v_mx[:, :, :30]), ValueError, "values must have the keys' shape"),
    "dtype": (lambda c: dict(k=c.k_mx.astype(mx.float16)), ValueError, "share one dtype"),
    "int_dtype": (lambda c: dict(v=c.v_mx.astype(mx.int32)), ValueError, "values must be one of"),
    "heads": (lambda c: dict(q=mx.zeros((1, 5, 2, 64), mx.bfloat16)), ValueError, "not a multiple"),
    "short_cache": (lambda c: dict(k=c.k_mx[:, :, :1], v=c.v_mx[:, :, :1]), ValueError, "fewer than q's L=2"),
    "batch": (lambda c: dict(q=mx.zeros((2, 4, 2, 64), mx.bfloat16)), ValueError, "q must have shape"),
    "rank": (lambda c: dict(k=c.k_mx[0]), ValueError, "keys must have shape"),
    "not_array": (lambda c: dict(v=np.zeros((1, 2, 40, 64))), TypeError, "values must be an mx.array"),
    "splits_zero": (lambda c: dict(splits=0), ValueError, "splits must be in"),
    "splits_many": (lambda c: dict(splits=129), ValueError, "splits must be in"),
    "splits_float": (lambda c: dict(splits=2.0), TypeError, "splits must be None or an int"),
    "scale_inf": (lambda c: dict(scale=float("inf")), ValueError, "scale must be finite"),
    "scale_bool": (lambda c: dict(scale=True), TypeError, "scale must be a real number"),
    "arm": (lambda c: dict(arm="vulkan"), ValueError, "arm must be one of"),
    "no_heads": (lambda c: dict(q=mx.zeros((1, 0, 2, 64), mx.bfloat16)), ValueError, "H=0"),
}


@pytest.mark.parametrize("what", sorted(BAD_INPUTS))
def test_bad_input_raises_naming_the_argument(what):
    case = small_case()
    change, error, message = BAD_INPUTS[what]
    args = dict(q=case.q_mx, k=case.k_mx, v=case.v_mx, scale=case.scale, arm="graph") | change(case)
    with pytest.raises(error, match=message):
        multi_query_causal(args.pop("q"), args.pop("k"), args.pop("v"), **args)


@pytest.mark.parametrize("args, error, name", [
    ((100, 0), ValueError, "kv_heads"),
    ((True, 1), TypeError, "n"),
    ((-1, 8), ValueError, "n"),
    ((100, 2.0), TypeError, "kv_heads"),
])
def test_default_splits_refuses_bad_arguments_by_name(args, error, name):
    with pytest.raises(error, match=name):
        default_splits(*args)
