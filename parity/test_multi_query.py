"""Parity gates of multi-query causal decode (``impl.multi_query``), every available arm.

Per dtype (bf16 / f16 / f32) and geometry (the speculative-verify shapes:
GQA 4/6/8 with L up to 8, NQ up to 64 (above MLX's 32-vector limit for its
vector kernel), MQA at D 256, MHA at D 64, N = L, lengths one past a split or
a 32-key block, a long cache of 16 splits, forced splits, views):

* error ratio against the float64 causal oracle
  ``reference.attention.attention_ref``: FlashAttention's factor 2 against
  the naive causal attention in the kernel's working precision (T; float16
  for float32 inputs, which the kernel rounds to half), plus one ULP of it
  at max|ref|;
* KL through a fixed random LM head against the oracle, the seed's gate
  ("not bit-identical to MLX's kernels; gate by KL"): outputs within eps per
  element give KL <= (eps * max_j ||W_j||_1)^2 / 2 (Hoeffding), with eps =
  2 u max|ref| (u: the working precision's unit roundoff; the output's rounding,
  doubled for the accumulation), not the error-ratio bound: a limit derived from
  that bound would pass whenever the error-ratio gate passed (measured at
  10^4-10^5 times the KL), so this gate could never fail on its own.
* (recorded, not gated) how far MLX's own ``mx.fast.scaled_dot_product_attention``
  with ``mask="causal"`` is from the oracle on the same inputs, as a finding.

``test_split_maxima_beyond_exp_range``: the error-ratio gate on an attention
sink and a late outlier whose splits' maxima lie more than float32 exp's range
apart (a merge that combines its slices against any max but the largest
overflows: NaN); the merge alone (compiled arms) takes such partials too
("spread"). ``test_no_score_above_zero``: every score near -200, or exactly 0,
where a max that starts at 0, or a "no visible key" test against 0, gives 0 / 0; "rise", a running max that a late
block lifts from -3 to exactly 0. ``test_views_off_the_16_byte_grid``: K or V alone a view off the 16-byte grid in
one way (head stride, row stride, start), bit for bit the call on contiguous K / V (the ring's copy eligibility).
``test_views_off_the_vector_grid`` (cuda, graph): K, V or both starting one element into the buffer, the same (the
two-stage stagers' vector eligibility; outside Metal's contract).
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from impl.multi_query import block_keys, default_splits, multi_query_causal
from impl.recent_calls import RecentCalls
from properties.strategies import (ALIGNMENT_FAULTS, EXP_OVERFLOW, EXP_ULPS, EXP_UNDERFLOW, PEAK_HIGH, PEAK_LOW,
                                   PEAK_QUERY, SCORE_FLOOR, SCORE_LEVELS, VECTOR_START, build_multi_query_case,
                                   cache_view, hoeffding_kl_limit, lm_head, merge_ulps, misaligned_view,
                                   multi_query_gate, peak_gap, score_level_peaks, segment_score_maxima,
                                   split_partials, to_mx, working_dtype)
from parity.traces import check_bounded_trace_cache
from reference import metrics
from reference.attention import UNIT_ROUNDOFF

DTYPES = ["bfloat16", "float16", "float32"]
# (H, KVH, L, N, D, splits, layout)
GEOMETRIES = [
    (32, 8, 8, 4096, 128, None, "slice"),  # GQA 4, NQ 32, 16 splits
    (48, 8, 6, 2000, 128, None, "contiguous"),  # GQA 6, NQ 36: past MLX's vector kernel
    (64, 8, 8, 1000, 128, None, "window"),  # GQA 8, NQ 64: the limit
    (8, 1, 4, 257, 256, None, "heads"),  # MQA, D 256, one key past a split
    (16, 16, 2, 33, 64, None, "transposed"),  # MHA, one key past a block, strided loads
    (4, 2, 8, 8, 64, None, "contiguous"),  # N = L: row 0 sees one key
    (12, 2, 5, 300, 80, 37, "contiguous"),  # D 80, forced splits of 9 keys
    (16, 4, 8, 500, 128, None, "reversed"),  # K / V with a negative token stride
    (40, 4, 5, 300, 80, 37, "contiguous"),  # NQ 50: an odd last pair of tiles, forced splits
]
KERNEL = "multi_query"


def geometry_id(g) -> str:
    h, kvh, L, n, d, splits, layout = g
    return f"H{h}-KVH{kvh}-L{L}-N{n}-D{d}" + (f"-splits{splits}" if splits else "") + f"-{layout}"


# The graph arm's memory: its largest arrays are K and V staged per (split, block, slot), [KVH, splits, blocks, BK,
# D] in float32 each, blocks = ceil(ceil(N / splits) / BK). Measured on the CPU (MLX 0.32), its peak is 3.2 to 6.0
# times one of them over five geometries (N 8 to 4096, D 64 to 256, forced splits); GRAPH_MEMORY = 16 leaves a 2.7x
# margin, where blocks past a split's keys multiply it.
GRAPH_MEMORY = 16


@pytest.mark.parametrize("geometry", [(8, 2, 4, 300, 64, None, "contiguous"), (12, 2, 5, 300, 80, 37, "contiguous")],
                         ids=geometry_id)
def test_graph_arm_memory_is_a_few_staged_caches(geometry):
    if mx.default_device() != mx.cpu:
        pytest.skip("the bound was measured with MLX's CPU allocator (a GPU's rounds small buffers up)")
    h, kvh, L, n, d, splits, layout = geometry
    case = build_multi_query_case(np.random.default_rng(n), dtype="float16", h=h, kvh=kvh, L=L, n=n, d=d,
                                  splits=splits, layout=layout)

    def call():
        return multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, splits=splits, arm="graph")

    mx.eval(call())  # checked and traced once, outside the measure
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    mx.eval(call())
    used = mx.get_peak_memory() - before
    count = splits or default_splits(n, kvh)
    per = -(-n // count)  # keys per split
    blocks = -(-per // block_keys(d))
    staged = kvh * count * blocks * block_keys(d) * d * 4
    assert used <= GRAPH_MEMORY * staged, f"{used} bytes for a staged cache of {staged}"


@pytest.mark.gate
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_multi_query(arm, gate, dtype, geometry):
    h, kvh, L, n, d, splits, layout = geometry
    case = build_multi_query_case(np.random.default_rng(n + L), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d,
                                  splits=splits, layout=layout)
    out = multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, splits=splits, arm=arm)
    record, ref = multi_query_gate(gate, out, case, case_id=case.id, kernel=KERNEL)
    work = working_dtype(dtype)
    u = UNIT_ROUNDOFF[work]
    eps = 2 * u * float(np.max(np.abs(ref)))
    w = lm_head(d)
    rows = h * L
    limit, derivation = hoeffding_kl_limit(eps, w)
    gate.kl(ref.reshape(rows, d) @ w, metrics.as_f64(out).reshape(rows, d) @ w, limit=limit,
            why=(f"{derivation}; eps = {eps:.3g} = 2 * u * max|ref| (u = {u:g}, {work}'s unit roundoff: the output's "
                 f"rounding, doubled to cover the float32 accumulation; independent of the error-ratio bound "
                 f"{record['threshold']:.3g})"), kernel=KERNEL, case=case.id)

    if arm == "graph":  # once per case: MLX's fused attention on the same inputs, for the record
        record_mlx_sdpa(gate, case, record, ref, splits)


def record_mlx_sdpa(gate, case, record, ref, splits) -> dict:
    """MLX's own causal SDPA on ``case``'s inputs as a finding: its error against the float64 oracle ``ref`` beside
    the kernel's gate ``record``, or, where MLX refuses the inputs, the refusal. MLX's SDPA is the record's, not the
    gate's: on its CUDA backend cuDNN refuses the reversed layout's negative strides ("strA[d] < 0 ...
    CUDNN_STATUS_BAD_PARAM", H200, MLX 0.32.4), a finding of its own, not a failure of the kernel's test."""
    try:
        mlx_out = mx.fast.scaled_dot_product_attention(case.q_mx, case.k_mx, case.v_mx, scale=case.scale,
                                                       mask="causal")
        sdpa_error = float(np.max(np.abs(metrics.as_f64(mlx_out) - ref)))
    except RuntimeError as exc:
        return gate.finding(f"MLX SDPA (mask='causal') refused the inputs of {case.id}",
                            {"error": str(exc)[:300], "device": str(mx.default_device())}, kernel=KERNEL)
    return gate.finding(f"MLX SDPA (mask='causal') vs the float64 oracle, {case.id}",
                        {"max_abs_error": sdpa_error, "kernel_max_abs_error": record["measured"],
                         "naive_baseline_error": record["baseline_error"],
                         "splits": splits or default_splits(case.n, case.kvh),
                         "device": str(mx.default_device())}, kernel=KERNEL)


def test_mlx_sdpa_is_recorded_and_its_refusal_is_a_finding(make_gate, monkeypatch):
    """``record_mlx_sdpa``: MLX's SDPA error is recorded beside the kernel's; where MLX refuses the inputs (as cuDNN
    refuses negative strides on MLX's CUDA backend) the refusal is a finding naming the case and the error, and the
    test goes on: a refusal of MLX's is not the kernel's failure."""
    records = []
    gate = make_gate(sink=records.append)
    h, kvh, L, n, d = 4, 2, 2, 40, 32
    case = build_multi_query_case(np.random.default_rng(0), dtype="float32", h=h, kvh=kvh, L=L, n=n, d=d,
                                  splits=None, layout="reversed")
    ref = np.zeros((1, h, L, d))
    kernel_record = {"measured": 1e-7, "baseline_error": 2e-7}
    seen = record_mlx_sdpa(gate, case, kernel_record, ref, None)
    assert seen["title"].endswith(case.id) and "vs the float64 oracle" in seen["title"]
    assert seen["evidence"]["max_abs_error"] > 0 and seen["evidence"]["kernel_max_abs_error"] == 1e-7
    assert seen["evidence"]["splits"] == default_splits(n, kvh)

    def refuse(*args, **kwargs):
        raise RuntimeError("[cuDNN] strA[d] < 0: CUDNN_STATUS_BAD_PARAM")

    monkeypatch.setattr(mx.fast, "scaled_dot_product_attention", refuse)
    refused = record_mlx_sdpa(gate, case, kernel_record, ref, None)
    assert refused["title"] == f"MLX SDPA (mask='causal') refused the inputs of {case.id}"
    assert "CUDNN_STATUS_BAD_PARAM" in refused["evidence"]["error"]
    assert [r["kind"] for r in records] == ["finding", "finding"]


# Splits whose maxima lie more than exp's float32 range apart (``EXP_OVERFLOW``, 88.7): an attention sink at key 0
# and an outlier late (``plant_score_peaks``: PEAK_LOW 100 and PEAK_HIGH 220, "late" the outlier the larger, "sink"
# the sink; every other score a few units), seen by every query row. The merge takes each SIMD group's splits with a
# running max, then combines the 8 slices rescaled to their common max: one that combines them against another
# reference (the first slice's top, or a split's) makes exp(> 88.7) = inf, then NaN, where any reference gives the
# same numbers when the scores are a few units apart (every geometry above). The outlier lies in split 5 (merge
# slice 5), in the split's second block of BK keys (the partial's online max moves across blocks by > 88.7).
# (H, KVH, L, N, D, splits, layout): GQA 4, 6 default splits of 250 keys, K/V a slice of a NaN-poisoned cache
# (past N); GQA 6, 37 forced splits of 9 keys (the outlier at key 9 * 5 + 2 in a split of one 9-key block).
PEAK_GEOMETRIES = [
    (8, 2, 4, 1500, 64, None, "slice"),
    (12, 2, 5, 300, 80, 37, "window"),
]
PEAK_PATTERNS = ["late", "sink"]


def outlier_key(n: int, splits: int, d: int) -> int:
    """The key 8 past the first of split 5's second block (``block_keys``), or, when a split is one block, key 2 of
    split 5."""
    per = -(-n // splits)
    bk = block_keys(d)
    return 5 * per + (bk + 8 if per > bk + 8 else 2)


def oracle_gate(gate, case, dtype, splits, arm, suffix: str):
    """A call gated as every case above: FlashAttention's error ratio against the float64 causal oracle (factor 2,
    the naive causal attention in the working precision), with ``decode_error_floor``'s floor."""
    out = multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, splits=splits, arm=arm)
    multi_query_gate(gate, out, case, case_id=f"{case.id}-{suffix}", kernel=KERNEL)


@pytest.mark.gate
@pytest.mark.parametrize("pattern", PEAK_PATTERNS)
@pytest.mark.parametrize("geometry", PEAK_GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_split_maxima_beyond_exp_range(arm, gate, dtype, geometry, pattern):
    h, kvh, L, n, d, splits, layout = geometry
    count = splits or default_splits(n, kvh)
    late = outlier_key(n, count, d)
    peaks = ((0, PEAK_LOW), (late, PEAK_HIGH)) if pattern == "late" else ((0, PEAK_HIGH), (late, PEAK_LOW))
    case = build_multi_query_case(np.random.default_rng(n + L), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d,
                                  splits=splits, layout=layout, peaks=peaks)
    assert late <= n - L and late // -(-n // count) % 8 != 0, "the outlier must be seen by every row, off slice 0"
    gap = peak_gap(segment_score_maxima(case.q, case.k, scale=case.scale, segment=-(-n // count)))
    assert gap > EXP_OVERFLOW, f"the splits' maxima must lie {EXP_OVERFLOW:.1f} apart, got {gap:.1f}"
    oracle_gate(gate, case, dtype, splits, arm, f"peaks-{pattern}")


# Score levels a max must not assume (``score_level_peaks``: every key planted): "floor", every score in -206 .. -200
# (SCORE_FLOOR), past float32 exp's underflow (-EXP_UNDERFLOW, -103.3), where a running or block max that starts
# at 0 instead of -inf weights every key exp(s - 0) = 0 and divides 0 by 0; "zero", every score exactly 0 (every
# key 0: the output is the mean of V), where a combine that tests a partial's max against 0 for "no visible key"
# drops every partial; "rise", every score -3 but the last key's, exactly 0 (the last row's), where the block that
# lifts the running max from -3 to 0 rescales the earlier blocks by exp(-3 - 0) unless a test of the new max against
# 0 for "nothing seen yet" (compute_block's `mnew == -INFINITY`) skips it: the 1500-key geometry's last split holds
# seven blocks before the last key's.
@pytest.mark.gate
@pytest.mark.parametrize("level", SCORE_LEVELS)
@pytest.mark.parametrize("geometry", PEAK_GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_no_score_above_zero(arm, gate, dtype, geometry, level):
    h, kvh, L, n, d, splits, layout = geometry
    rng = np.random.default_rng(n + L + 1)
    if level in ("zero", "rise"):
        case = build_multi_query_case(rng, dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d, splits=splits, layout=layout,
                                      peaks=score_level_peaks(n, level))
    else:  # one planted value in dim 0 for every key, the other dims keeping their few units: the kernel rounds
        # float32 keys to float16 (its working precision), the oracle does not, and one value shifts every score
        # alike (softmax-invariant); score_level_peaks' seven levels, -200 .. -206, would each round apart (up to
        # 0.06), past the gate's bound for float32 inputs on the unmutated kernel
        case = build_multi_query_case(rng, dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d, splits=splits, layout=layout)
        q, k = case.q.copy(), case.k.copy()
        q[..., 0] = PEAK_QUERY
        k[..., 0] = np.float32(SCORE_FLOOR / (case.scale * PEAK_QUERY)).astype(k.dtype)
        case = replace(case, q=q, k=k, k_mx=cache_view(k, dtype, layout, rng))
    scores = segment_score_maxima(case.q, case.k, scale=case.scale, segment=1)
    top = float(np.max(scores[np.isfinite(scores)]))
    # "floor": every weight exp(s - 0) must be 0 in float32 for a max that starts at 0 to show (the other dims' few
    # units stay within SCORE_FLOOR + EXP_UNDERFLOW, 97 below)
    assert top == 0.0 if level in ("zero", "rise") else top < -EXP_UNDERFLOW, f"{level}: the largest score is {top}"
    oracle_gate(gate, case, dtype, splits, arm, f"level-{level}")


def test_compiled_calls_keep_a_bounded_trace_per_length(monkeypatch):
    """As kvq4's: the compiled arms' call is one mx.compile'd function per input signature (N grows
    every decode step; a step's layers share it), the most recent 16 kept. Built, never run."""
    import impl.multi_query as mq

    asked = []  # the signatures multi_query_causal asks the cache for (a stand-in: nothing runs)
    monkeypatch.setattr(mq, "resolve_arm", lambda arm: "cuda")
    monkeypatch.setattr(mq, "_RECENT", RecentCalls(16))  # a fresh memo of validated calls, restored by undo()
    monkeypatch.setattr(mq, "_compiled_call", lambda arm, scale, splits, signature: (
        asked.append(signature) or (lambda *inputs: None)))
    for n in (300, 300, 301):  # two layers of one step, then the next step
        case = build_multi_query_case(np.random.default_rng(0), dtype="bfloat16", h=4, kvh=2, L=2, n=n, d=64)
        mq.multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale)
    # The step's second layer is a validated call already (impl.recent_calls): it asks nothing.
    assert len(asked) == 2 and asked[0] != asked[1]
    assert ((1, 2, 301, 64), mx.bfloat16) in asked[1]  # the keys' shape: N is in the key
    monkeypatch.undo()
    check_bounded_trace_cache(mq._compiled_call, ("cuda", 0.125, 4),
                              lambda n: (((1, 8, 2, 64), mx.bfloat16), ((1, 2, n, 64), mx.bfloat16)))


# (H, KVH, L, N, D, splits, layout): shapes where CUDA takes the two-stage partial (pipeline_stages), with several
# blocks per split, a split ending inside a block, views with strided loads, and empty splits (N 40 over 64 splits).
# "rows132": K / V rows 132 elements apart (a cache of head dim 132 sliced to 128): 4-wide loads, but rows not
# 16-byte aligned, so the ring partial's stagers take the register path.
TWO_STAGE_GEOMETRIES = [
    (32, 8, 8, 1000, 128, 5, "slice"),  # NQ 32: two tiles per SIMD group, 2 stagers
    (64, 8, 8, 700, 128, None, "transposed"),  # NQ 64: six SIMD groups, strided loads
    (16, 8, 8, 600, 256, 3, "heads"),  # D 256: 16-key blocks
    (8, 2, 1, 40, 64, 64, "contiguous"),  # NQ 4, splits past N: some empty
    (16, 4, 4, 300, 128, 3, "rows132"),  # rows not 16-byte aligned
]
# Each geometry in bfloat16, and two in the other dtypes: the ring's conversion (chunk_to_half) has a form per dtype.
TWO_STAGE_CASES = ([(g, "bfloat16") for g in TWO_STAGE_GEOMETRIES]
                   + [(TWO_STAGE_GEOMETRIES[0], "float16"), (TWO_STAGE_GEOMETRIES[2], "float32")])
# The pipelined schedules held to one stage: (stages, ring slots). Two stages; the ring at its default and at 4
# slots (ring 4: three blocks ahead, the ring wrapping within a split of 1000 keys).
PIPELINED = [(2, 0), (2, 2), (2, 4)]


def _rows132(x: mx.array) -> mx.array:
    """``x`` [1, KVH, N, 128] as a slice of a cache of head dim 132 (poisoned past 128)."""
    wide = mx.concatenate([x, mx.full(x.shape[:3] + (4,), float("nan"), dtype=x.dtype)], axis=-1)
    return mx.contiguous(wide)[..., :128]


@pytest.mark.arms("cuda")
@pytest.mark.parametrize("schedule", PIPELINED, ids=lambda s: f"stages{s[0]}-ring{s[1]}")
@pytest.mark.parametrize("geometry, dtype", TWO_STAGE_CASES, ids=[f"{geometry_id(g)}-{t}" for g, t in TWO_STAGE_CASES])
def test_pipelined_partials_match_one_stage(arm, gate, geometry, dtype, schedule):
    """The two-stage partial (CUDA: stagers fill block i + 1 while the tiles compute block i) and the ring partial
    (CUDA only: its stagers copy RING - 1 blocks ahead with cp.async and convert from shared memory) run the same
    blocks and products as the one-stage partial (Metal's schedule), and stage the same half values: their outputs
    are bit-identical to it."""
    import impl.multi_query as mq

    h, kvh, L, n, d, splits, layout = geometry
    case = build_multi_query_case(np.random.default_rng(n), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d,
                                  splits=splits, layout="contiguous" if layout == "rows132" else layout)
    keys, values = case.k_mx, case.v_mx
    if layout == "rows132":
        keys, values = _rows132(keys), _rows132(values)
        assert mx.array_equal(keys, case.k_mx).item() and mx.array_equal(values, case.v_mx).item()
    nq = h // kvh * L
    assert mq.pipeline_stages(nq, d, arm) == 2, "the geometry must be one CUDA runs in two stages"
    outs = []
    for stages, ring in ((1, 0), schedule):
        q = mx.contiguous(case.q_mx)
        partial = mq.partial_launch(q, keys, values, mx.array([case.scale], dtype=q.dtype),
                                    splits or default_splits(n, kvh), stages, ring)
        (part,) = partial.run(arm)
        outs.append(mq.merge_launch(part, q.dtype, h, L, kvh, d).run(arm)[0])
    stages, ring = schedule
    gate.bit_exact(outs[1], outs[0], what=f"{'ring' if ring else 'two-stage'} partial ({stages} stages, ring {ring}) "
                   "against one stage", kernel=KERNEL, case=f"{case.id}-{layout}-stages{stages}-ring{ring}")


# q as the views a caller hands over: "decode" is a step's q computed as [1, L, H, D] and transposed (head stride D,
# row stride H * D); "transposed" has a dim stride past 1; "heads" / "window" start inside a larger NaN-poisoned
# array; "reversed" walks q's rows with a negative stride (``cache_view``'s layouts applied to q). (H, KVH, L, N, D, splits): the ring partial's shape (CUDA's default
# at NQ 32 / D 128), D 256, and one query vector per KV head (stages 1).
QUERY_LAYOUTS = ["decode", "transposed", "heads", "window", "reversed"]
QUERY_GEOMETRIES = [(32, 8, 8, 1000, 128, None), (16, 8, 8, 600, 256, 3), (8, 8, 1, 300, 64, None)]


def query_view(q: np.ndarray, dtype: str, layout: str, rng: np.random.Generator) -> mx.array:
    """``q`` [1, H, L, D] as the view ``layout`` names (the values unchanged)."""
    if layout == "decode":
        return to_mx(np.ascontiguousarray(q.transpose(0, 2, 1, 3)), dtype).transpose(0, 2, 1, 3)
    return cache_view(q, dtype, layout, rng)


@pytest.mark.parametrize("layout", QUERY_LAYOUTS)
@pytest.mark.parametrize("geometry", QUERY_GEOMETRIES, ids=lambda g: geometry_id((*g, "q")).removesuffix("-q"))
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_query_views_are_read_through_strides(arm, gate, dtype, geometry, layout):
    """The partial reads q through ``q_strides`` (no copy of q, no graph node for one): any view of q gives the
    bytes its contiguous copy gives."""
    h, kvh, L, n, d, splits = geometry
    case = build_multi_query_case(np.random.default_rng(n + d), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d,
                                  splits=splits)
    q = query_view(case.q, dtype, layout, np.random.default_rng(n))
    assert mx.array_equal(q, case.q_mx).item(), "the view must hold q's values"
    out = multi_query_causal(q, case.k_mx, case.v_mx, scale=case.scale, splits=splits, arm=arm)
    copied = multi_query_causal(mx.contiguous(case.q_mx), case.k_mx, case.v_mx, scale=case.scale, splits=splits,
                                arm=arm)
    gate.bit_exact(out, copied, what=f"q as a {layout} view against its contiguous copy", kernel=KERNEL,
                   case=f"{case.id}-q{layout}")


# The ring partial (CUDA's default where two stages exist: ``ring_slots``) copies K / V in 16-byte chunks only where
# both planes' head and row strides are multiples of 16 bytes and both start 16-byte aligned (the `copies` test of
# ring_stager_loop.metal); its stagers take the element path elsewhere. A view off that grid in one way only, K or V
# alone (``misaligned_view``: a head stride, a row stride or a start 8 bytes off, inside the contract), must give the
# bytes of the same call on contiguous K / V: the two paths stage the same half values. An eligibility test that
# misses or inverts one condition copies from a misaligned address there (cp.async faults). GQA 4, L 8, D 128 (a
# ring of 2 slots on CUDA), 8 KV heads (a head stride off the grid moves every odd head).
MISALIGNED_GEOMETRY = (32, 8, 8, 1000, 128)


@pytest.mark.gate
@pytest.mark.parametrize("plane", ["keys", "values"])
@pytest.mark.parametrize("fault", ALIGNMENT_FAULTS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_views_off_the_16_byte_grid(arm, gate, dtype, fault, plane):
    h, kvh, L, n, d = MISALIGNED_GEOMETRY
    case = build_multi_query_case(np.random.default_rng(n + L), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d)
    k, v = case.k_mx, case.v_mx
    view = misaligned_view(case.k if plane == "keys" else case.v, dtype, fault)
    assert mx.array_equal(view, k if plane == "keys" else v).item(), "the view must hold the plane's values"
    out = multi_query_causal(case.q_mx, view if plane == "keys" else k, view if plane == "values" else v,
                             scale=case.scale, arm=arm)
    aligned = multi_query_causal(case.q_mx, k, v, scale=case.scale, arm=arm)
    gate.bit_exact(out, aligned, what=f"{plane} {fault} 8 bytes off the 16-byte grid against contiguous K / V",
                   kernel=KERNEL, case=f"{case.id}-{plane}-{fault}")


# A view starting one element into its buffer (``VECTOR_START``): off the 4-element grid the two-stage stagers' vector
# loads need, reachable only through a row-contiguous view with an odd offset, which MLX passes without a copy. The
# CUDA arm checks the start address and reads such a plane by elements (``starts_vector_aligned``, multi_query.h); a
# vector load there faults (misaligned address) and poisons the process. Metal relies on no pointer-to-integer cast,
# so its contract asks for a 4-element-aligned start instead and this case is outside it there. K or V alone, and both:
# the stagers load 4-vectors only where both planes allow it, so a check that answers the other way (vector loads
# exactly where the start is misaligned) shows only when both planes start off the grid.
@pytest.mark.gate
@pytest.mark.arms("cuda", "graph")
@pytest.mark.parametrize("planes", ["keys", "values", "both"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_views_off_the_vector_grid(arm, gate, dtype, planes):
    h, kvh, L, n, d = MISALIGNED_GEOMETRY
    case = build_multi_query_case(np.random.default_rng(n + L), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d)
    k, v = case.k_mx, case.v_mx
    if planes != "values":
        k = misaligned_view(case.k, dtype, VECTOR_START)
        assert mx.array_equal(k, case.k_mx).item(), "the view must hold the keys' values"
    if planes != "keys":
        v = misaligned_view(case.v, dtype, VECTOR_START)
        assert mx.array_equal(v, case.v_mx).item(), "the view must hold the values' values"
    out = multi_query_causal(case.q_mx, k, v, scale=case.scale, arm=arm)
    aligned = multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, arm=arm)
    gate.bit_exact(out, aligned, what=f"{planes} starting one element into the buffer against contiguous K / V",
                   kernel=KERNEL, case=f"{case.id}-{planes}-{VECTOR_START}")


# The split merge alone against the float64 oracle ``reference.attention.split_merge_ref``, on partials built to
# stress the one-pass merge's running max: (splits, KVH, NQ, D, pattern). "rising": every split raises its slice's
# max (a rescale at every step); "falling": none does; "masked": -inf partials, a whole slice of them (splits 3, 11,
# ...) and scattered ones; "random"; "spread": split 0's max 100 and split 36's (slice 4) 220, the rest near 0, more
# than exp's float32 range apart (the slices' combine must rescale to the largest of their tops, not to slice 0's).
# 129 splits: not a multiple of the 8 slices; D 8: 30 of a threadgroup's 32 lanes past D.
MERGE_CASES = [
    (1, 2, 4, 64, "random"),
    (37, 2, 10, 80, "rising"),
    (64, 8, 32, 128, "falling"),
    (129, 1, 8, 256, "masked"),
    (16, 4, 64, 8, "random"),
    (37, 2, 10, 80, "spread"),
    # One cell at D8: `part` is 40 bytes (O, m, l of one row), which MLX's CUDA allocator rounds to 64; a merge lane
    # past D that loaded its own dims instead of dims 0..3 would read up to 472 bytes past that buffer, where
    # compute-sanitizer's memcheck sees it (the merge's buffers elsewhere hide such reads inside O's later rows,
    # the m / l regions or the allocation's rounding).
    (1, 1, 1, 8, "random"),
]


def merge_case_id(c) -> str:
    splits, kvh, nq, d, pattern = c
    return f"splits{splits}-KVH{kvh}-NQ{nq}-D{d}-{pattern}"


def merge_float32_ulps(splits: int) -> int:
    """Float32 ulps the one-pass merge may be from the exact merge, first order, for positive O and l (no
    cancellation) and maxima whose differences are exact in float32 (so exp's argument is): a slice of
    k = ceil(splits / 8) partials takes k steps ``num * c + w * o``, each adding at most 2 * EXP_ULPS + 2 unit
    roundoffs of relative error (c or w from an exp, one product, one sum); the 8 slices' combine adds as much per
    slice; numerator and denominator each carry that, the division one more; a relative error of r unit roundoffs is
    at most r ulps, and the float64 reference rounds to float32 within one more."""
    k = -(-splits // 8)
    return 2 * (k + 8) * (2 * EXP_ULPS + 2) + 1 + 1


@pytest.mark.arms("metal", "cuda")
@pytest.mark.parametrize("case", MERGE_CASES, ids=merge_case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_matches_float64_oracle(arm, gate, dtype, case):
    import impl.multi_query as mq
    from reference.attention import split_merge_ref

    splits, kvh, nq, d, pattern = case
    L = next(rows for rows in (8, 5, 4, 2, 1) if nq % rows == 0)
    o32, m32, l32 = split_partials(splits, (kvh, nq), d, pattern, np.random.default_rng(splits * 7 + d))
    rep = nq // L
    part = mq.pack_parts(mx.array(o32), mx.array(m32), mx.array(l32))
    (out,) = mq.merge_launch(part, getattr(mx, dtype), kvh * rep, L, kvh, d).run(arm)
    ref = split_merge_ref(o32, m32, l32).reshape(1, kvh * rep, L, d)  # row = r * L + i is head hk * REP + r, query i
    ulps, why = merge_ulps(dtype, merge_float32_ulps(splits),
                           f"first-order float32 bound of the one-pass merge over {splits} splits (merge_float32_ulps: "
                           f"exp {EXP_ULPS} ulp, products, sums)")
    gate.max_ulp(out, ref, ulps=ulps, why=why, kernel=KERNEL, case=merge_case_id(case))


def test_parts_layout_is_o_then_m_then_l():
    """``part``, the partial's one output, holds O [S, KVH, NQ, D], then m, then l [S, KVH, NQ] (``pack_parts``);
    the merge refuses a ``part`` of another shape, naming it."""
    import impl.multi_query as mq

    s, kvh, nq, d = 3, 2, 5, 8
    cells = s * kvh * nq
    o = mx.arange(cells * d, dtype=mx.float32).reshape(s, kvh, nq, d)
    m = -1.0 - mx.arange(cells, dtype=mx.float32).reshape(s, kvh, nq)
    l = 1000.0 + mx.arange(cells, dtype=mx.float32).reshape(s, kvh, nq)
    part = mq.pack_parts(o, m, l)
    assert part.shape == mq.parts_shape(s, kvh, nq, d) == (s, kvh * nq * (d + 2))
    flat = np.array(part).reshape(-1)
    np.testing.assert_array_equal(flat[:cells * d], np.array(o).reshape(-1))
    np.testing.assert_array_equal(flat[cells * d:cells * (d + 1)], np.array(m).reshape(-1))
    np.testing.assert_array_equal(flat[cells * (d + 1):], np.array(l).reshape(-1))
    heads, rows = kvh * nq, 1
    assert mq.merge_launch(part, mx.bfloat16, heads, rows, kvh, d).inputs[0] is part
    for bad in (part[:, :-1], part.reshape(-1), part.reshape(s, kvh, -1), mx.array(0.0)):
        with pytest.raises(ValueError, match="part must be"):
            mq.merge_launch(bad, mx.bfloat16, heads, rows, kvh, d)
    with pytest.raises(ValueError, match="mpart, lpart"):
        mq.pack_parts(o, m[:, :, :-1], l)
    with pytest.raises(TypeError, match="lpart must be a float32"):
        mq.pack_parts(o, m, l.astype(mx.float16))


def test_the_call_is_two_kernels_and_hands_q_over_as_given(monkeypatch):
    """The compiled arm's call (``_kernel_call``, what ``_compiled_call`` traces) is the partial and the merge and
    nothing else: q goes to the partial as the caller's view (no ``mx.contiguous`` node: the body reads
    ``q_strides``), the partial's one output to the merge, the merge's output back. Each extra node or output costs
    the H200's host time per call (perf/RESULTS.md, "A call's fixed cost"), so this holds the call's shape on any machine
    (a stand-in for the two launches: nothing runs)."""
    import impl.multi_query as mq

    seen = []

    class Ran:
        def __init__(self, *outputs):
            self.outputs = list(outputs)

        def run(self, arm):
            seen.append(arm)
            return self.outputs

    part, out = mx.zeros((4, 1), mx.float32), mx.zeros((1,), mx.bfloat16)
    monkeypatch.setattr(mq, "partial_launch", lambda q, *args: seen.append(("partial", q)) or Ran(part))
    monkeypatch.setattr(mq, "merge_launch", lambda got, *args: seen.append(("merge", got)) or Ran(out))
    q = mx.zeros((1, 2, 8, 64), mx.bfloat16).transpose(0, 2, 1, 3)  # [1, 8, 2, 64] as a decode step's view
    kv = mx.zeros((1, 2, 40, 64), mx.bfloat16)
    assert mq._kernel_call("cuda", 0.125, 4, q, kv, kv) is out
    assert seen == [("partial", q), "cuda", ("merge", part), "cuda"]


def test_launch_geometry_stages_every_row():
    """For every head dim (multiples of 8 up to 256) and query-vector count (1..64), both schedules where they
    exist: every 4-dim quad of a row has a stager, the stagers' passes cover a block's BK rows, the buffers fit the
    arm's threadgroup memory (one stage: Metal's 32 KiB; two: CUDA's 48 KiB static), and a two-stage threadgroup
    stays within MAX_PIPELINED_SIMDGROUPS; where two stages do not exist, partial_launch refuses them. A gap here
    would leave rows of K / V unstaged on a GPU only."""
    import impl.multi_query as mq

    scale = mx.ones((1,), mx.bfloat16)
    for d in range(8, mq.MAX_HEAD_DIM + 1, 8):
        kv = mx.zeros((1, 1, 16, d), mx.bfloat16)
        for nq in range(1, mq.MAX_VECTORS + 1):
            q = mx.zeros((1, nq, 1, d), mx.bfloat16)  # one KV head: NQ = nq query heads x 1 row
            for stages in (1, 2):
                if stages == 2 and mq.pipeline_stages(nq, d, "cuda") != 2:
                    with pytest.raises(ValueError, match="stages=2"):
                        mq.partial_launch(q, kv, kv, scale, 1, stages)
                    continue
                t = dict(mq.partial_launch(q, kv, kv, scale, 1, stages).template)
                rows_per_pass = t["STAGERS"] // (d // 4)
                assert rows_per_pass >= 1 and rows_per_pass * t["ITEMS"] >= t["BK"], (d, nq, stages, t)
                assert t["THREADS"] == 32 * mq.simdgroups(nq, d, stages) <= 1024
                buffers = stages * 2 * t["BK"] * t["KS"] * 2
                assert buffers <= (mq.STATIC_SHARED_BYTES if stages == 2 else mq.THREADGROUP_BYTES), (d, nq, stages)
                if stages == 2:
                    assert mq.simdgroups(nq, d, 2) <= mq.MAX_PIPELINED_SIMDGROUPS
                    assert t["THREADS"] - t["STAGERS"] == 32 * mq.computing_simdgroups(nq, d)
    assert mq.pipeline_stages(32, 128, "metal") == 1 and mq.pipeline_stages(32, 128, "cuda") == 2
    with pytest.raises(ValueError, match="stages must be 1 or 2"):
        mq.partial_launch(mx.zeros((1, 4, 1, 64), mx.bfloat16), kv[..., :64], kv[..., :64], scale, 1, 3)


def test_ring_geometry_fits_and_refuses_what_it_cannot_run():
    """The ring partial (CUDA only): wherever CUDA runs two stages, for every dtype, the default ring exists, its
    16-byte copies tile a row exactly (D * itemsize a multiple of 16: the body's ROW_CHUNKS), and its dynamic
    shared memory (half buffers + RING raw slots) is what the launch asks for, within the 227 KiB an H200 grants;
    Metal never gets it; bad ring arguments are refused naming ``ring``, and a Metal compile of the CUDA-only spec
    is refused before any compiler runs."""
    import impl.multi_query as mq
    from impl.kernels import MAX_DYNAMIC_SHARED_BYTES, compiled_kernel

    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        scale = mx.ones((1,), dtype)
        for d in range(8, mq.MAX_HEAD_DIM + 1, 8):
            kv = mx.zeros((1, 1, 16, d), dtype)
            for nq in range(1, mq.MAX_VECTORS + 1):
                ring = mq.ring_slots(nq, d, dtype, "cuda")
                assert mq.ring_slots(nq, d, dtype, "metal") == 0
                if mq.pipeline_stages(nq, d, "cuda") != 2:
                    assert ring == 0, (d, nq)
                    continue
                assert ring == mq.RING_SLOTS, (dtype, d, nq)
                launch = mq.partial_launch(mx.zeros((1, nq, 1, d), dtype), kv, kv, scale, 1, 2, ring)
                t = dict(launch.template)
                assert launch.spec is mq.PARTIAL_RING and t["RING"] == ring and t["STAGES"] == 2
                assert d * dtype.size % 16 == 0
                assert launch.shared_memory == mq.ring_shared_bytes(d, dtype, ring) <= MAX_DYNAMIC_SHARED_BYTES
                assert launch.shared_memory == 2 * 2 * t["BK"] * t["KS"] * 2 + ring * 2 * t["BK"] * d * dtype.size
    q, kv, scale = mx.zeros((1, 32, 1, 128), mx.bfloat16), mx.zeros((1, 1, 64, 128), mx.bfloat16), mx.ones((1,), mx.bfloat16)
    for bad in (1, mq.MAX_RING_SLOTS + 1, True, 2.0, -2):
        with pytest.raises(ValueError, match="ring must be 0 or an int"):
            mq.partial_launch(q, kv, kv, scale, 1, 2, bad)
    with pytest.raises(ValueError, match="ring=2 needs stages=2"):
        mq.partial_launch(q, kv, kv, scale, 1, 1, 2)
    with pytest.raises(ValueError, match="cuda-only kernel; arm 'metal'"):
        compiled_kernel(mq.PARTIAL_RING, "metal", (mx.bfloat16,) * 4, 0)


@pytest.mark.parametrize("dtype, scale", [("float16", 7e4), ("float16", -65520.0), ("bfloat16", 3.4e38),
                                          ("float32", 1e39)])
def test_a_scale_past_the_dtype_is_refused_by_name(dtype, scale):
    """q * scale is formed in T: a finite scale that T rounds to inf made every output NaN where the float64 oracle
    is finite (float16 at 7e4). It is refused before any launch, naming scale."""
    case = build_multi_query_case(np.random.default_rng(0), dtype=dtype, h=4, kvh=2, L=3, n=70, d=64)
    with pytest.raises(ValueError, match="scale"):
        multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=scale, arm="graph")
