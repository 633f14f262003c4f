"""Parity gates of every kernel at inputs below 8 elements, every available arm.

Why: ``mx.fast.metal_kernel`` passes an input of fewer than 8 elements in Metal's ``constant`` address space
(``const constant T* x``; a 0-d one as ``const constant T& x``), every other input as ``const device T*``
(MLX 0.32.4, ``mlx/backend/common/metal_kernel.cpp``: ``max_constant_array_size = 8``). A header helper declared
on ``const device T*`` then has no overload for such an input, and Metal refuses to make a device pointer of a
constant one, even in a cast on a path never taken: the unit does not compile. The helpers take either space now
(each kernel's module docstring says how its body reads a constant input); these cases put inputs of each kernel
below 8 elements through its public API, so the Metal arm compiles and runs those instances, and every arm is held
to the kernel's usual oracle there. (CUDA has no address spaces; its arm runs the same cases.) Each test first
asserts that its case really has the inputs below 8 elements it is about, so a later edit of the case cannot
quietly move it back to the device space.

* Normalized argmax (``impl.normalized_argmax``, kernel "normalized_argmax"): logits [1, 5], [2, 3], [1, 1],
  [1, 7], [1, 4] (V a multiple of 4: the vector condition holds, and CUDA may take its vector loads), [7, 1],
  [5] and [1, 2, 3], each filled with one hazard per row (``KINDS``: ties, a maximum in the last column, every
  logit negative (a column past the row's end read as 0 would win: mutant argmax_small_row_pads_with_zero), a
  possible rounding tie, NaN, infinities); ``lse`` [rows, 1] is below 8 elements too. ``gate.equal`` against
  native ``mx.argmax(logits - mx.logsumexp(...))`` on rows without a NaN score and against
  ``reference.sampling.normalized_argmax_ref`` with MLX's lse on every row, as ``test_normalized_argmax.py``.
* Direct paged attention (``impl.paged_attention``, kernels "paged_attention", "paged_attention_q4/q8"): pools of
  one to three blocks of one KV head with 1-8 dims, so K and / or V (and q, and the partials the merge reads)
  are below 8 elements: K/V rows of 4 dims (the body's 4-wide load), of 1-3 dims (element loads), a K of 8
  elements (device) beside a V of 4 (constant) in one instance, a permuted table with a NaN-poisoned spare block,
  GQA; affine pools of 32 dims (``reference.quant.quantize``'s smallest group): 4-bit K/V of 4 words and scales /
  biases of one element per token, 8-bit scales / biases of one or two elements. Error ratio against the float64
  oracle ``reference.attention.attention_ref`` (FlashAttention's factor 2 against the naive computation in the
  dtype, the floor of ``properties.strategies.paged.error_ratio_floor``), as ``test_paged_attention.py``.
* kvq4 decode (``impl.kvq4_decode``, kernel "kvq4_decode"): the head dim is fixed at 256, so q (256+ elements)
  and the packed planes (32 words per token) never go below 8; the scale and bias planes [1, KVH, N, 4] do at
  KVH = N = 1 (4 elements). Both bodies, a contiguous and a transposed cache; error ratio against the float64
  oracle on the K/V as the kernel dequantizes them, as ``test_kvq4_decode.py``.
* Multi-query causal decode (``impl.multi_query``): no input can go below 8 elements through its public API
  but ``scale``. q, keys and values are [1, heads, rows, D] with D a multiple of 8 (the body's 8x8 fragments), so
  at least 8 elements each, and the merge's partials hold D + 2 floats per query vector; ``scale`` is one element
  on every call (constant on Metal always: its body reads it as ``scale[0]``, an element). The smallest call (one
  head, one row, D 8, N 1 and 2: q, K, V at exactly 8 and 16 elements, the device space's edge) is gated here
  against the float64 oracle, as ``test_multi_query.py``.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from impl.kvq4_decode import BODIES, kvq4_decode
from impl.multi_query import multi_query_causal
from impl.normalized_argmax import normalized_argmax, normalized_argmax_native
from impl.paged_attention import paged_attention
from properties import strategies as sts
from properties.strategies import build_kvq4_case, build_multi_query_case, decode_error_floor, kvq4_oracles
from reference.sampling import normalized_argmax_ref, round_to

DTYPES = ["bfloat16", "float16", "float32"]
# mx.fast.metal_kernel passes an input of fewer than this many elements in Metal's constant address space
# (MLX 0.32.4, mlx/backend/common/metal_kernel.cpp: max_constant_array_size).
CONSTANT_SPACE_MAX = 8
# ULP of 1.0 in each dtype (the rounding-tie rows).
EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23}


def below_constant_space(**arrays: mx.array) -> None:
    """Each named array has fewer than CONSTANT_SPACE_MAX elements: the case is about such inputs."""
    big = {name: a.size for name, a in arrays.items() if a.size >= CONSTANT_SPACE_MAX}
    assert not big, f"the case must keep these inputs below {CONSTANT_SPACE_MAX} elements: {big}"


# --- normalized argmax --------------------------------------------------------

ARGMAX_SHAPES = [(1, 5), (2, 3), (1, 1), (1, 7), (1, 4), (7, 1), (5,), (1, 2, 3)]
KINDS = ["plain", "all_negative", "tie_first_and_last", "tie_in_chunk", "max_at_end", "rounding_tie", "nan",
         "neg_inf", "all_neg_inf", "pos_inf"]


def small_row(kind: str, V: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """One row of V logits with the hazard ``kind`` (where V leaves room for it; else a plain row)."""
    x = rng.standard_normal(V) * 3.0
    top, last = float(np.max(x)) + 2.0, V - 1
    if kind == "tie_first_and_last":  # the max at id 0 and at the last id: the lower wins (V = 1: one column)
        x[[0, last]] = top
    elif kind == "tie_in_chunk" and V >= 3:  # ids 1 and 2, in one 4-column chunk of thread 0
        x[[1, 2]] = top
    elif kind == "max_at_end":
        x[last] = top
    elif kind == "all_negative":  # every logit below 0: a column past the row's end read as 0 would win
        x = -1.0 - np.abs(x)
    elif kind == "rounding_tie" and V >= 2:
        # Logits near 0, scores near -log(V): 0 at id 0 and a quarter of a score ULP above it in the last column
        # (the larger logit at the higher id). Whether they round together depends on V; the oracle says.
        x = -np.abs(rng.standard_normal(V)) * 0.01 - 0.05
        x[[0, last]] = (0.0, EPS[dtype] / 4)
    elif kind == "nan":  # V = 1: the row's only score is NaN (answer 0)
        x[V // 2] = np.nan
    elif kind == "neg_inf":  # every column -inf but the last
        x[:last] = -np.inf
    elif kind == "all_neg_inf":
        x[:] = -np.inf
    elif kind == "pos_inf":  # +inf makes lse +inf: no finite score, answer 0
        x[last] = np.inf
    return x


@pytest.mark.gate
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", ARGMAX_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES)
def test_normalized_argmax_small_logits(arm, gate, dtype, shape, kind):
    rng = np.random.default_rng(sum(shape) * 31 + KINDS.index(kind))
    V, rows = shape[-1], int(np.prod(shape[:-1], dtype=np.int64))
    flat = np.stack([round_to(small_row(kind, V, dtype, rng), dtype) for _ in range(rows)])  # [rows, V]
    logits = sts.to_mx(flat, dtype).reshape(shape)
    below_constant_space(logits=logits, lse=mx.logsumexp(logits, axis=-1, keepdims=True))
    out = normalized_argmax(logits, arm=arm)
    assert out.shape == shape[:-1] and out.dtype == mx.uint32, (out.shape, out.dtype)
    out = np.array(out).reshape(rows)
    matrix = logits.reshape(rows, V)
    lse = mx.logsumexp(matrix, axis=-1, keepdims=True)
    nan_rows = np.array(mx.any(mx.isnan(matrix - lse), axis=-1))
    native = np.array(normalized_argmax_native(matrix))
    case = f"{dtype}-{'x'.join(map(str, shape))}-{kind}"
    gate.equal(out[~nan_rows], native[~nan_rows],
               what="native argmax(logits - logsumexp) on the rows without a NaN score",
               kernel="normalized_argmax", case=f"{case}-native")
    gate.equal(out, normalized_argmax_ref(flat, dtype, lse=lse), what="normalized_argmax_ref with MLX's lse, every row",
               kernel="normalized_argmax", case=f"{case}-oracle")


# --- direct paged attention -----------------------------------------------------

# (Hq, Hkv, n, Dk, Dv, block_size, length, spare blocks, quantization, the inputs below 8 elements)
PAGED_CASES = [
    (1, 1, 1, 4, 4, 1, 1, 0, None, ("q", "keys", "values")),  # 4-dim rows: the body's 4-wide loads
    (2, 1, 1, 3, 3, 2, 2, 0, None, ("q", "keys", "values")),  # GQA, 3-dim rows: element loads
    (1, 1, 2, 2, 2, 1, 2, 1, None, ("q", "keys", "values")),  # two query rows, a permuted table, a NaN spare block
    (1, 1, 1, 8, 4, 1, 1, 0, None, ("values",)),  # K of 8 elements (device) beside V of 4 (constant)
    (1, 1, 1, 1, 1, 1, 1, 0, None, ("q", "keys", "values")),  # one element each; the merge's partials: 3 floats
    (2, 1, 1, 32, 32, 1, 1, 0, sts.PagedQuantization(4, 32),
     ("keys", "values", "key_scales", "key_biases", "value_scales", "value_biases")),  # 4 words, one group
    (2, 1, 1, 32, 32, 1, 2, 0, sts.PagedQuantization(8, 32),
     ("key_scales", "key_biases", "value_scales", "value_biases")),  # 8 words per token (device), 2 groups
    (1, 1, 1, 32, 32, 1, 3, 1, sts.PagedQuantization(4, 32),
     ("key_scales", "key_biases", "value_scales", "value_biases")),  # a NaN-poisoned spare block's scales
]


def paged_case_id(c) -> str:
    hq, hkv, n, dk, dv, bs, length, spare, quant, _ = c
    q = f"-q{quant.bits}g{quant.group_size}" if quant else ""
    return f"Hq{hq}-Hkv{hkv}-n{n}-Dk{dk}-Dv{dv}-bs{bs}-len{length}-spare{spare}{q}"


@pytest.mark.gate
@pytest.mark.parametrize("geometry", PAGED_CASES, ids=paged_case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention_small_pool(arm, gate, dtype, geometry):
    hq, hkv, n, dk, dv, bs, length, spare, quant, small = geometry
    case = sts.build_paged_case(np.random.default_rng(length * 7 + dk), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk,
                                dv=dv, block_size=bs, length=length, quant=quant, spare_blocks=spare)
    below_constant_space(**{name: case.q_mx if name == "q" else getattr(case.storage, name) for name in small})
    out = paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm=arm)
    ref, base = sts.paged_oracles(case)  # quantized: on the K/V as the kernel dequantizes them
    floor, why = sts.error_ratio_floor(case, ref)
    gate.error_ratio(out, ref, base, floor=floor, why=why or None,
                     kernel=f"paged_attention_q{quant.bits}" if quant else "paged_attention", case=case.id)


# --- kvq4 decode ----------------------------------------------------------------


@pytest.mark.gate
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("body", BODIES)
def test_kvq4_decode_one_token(arm, gate, body, dtype, layout):
    """KVH = N = 1: the scale and bias planes [1, 1, 1, 4] are below 8 elements (module docstring)."""
    case = build_kvq4_case(np.random.default_rng(3), dtype=dtype, h=2, kvh=1, n=1, layout=layout)
    below_constant_space(**{f"{side}.{plane}": getattr(getattr(case, side), plane)
                            for side in ("keys", "values") for plane in ("scales", "biases")})
    out = kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, body=body, arm=arm)
    ref, base = kvq4_oracles(case)
    floor, why = decode_error_floor(ref, dtype, case.q, case.k32, case.v32, scale=case.scale)
    gate.error_ratio(out, ref, base, floor=floor,
                     why=f"FlashAttention's rule (factor 2, naive T baseline on mx.dequantize's K/V); {why}",
                     kernel="kvq4_decode", case=f"{body}-{case.id}")


# --- multi-query causal decode ----------------------------------------------------


@pytest.mark.gate
@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_multi_query_smallest_call(arm, gate, dtype, n):
    """One head, one row, D 8: q, K and V at 8 and 8 * n elements, the least the public API allows (module
    docstring); ``scale`` is the one input below 8 elements, as on every call."""
    case = build_multi_query_case(np.random.default_rng(n), dtype=dtype, h=1, kvh=1, L=1, n=n, d=8)
    assert min(case.q_mx.size, case.k_mx.size, case.v_mx.size) == CONSTANT_SPACE_MAX
    out = multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, arm=arm)
    sts.multi_query_gate(gate, out, case, case_id=case.id)
