"""Parity gates of kvq4 decode (``impl.kvq4_decode``), every available arm.

Per body (``BODIES``: the direct attention body, the default, and the seed's), dtype (bf16 / f16 / f32) and geometry (GQA 2/4/6/8, MQA, blocks 512 / 256 /
100 / 64 and the default (a call without ``block``), cache lengths one past a
block, sub-chunk remainders, a long cache, views of a larger cache):

* error ratio against the float64 oracle ``reference.attention.attention_ref``
  on the K/V as the kernel dequantizes them (``fma(scale, code, bias)`` in
  float32), FlashAttention's factor 2 against the naive computation in T on
  ``mx.dequantize``'s K/V (``reference.quant.dequantize``, the unfused path);
* KL through a fixed random LM head against MLX's own path,
  ``mx.dequantize`` + ``mx.fast.scaled_dot_product_attention``. The limit:
  the kernel is within the error-ratio bound B of the oracle, MLX's path
  within its measured distance M, so the outputs differ by at most
  eps = B + M per element, and Hoeffding's lemma turns eps into a KL bound
  (``properties.strategies.decode.hoeffding_kl_limit``).

``test_block_maxima_beyond_exp_range``: an attention sink and a late outlier
whose blocks' (sub-chunks', SIMD groups') maxima lie more than float32 exp's
range apart, both bodies, the error-ratio gate above: a combine or merge that
rescales against any max but the largest of them overflows (NaN).
``test_no_score_above_zero``: every score far below zero, or exactly zero, both
bodies, the same gate: a max that starts at 0, or a "no visible token" test
against 0, gives 0 / 0. ``test_q_times_scale_is_formed_in_the_dtype``: at a scale
that is not a power of two, two tokens whose order the rounding of ``q * scale``
to T decides, NMSE against the oracle on MLX's T product: a body that skips or
adds that rounding moves the output ~100 times the limit. ``test_a_body_named_at_run_time_is_that_body``: ``body``
is compared by value, not identity (a name built at run time is no interned literal).

And one MLX fact the graph arm is built around, recorded as a finding: the
precision of a float32 matmul on the current device (MLX's CUDA backend runs
float32 matmuls with TF32 tensor cores unless ``MLX_ENABLE_TF32=0``).
"""

from __future__ import annotations

import os
from functools import partial

import mlx.core as mx
import numpy as np
import pytest

from impl.kvq4_decode import BODIES, KV4_DECODE_BLOCK, SUB, THREADGROUP_MEMORY, kvq4_decode, threadgroup_bytes
from impl.recent_calls import RecentCalls
from properties.strategies import (EXP_OVERFLOW, EXP_UNDERFLOW, PEAK_HIGH, PEAK_LOW, SCORE_LEVELS, build_kvq4_case,
                                   plant_rounding_pair,
                                   decode_error_floor, hoeffding_kl_limit, kvq4_oracles, lm_head, peak_gap,
                                   score_level_peaks, segment_score_maxima)
from parity.traces import check_bounded_trace_cache
from reference import metrics
from reference.attention import UNIT_ROUNDOFF, attention_ref

DTYPES = ["bfloat16", "float16", "float32"]
# (H, KVH, N, block, layout); block None: the caller passes none (the body picks: direct from N and the heads,
# seed KV4_DECODE_BLOCK). block is the softmax partition of either body.
GEOMETRIES = [
    (4, 2, 97, 64, "contiguous"),  # GQA 2, one block + a partial one
    (12, 2, 301, 100, "window"),  # GQA 6, a last block of one token
    (8, 2, 403, 101, "contiguous"),  # GQA 4, BLOCK not a multiple of SUB: sub-chunks of 26, the last of each block 23
    (8, 1, 513, 512, "slice"),  # MQA GQA 8: a last block of one token (three empty sub-chunks)
    (16, 2, 1000, 256, "heads"),  # GQA 8
    (16, 8, 2049, 512, "contiguous"),  # GQA 2, five blocks
    (24, 4, 1500, 512, "transposed"),  # GQA 6, planes with a non-unit last stride
    (8, 2, 1203, None, "window"),  # GQA 4, the default block: a last block of 179 tokens (sub-chunks 128, 51, 0, 0)
    (8, 1, 700, None, "reversed"),  # MQA GQA 8 (the 8/1 perf shape), every plane's token stride negative
]
KERNEL = "kvq4_decode"


def geometry_id(g) -> str:
    h, kvh, n, block, layout = g
    return f"H{h}-KVH{kvh}-N{n}-block{'default' if block is None else block}-{layout}"


def mlx_path(case) -> mx.array:
    """MLX's unfused path: mx.dequantize (to T) then mx.fast.scaled_dot_product_attention."""
    k = mx.dequantize(*case.keys[:3], group_size=64, bits=4)
    v = mx.dequantize(*case.values[:3], group_size=64, bits=4)
    return mx.fast.scaled_dot_product_attention(case.q_mx, k, v, scale=case.scale)


def skip_unless_the_body_fits(body: str, case, arm: str) -> None:
    """The seed body stages every query head of a KV head in threadgroup memory: GQA past what the arm has is a
    skip, with the figures."""
    if body == "seed" and threadgroup_bytes(case.rep) > THREADGROUP_MEMORY.get(arm, float("inf")):
        pytest.skip(f"GQA {case.rep} needs {threadgroup_bytes(case.rep)} bytes of threadgroup memory, "
                    f"more than the {arm} arm has ({THREADGROUP_MEMORY[arm]})")


@pytest.mark.gate
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("body", BODIES)
def test_kvq4_decode(arm, gate, body, dtype, geometry):
    h, kvh, n, block, layout = geometry
    case = build_kvq4_case(np.random.default_rng(n), dtype=dtype, h=h, kvh=kvh, n=n,
                           block=KV4_DECODE_BLOCK if block is None else block, layout=layout)
    skip_unless_the_body_fits(body, case, arm)
    blocking = {} if block is None else {"block": block}
    out = kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, body=body, arm=arm, **blocking)
    ref, base = kvq4_oracles(case)
    floor, why = decode_error_floor(ref, dtype, case.q, case.k32, case.v32, scale=case.scale)
    record = gate.error_ratio(out, ref, base, floor=floor,
                              why=f"FlashAttention's rule (factor 2, naive T baseline on mx.dequantize's K/V); {why}",
                              kernel=KERNEL, case=case.id)

    # KL against MLX's path. Its eps is not the error-ratio bound (a limit derived from that bound passes whenever the
    # error-ratio gate passed: measured at 10^4 times the KL, so the gate could not fail alone):
    # the kernel is held to 2 u max|ref| of the oracle (its output's rounding, doubled for the float32
    # accumulation), and MLX's path is where it is (measured); their sum bounds |out - control| (triangle).
    control = mlx_path(case)
    control_error = float(np.max(np.abs(metrics.as_f64(control) - ref)))
    u = UNIT_ROUNDOFF[dtype]
    kernel_eps = 2 * u * float(np.max(np.abs(ref)))
    eps = kernel_eps + control_error
    w = lm_head(256)
    rows = case.h
    limit, derivation = hoeffding_kl_limit(eps, w)
    gate.kl(metrics.as_f64(control).reshape(rows, 256) @ w, metrics.as_f64(out).reshape(rows, 256) @ w, limit=limit,
            why=(f"{derivation}; eps = {eps:.3g}: 2 * u * max|ref| = {kernel_eps:.3g} for the kernel (u = {u:g}, "
                 f"{dtype}'s unit roundoff) plus MLX's measured distance to the oracle {control_error:.3g} "
                 f"(triangle inequality)"), kernel=KERNEL, case=case.id)


def oracle_gate(gate, case, body, arm, suffix: str):
    """A call over PEAK_BLOCK blocks, gated as every case above: FlashAttention's error ratio against the float64
    oracle (factor 2, the naive T baseline on mx.dequantize's K/V), with ``decode_error_floor``'s floor."""
    out = kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, block=PEAK_BLOCK, body=body, arm=arm)
    ref, base = kvq4_oracles(case)
    floor, why = decode_error_floor(ref, case.dtype, case.q, case.k32, case.v32, scale=case.scale)
    gate.error_ratio(out, ref, base, floor=floor,
                     why=f"FlashAttention's rule (factor 2, naive T baseline on mx.dequantize's K/V); {why}",
                     kernel=KERNEL, case=f"{case.id}-{suffix}")


# Blocks whose maxima lie more than exp's float32 range apart (``EXP_OVERFLOW``, 88.7): an attention sink at token 0
# and an outlier late (``plant_score_peaks``: PEAK_LOW 100 and PEAK_HIGH 220, "late" the outlier the larger, "sink"
# the sink; every other score a few units). Both bodies merge partials: ``direct`` (paged attention's partial, whose 4
# SIMD groups combine first, and its merge over 8 slices of the partitions) and ``seed`` (4 sub-chunks per block,
# combined, then multi-query's merge over 8 slices of the blocks). A combine or merge that rescales a partial by
# exp(m - ref) with a reference other than the largest of all the maxima (the first sub-chunk's, SIMD group's,
# block's or slice's) makes inf, then NaN, where any reference gives the same numbers when the scores are a few
# units apart (every geometry above). Blocks (partitions) of PEAK_BLOCK tokens for both bodies; the outlier is token
# 139 of block 2: merge slice 2, sub-chunk 1 (of 128 tokens), SIMD group 1 (batches of 8 tokens in turn).
# (H, KVH, N, layout): MQA, GQA 8, three blocks, the planes a slice of a NaN-poisoned cache.
PEAK_BLOCK = 512
PEAK_GEOMETRIES = [(8, 1, 1203, "slice")]
PEAK_PATTERNS = ["late", "sink"]


@pytest.mark.gate
@pytest.mark.parametrize("pattern", PEAK_PATTERNS)
@pytest.mark.parametrize("geometry", PEAK_GEOMETRIES, ids=lambda g: geometry_id((*g[:3], PEAK_BLOCK, g[3])))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("body", BODIES)
def test_block_maxima_beyond_exp_range(arm, gate, body, dtype, geometry, pattern):
    h, kvh, n, layout = geometry
    late = 2 * PEAK_BLOCK + 139
    peaks = ((0, PEAK_LOW), (late, PEAK_HIGH)) if pattern == "late" else ((0, PEAK_HIGH), (late, PEAK_LOW))
    case = build_kvq4_case(np.random.default_rng(n), dtype=dtype, h=h, kvh=kvh, n=n, block=PEAK_BLOCK,
                           layout=layout, peaks=peaks)
    for segment in (PEAK_BLOCK, PEAK_BLOCK // SUB, 8):  # blocks, the seed's sub-chunks, the direct body's batches
        gap = peak_gap(segment_score_maxima(case.q, case.k32, scale=case.scale, segment=segment))
        assert gap > EXP_OVERFLOW, f"maxima of {segment}-token runs must lie {EXP_OVERFLOW:.1f} apart, got {gap:.1f}"
    oracle_gate(gate, case, body, arm, f"peaks-{pattern}")


# Score levels a max must not assume (``score_level_peaks``: every token's key planted): "floor", every score in
# -206 .. -200 (SCORE_FLOOR), where a running or combining max that starts at 0 instead of -inf (the online softmax,
# the sub-chunk combine, the SIMD-group combine, the merge) makes every exp(s - 0) 0 in float32 and the output 0 / 0;
# "zero", every score exactly 0 (every key 0: the output is the mean of V), where a combine that tests a partial's
# max against 0 for "no visible token" skips every partial; "rise", every score -3 but the last token's, exactly 0,
# where a rescale that tests the new max against 0 for "nothing seen yet" keeps the earlier weights unscaled. Three
# blocks of PEAK_BLOCK tokens, both bodies.
@pytest.mark.gate
@pytest.mark.parametrize("level", SCORE_LEVELS)
@pytest.mark.parametrize("geometry", PEAK_GEOMETRIES, ids=lambda g: geometry_id((*g[:3], PEAK_BLOCK, g[3])))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("body", BODIES)
def test_no_score_above_zero(arm, gate, body, dtype, geometry, level):
    h, kvh, n, layout = geometry
    case = build_kvq4_case(np.random.default_rng(n), dtype=dtype, h=h, kvh=kvh, n=n, block=PEAK_BLOCK,
                           layout=layout, peaks=score_level_peaks(n, level))
    scores = segment_score_maxima(case.q, case.k32, scale=case.scale, segment=1)
    top = float(np.max(scores[np.isfinite(scores)]))
    # "floor": every weight exp(s - 0) must be 0 in float32 for a max that starts at 0 to show
    assert top == 0.0 if level in ("zero", "rise") else top < -EXP_UNDERFLOW, f"{level}: the largest score is {top}"
    oracle_gate(gate, case, body, arm, f"level-{level}")


# q * scale is formed in T, MLX's op (the contract): the seed body takes it from MLX, the direct body rounds the
# product in its kernel (ROUND_Q). At the other cases' scale, D^-1/2 = 1/16, every product is exact and the rounding
# invisible. Here scale 0.1 (0.10009765625 in bfloat16, 0.0999755859375 in float16) and ``plant_rounding_pair``: two
# tokens whose scores (100) are equal against the rounded products and about 2 u * 100 apart against the unrounded
# ones, every other score a few units. The oracle is float64 attention on MLX's T product (scale 1). The kernel's
# one rounding past it is its output's to T, |o - o*| <= u |o*| per element, so NMSE <= u^2 (its float32 softmax and
# sums add ~1e-12; the graph arm measures 0.17-0.20 u^2 on random cases); the unrounded reading must miss that limit
# by far (asserted: >= 100 u^2), so a body that drops the rounding, or rounds where MLX does not, fails.
ROUNDING_GEOMETRIES = [
    (8, 2, 300, 100, "contiguous"),  # GQA 4
    (16, 2, 1000, 256, "window"),  # GQA 8, a view
]
ROUNDING_SCALE = 0.1
ROUNDING_DTYPES = ["bfloat16", "float16"]  # float32: q * scale rounds nowhere the oracle does not


@pytest.mark.gate
@pytest.mark.parametrize("geometry", ROUNDING_GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", ROUNDING_DTYPES)
@pytest.mark.parametrize("body", BODIES)
def test_q_times_scale_is_formed_in_the_dtype(arm, gate, body, dtype, geometry):
    h, kvh, n, block, layout = geometry
    plant = partial(plant_rounding_pair, tokens=(n // 3, n - 2), score=100.0, scale=ROUNDING_SCALE, token_axis=2,
                    dtype=dtype)
    case = build_kvq4_case(np.random.default_rng(n), dtype=dtype, h=h, kvh=kvh, n=n, block=block, layout=layout,
                           plant=plant)
    skip_unless_the_body_fits(body, case, arm)
    product = case.q_mx * ROUNDING_SCALE  # MLX's op: the scale cast to T, the product rounded to T
    ref = attention_ref(metrics.as_f64(product), case.k32, case.v32, scale=1.0)
    scale_t = float(mx.array(ROUNDING_SCALE, dtype=product.dtype).astype(mx.float32).item())
    unrounded = attention_ref(case.q.astype(np.float64) * scale_t, case.k32, case.v32, scale=1.0)
    u = UNIT_ROUNDOFF[dtype]
    apart = metrics.nmse(unrounded, ref)
    assert apart >= 100 * u**2, f"the unrounded reading is only {apart / u**2:.1f} u^2 from the oracle"
    out = kvq4_decode(case.q_mx, case.keys, case.values, scale=ROUNDING_SCALE, block=block, body=body, arm=arm)
    gate.nmse(out, ref, limit=u**2,
              why=(f"u^2 = {u**2:.3g}: the output's one rounding to {dtype} (|o - o*| <= u |o*|, u = {u:g}) past "
                   f"the float64 oracle on MLX's {dtype} q * scale; float32's softmax and sums add ~1e-12. The "
                   f"unrounded q * scale lies {apart / u**2:.0f} u^2 away"),
              kernel=KERNEL, case=f"{case.id}-scale{ROUNDING_SCALE}")


def test_float32_matmul_precision(gate):
    """float32 ``a @ b`` against float64, relative to sum_k |a_ik b_kj| (the scale a float32 sum can hold).

    Full float32 accumulation of 256 terms stays below 256 * 2^-24 (~1.5e-5) of
    that scale, and in practice near 2^-24; TF32 rounds each input to a 10-bit
    mantissa first: up to 2 * 2^-11 per product. Above 2^-18 the matmul is
    classed as reduced-precision (TF32-like). Either way it must stay within
    TF32's worst case, 2^-10.
    """
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((64, 256)).astype(np.float32), rng.standard_normal((256, 64)).astype(np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    got = np.array(mx.array(a) @ mx.array(b))
    relative = float(np.max(np.abs(got - exact) / scale))
    gate.finding("float32 matmul precision on this device", {
        "device": str(mx.default_device()), "mlx": mx.__version__, "max_error_over_sum_abs_products": relative,
        "reduced_precision": relative > 2.0**-18, "MLX_ENABLE_TF32": os.environ.get("MLX_ENABLE_TF32"),
        "consequence": "graph arms keep float32 matmuls to operands exact in TF32 (half values) or use "
                       "elementwise products and sums"}, kernel="mx.matmul")
    # A real dependency, so a failing check: impl.multi_query's graph arm runs float32 matmuls on half-valued
    # operands (exact in TF32) and needs their products and float32 sums no worse than TF32's.
    assert relative <= 2.0**-10, (
        f"MLX {mx.__version__} on {mx.default_device()}: a float32 matmul is {relative:.3g} of sum|a b| off, worse "
        f"than TF32's worst case 2^-10 (MLX_ENABLE_TF32={os.environ.get('MLX_ENABLE_TF32')}): impl.multi_query's "
        f"graph arm relies on float32 matmuls at least as precise as TF32 (impl/multi_query/graph.py docstring), and "
        f"impl.kvq4_decode / impl.paged_attention avoid them only because of TF32")


COMPILED_CALLS = {"direct": ("_compiled_direct", None), "seed": ("_compiled_pair", KV4_DECODE_BLOCK)}


@pytest.mark.parametrize("body", BODIES)
def test_compiled_calls_keep_a_bounded_trace_per_length(monkeypatch, body):
    """The compiled arms' trace cache: one function per input signature (N grows every decode step),
    the most recent few kept. One function traced for every N would keep each trace for the life of
    the process (impl.kvq4_decode's docstring: ~5 KB per length). Built, never run: no GPU needed."""
    import impl.kvq4_decode as kvq4

    name, block = COMPILED_CALLS[body]
    asked = []  # the signatures kvq4_decode asks the cache for (a stand-in: nothing is traced or run)
    received = []  # what each call hands the compiled function: q, then the key planes, then the value planes
    monkeypatch.setattr(kvq4, "resolve_arm", lambda arm: "cuda")
    monkeypatch.setattr(kvq4, "_RECENT", RecentCalls(16))  # a fresh memo of validated calls, restored by undo()
    monkeypatch.setattr(kvq4, name, lambda arm, scale, block, signature: (
        asked.append(signature) or (lambda *inputs: received.append(inputs))))
    for n in (100, 100, 101):  # two layers of one step, then the next step
        case = build_kvq4_case(np.random.default_rng(0), dtype="bfloat16", h=4, kvh=2, n=n)
        q = case.q_mx
        kvq4.kvq4_decode(q, case.keys, case.values, scale=case.scale, body=body)
        want = (q, *case.keys[:3], *case.values[:3])
        assert len(received[-1]) == len(want) and all(a is b for a, b in zip(received[-1], want))
    # The step's second layer is a validated call already (impl.recent_calls): it asks nothing.
    assert len(asked) == 2 and asked[0] != asked[1]
    assert ((1, 2, 101, 32), mx.uint32) in asked[1]  # the packed keys' shape: N is in the key
    monkeypatch.undo()
    check_bounded_trace_cache(getattr(kvq4, name), ("cuda", 0.0625, block),
                              lambda n: (((1, 8, 1, 256), mx.bfloat16), ((1, 2, n, 32), mx.uint32)))


def test_a_seed_block_past_every_token_is_clamped_to_sub_times_n(monkeypatch):
    """The seed body's block is clamped to SUB * N (its contract: from there on every token is in the first
    sub-chunk, the same numbers as any larger block), no lower: a block below it is the partition asked for. Read
    where the validated call hands the block to the graph arm (the compiled arms take it the same way)."""
    import impl.kvq4_decode as kvq4

    n = 97
    case = build_kvq4_case(np.random.default_rng(0), dtype="bfloat16", h=4, kvh=2, n=n)
    handed = []
    run = kvq4._graph_call
    monkeypatch.setattr(kvq4, "_graph_call", lambda q, k, v, scale, block, body: (
        handed.append(block) or run(q, k, v, scale, block, body)))
    monkeypatch.setattr(kvq4, "_RECENT", RecentCalls(16))
    asked = [n + SUB + 1, SUB * n - 1, SUB * n, SUB * n + 1, 10**6]
    outs = [kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, block=b, body="seed", arm="graph")
            for b in asked]
    assert handed == [n + SUB + 1, SUB * n - 1, SUB * n, SUB * n, SUB * n]
    assert all(mx.array_equal(outs[2], o).item() for o in outs[3:]), "blocks past SUB * N: the same numbers"


@pytest.mark.parametrize("body", BODIES)
@pytest.mark.parametrize("dtype, scale", [("float16", 7e4), ("float16", -65520.0), ("bfloat16", 3.4e38),
                                          ("float32", 1e39)])
def test_a_scale_past_the_dtype_is_refused_by_name(body, dtype, scale):
    """q * scale is formed in T (both bodies): a finite scale that T rounds to inf made every output NaN where the
    float64 oracle is finite (float16 at 7e4). It is refused before any launch, naming scale."""
    case = build_kvq4_case(np.random.default_rng(0), dtype=dtype, h=4, kvh=2, n=70)
    with pytest.raises(ValueError, match="scale"):
        kvq4_decode(case.q_mx, case.keys, case.values, scale=scale, body=body, arm="graph")
    kvq4_decode(case.q_mx, case.keys, case.values, scale=65504.0 if dtype == "float16" else 1e30, body=body,
                arm="graph")  # the largest finite ones still run


@pytest.mark.gate
@pytest.mark.parametrize("dtype", ["float16", "float32"])  # bfloat16's 8-bit output rounds the bodies' difference away
def test_a_body_named_at_run_time_is_that_body(arm, gate, dtype):
    """``body`` is compared by value: a name built at run time (a config file's, a CLI's: not an interned literal)
    takes the body it names. On this input the two bodies round differently, so the wrong one would show."""
    case = build_kvq4_case(np.random.default_rng(5), dtype=dtype, h=8, kvh=2, n=300)
    seed, direct = (kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, body=b, arm=arm)
                    for b in ("seed", "direct"))
    assert not mx.array_equal(seed, direct).item(), "the bodies agree bit for bit here: the case cannot tell them apart"
    named = "".join(["se", "ed"])
    gate.bit_exact(kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, body=named, arm=arm), seed,
                   what="body named at run time vs body='seed'", kernel=KERNEL, case=case.id)
