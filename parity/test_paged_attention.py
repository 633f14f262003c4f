"""Parity gates of direct paged attention (``impl.paged_attention``), every available arm.

Dense pools (bf16/f16/f32), kernel "paged_attention":

* error ratio against the float64 oracle ``reference.attention.attention_ref``
  (FlashAttention's rule: factor 2 against the naive computation in the input
  dtype, ``attention_ref(upcast=False, reorder_ops=True)``, on the same K/V,
  plus the floor of ``properties.strategies.paged.error_ratio_floor``);
* KL through a fixed random LM head: logits = out @ W, KL(ref || kernel) per row.

On a compiled arm the 16-bit cases at head dims that are multiples of 16 up to 128 run the matrix
partial; ``test_dense_pool_simt_partial`` runs the same cases on the SIMT partial (both bodies gated).

Quantized pools (affine KV4/KV8, groups 32/64/128), kernel "paged_attention_q{bits}":

* error ratio against the float64 oracle on the K/V as the kernel dequantizes
  them (``InT(scale * code + bias)``), so the gate checks the attention, not
  the quantization;
* error ratio with the seed's control as the baseline: gather + ``mx.dequantize``
  + ``mx.fast.scaled_dot_product_attention`` must be no closer to the oracle
  than half the kernel's distance (minus the floor).

Through ``impl.kv`` (when present): ``PagedKVCache(direct=True).append_and_fetch``
views take the direct kernel and stay immutable under later appends.

The merge alone (compiled arms): partials packed in the PARTS layout
(``pack_partials``, NaN past the call's partitions) against the float64 oracle
``reference.attention.split_merge_ref``, within a first-order float32 bound
(``merge_float32_ulps``), maxima more than exp's float32 range apart among them
("spread"); on any machine, the layout and the merge's argument checks.

Inputs realistic kernel bugs need (each gated against the float64 oracle as
above; the bug each kills is in the comment above its grid):

* ``test_block_sizes_off_powers_of_two``: block sizes 1, 24, 40, plain and
  affine (a block and slot from a shift and a mask);
* ``test_a_physical_block_read_twice``: a table naming one physical block
  twice, also bit-exact against the same rows stored at distinct blocks;
* ``test_partition_maxima_beyond_exp_range``: an attention sink and a late
  outlier whose partitions' maxima lie > 88.7 apart (a merge or SIMD-group
  combine that rescales against any max but the largest overflows: NaN);
* ``test_no_score_above_zero``: every score far below zero, or exactly zero
  (a max that starts at 0, or tests 0 for "no visible token");
* ``test_padded_table_entries_name_a_nan_block``: physical block 0, where the
  kernels' zero-padded table and the table's unused entries point, is NaN (a
  block read from an entry past the live ones);
* ``test_partition_buffer_past_the_count_is_never_read`` (compiled arms): the
  partial launched into NaN-initialized memory writes only its count's rows,
  and the merge reads no further.

The ring fetch (CUDA): ``test_dense_pool_ring`` gates it like the dense pools and bit for bit against register
loads; ``test_ring_under_compute_sanitizer`` runs ``parity.sanitize_ring``'s calls under racecheck and memcheck
(where compute-sanitizer is on PATH), for the orderings outputs show only by timing.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import impl.paged_attention as paged
from impl.block_table import BlockTable
from impl.paged_attention import paged_attention, paged_attention_gather
from impl.paged_attention.launch import MATRIX_MAX_DIM, partition_span
from properties import strategies as sts
from reference import metrics
from reference.attention import UNIT_ROUNDOFF

DTYPES = ["bfloat16", "float16", "float32"]
# (Hq, Hkv, Dk, Dv, block_size, length, n): MHA/GQA/MQA, odd head dims, lengths
# one off block and partition edges, a long sequence (many partitions to merge).
GEOMETRIES = [
    (8, 8, 64, 64, 16, 63, 1),
    (8, 8, 128, 128, 16, 65, 4),
    (16, 2, 128, 128, 32, 600, 8),
    (8, 1, 256, 256, 64, 129, 3),
    (6, 2, 80, 80, 8, 97, 8),
    (4, 4, 96, 64, 16, 256, 2),
    (32, 4, 128, 128, 16, 1000, 1),
    (4, 2, 64, 42, 16, 300, 2),  # Dv not a multiple of 4 (no 4-element vector loads of V rows)
    (4, 2, 42, 42, 16, 300, 2),  # Dk too: a lane reads one element of a K row, its last dim d0 = Dk - 1 included
]
QUANTIZATIONS = [sts.PagedQuantization(4, 32), sts.PagedQuantization(4, 64), sts.PagedQuantization(8, 64),
                 sts.PagedQuantization(8, 128)]
# The third: past two default affine partitions (QUANTIZED_MIN_PARTITION = 512 tokens), so the merge runs across the
# partition size affine pools use by default (the property tests' lengths stay below it).
QUANT_GEOMETRIES = [(8, 2, 128, 128, 16, 300, 4), (4, 1, 256, 256, 32, 130, 1), (4, 1, 128, 128, 16, 1100, 1)]



def geometry_id(g) -> str:
    hq, hkv, dk, dv, bs, length, n = g
    return f"Hq{hq}-Hkv{hkv}-Dk{dk}-Dv{dv}-bs{bs}-len{length}-n{n}"


def make_case(dtype, geometry, quant=None, seed=0):
    hq, hkv, dk, dv, bs, length, n = geometry
    return sts.build_paged_case(np.random.default_rng(seed), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                            block_size=bs, length=length, quant=quant, spare_blocks=3, extra_table=1, seed=seed)


def kernel_name(case) -> str:
    return f"paged_attention_q{case.quant.bits}" if case.quant else "paged_attention"


def direct(case, arm):
    return paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm=arm)


# The graph arm's memory: its largest arrays are the weighted values of every query row and token, [Hq, n,
# parts * span, Dv] in float32. Measured on the CPU (MLX 0.32), its peak is 2.2 to 2.8 times their bytes over
# three geometries (37 to 3000 tokens); GRAPH_MEMORY = 16 leaves a 5x margin, where partitions past
# ceil(length / span) multiply it.
GRAPH_MEMORY = 16


@pytest.mark.parametrize("params", [dict(dtype="float32", hq=4, hkv=2, n=2, dk=64, dv=64, block_size=8, length=37),
                                    dict(dtype="float16", hq=8, hkv=2, n=1, dk=128, dv=128, block_size=16,
                                         length=1000)], ids=["short", "long"])
def test_graph_arm_memory_is_a_few_partitioned_rows(params):
    if mx.default_device() != mx.cpu:
        pytest.skip("the bound was measured with MLX's CPU allocator (a GPU's rounds small buffers up)")
    case = sts.build_paged_case(np.random.default_rng(3), **params)

    def call():
        return paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm="graph")

    mx.eval(call())  # checked and traced once, outside the measure
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    mx.eval(call())
    used = mx.get_peak_memory() - before
    span = partition_span(case.q_mx, case.storage, case.length, None)  # what the call partitions by
    tokens = span * -(-case.length // span)
    bound = GRAPH_MEMORY * params["hq"] * params["n"] * tokens * params["dv"] * 4
    assert used <= bound, f"{used} bytes for {tokens} partitioned tokens (bound {bound})"


@pytest.mark.gate
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_pool(arm, gate, dtype, geometry):
    case = make_case(dtype, geometry)
    out = direct(case, arm)
    ref, base = sts.paged_oracles(case)
    floor, why = sts.error_ratio_floor(case, ref)
    gate.error_ratio(out, ref, base, floor=floor, why=why or None, kernel="paged_attention", case=case.id)

    # KL through the fixed LM head, bounded by Hoeffding's lemma from a per-element output error eps.
    w = sts.lm_head(case.dv)
    rows = case.hq * case.n
    ref_logits = ref.reshape(rows, case.dv) @ w
    out_logits = metrics.as_f64(out).reshape(rows, case.dv) @ w
    u = UNIT_ROUNDOFF[dtype]
    if dtype == "float32":
        eps, source = floor, "the float32 noise floor of the error-ratio gate (one float32 rounding per score)"
    else:
        eps = 2 * u * float(np.max(np.abs(ref)))
        source = (f"2 * u * max|ref| (u = {u:g}, {dtype}'s unit roundoff: the output's rounding, doubled "
                  "to cover the float32 accumulation, which is 2^8 times finer or more)")
    limit, hoeffding = sts.hoeffding_kl_limit(eps, w)
    gate.kl(ref_logits, out_logits, limit=limit, why=f"{hoeffding}; eps = {eps:.3g} per output element from {source}",
            kernel="paged_attention", case=case.id)


@pytest.mark.gate
@pytest.mark.parametrize("geometry", QUANT_GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("quant", QUANTIZATIONS, ids=lambda q: f"q{q.bits}g{q.group_size}")
@pytest.mark.parametrize("dtype", DTYPES)
def test_quantized_pool(arm, gate, dtype, quant, geometry):
    case = make_case(dtype, geometry, quant)
    out = direct(case, arm)
    ref, base = sts.paged_oracles(case)  # on the K/V as the kernel dequantizes them
    floor, why = sts.error_ratio_floor(case, ref)
    kernel = kernel_name(case)
    gate.error_ratio(out, ref, base, floor=floor, why=why or None, kernel=kernel, case=case.id)

    control = paged_attention_gather(case.q_mx, case.storage, case.table, case.length, scale=case.scale,
                                     mask="causal")
    gate.error_ratio(out, ref, control, floor=floor,
                     why=("FlashAttention's rule with the seed's control as the baseline: at most 2x as far from "
                          "the float64 oracle as gather + mx.dequantize + mx.fast.scaled_dot_product_attention, "
                          f"plus the floor {floor:.3g} ({why or 'one output ULP at max|ref|'})"),
                     kernel=kernel, case=case.id)


@pytest.mark.gate
@pytest.mark.parametrize("bits", [4, 8])
def test_dequantized_kv_is_rounded_to_the_pool_dtype(arm, gate, bits):
    """The contract's ``float(InT(s * q + b))``: a dequantized K/V element is rounded to the pool dtype before it is
    used. Two keys differ only before that rounding. Key 0's dim 0 is 1.0078125 x the top code + a bias (4 bits:
    15.1171875 + 0.875 = 15.9921875, 8 bits: 256.9921875 + 0), key 1's is 1 x the top code + 1 (16, 256); both
    round to 16 / 256 in bfloat16 (spacing 1/16 below 16, 2 above 256). So both scores are equal (q = 8 on dim 0)
    and the two values, +1 and -1 on every dim, average to exactly 0: every product and sum is exact in float32.
    Unrounded, key 0 scores 0.0625 lower (4 bits) or 7.9 higher (8 bits), and the output moves to -0.03 / +1.
    Random pools never let that rounding decide a softmax, so the quantized gates cannot see it."""
    top, key_bias = 2**bits - 1, {4: 0.875, 8: 0.0}[bits]
    pack, dim, block = 32 // bits, 32, 16

    def plane(codes_dim0):  # [1 block, 1 head, block tokens, words]: dim 0 of token t holds codes_dim0[t]
        words = np.zeros((1, 1, block, dim // pack), np.uint32)
        words[0, 0, :2, 0] = codes_dim0
        return mx.array(words)

    def per_token(first, second):  # [1, 1, block, 1 group] in bfloat16
        column = np.zeros((1, 1, block, 1), np.float32)
        column[0, 0, :2, 0] = first, second
        return mx.array(column).astype(mx.bfloat16)

    storage = sts.ArrayPagedStorage(
        keys=plane([top, top]), values=plane([0, 0]), block_size=block, head_dim=dim, v_head_dim=dim,
        dtype=mx.bfloat16, quantization=sts.PagedQuantization(bits, dim),
        key_scales=per_token(1.0078125, 1.0), key_biases=per_token(key_bias, 1.0),
        value_scales=per_token(1.0, 1.0), value_biases=per_token(1.0, -1.0))
    q = np.zeros((1, 1, 1, dim), np.float32)
    q[..., 0] = 8.0
    out = paged_attention(mx.array(q).astype(mx.bfloat16), storage, [0], 2, scale=1.0, arm=arm)
    gate.bit_exact(out, mx.zeros((1, 1, 1, dim), mx.bfloat16),
                   what="keys equal once rounded to bfloat16: the two values' mean, exactly 0",
                   kernel=f"paged_attention_q{bits}", case=f"rounding-tie-q{bits}g{dim}")


@pytest.mark.gate
def test_numpy_integer_quantization_runs_as_ints(arm, gate):
    """The checks take NumPy integers for ``storage.quantization``'s bits and group size (as for every int argument):
    such a storage runs, bit for bit the same call with Python ints (the graph arm's MLX ops take only ints)."""
    from dataclasses import replace

    case = make_case("bfloat16", QUANT_GEOMETRIES[0], QUANTIZATIONS[0])
    numpy_quant = sts.PagedQuantization(np.int64(case.quant.bits), np.int32(case.quant.group_size))
    out = paged_attention(case.q_mx, replace(case.storage, quantization=numpy_quant), case.table, case.length,
                          scale=case.scale, arm=arm)
    gate.bit_exact(out, direct(case, arm), what="NumPy-int quantization against Python ints",
                   kernel=kernel_name(case), case=f"{case.id}-numpy-ints")


@pytest.fixture
def simt_partial():
    """The SIMT partial (``partial.metal``) for one test, on the shapes the matrix partial takes by default
    (``impl.paged_attention.set_matrix_partial(False)``)."""
    previous = (paged.USE_MATRIX_PARTIAL, paged.MATRIX_TOKEN_TILES)
    paged.set_matrix_partial(False)
    yield
    paged.set_matrix_partial(*previous)


# The plain geometries whose 16-bit pools the matrix partial serves (launch.matrix_eligible: both head dims
# multiples of 16 up to MATRIX_MAX_DIM), so that test_dense_pool runs it there and this grid runs the SIMT body.
SIMT_GEOMETRIES = [g for g in GEOMETRIES if all(d % 16 == 0 and d <= MATRIX_MAX_DIM for d in g[2:4])]


@pytest.mark.gate
@pytest.mark.parametrize("geometry", SIMT_GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_dense_pool_simt_partial(arm, gate, dtype, geometry, simt_partial):
    """The SIMT partial on 16-bit pools the matrix partial would take (its loads and lane maps of 16-bit rows)."""
    if arm == "graph":
        pytest.skip("the graph arm has one algorithm: which partial body runs is a compiled arm's choice")
    case = make_case(dtype, geometry)
    oracle_gate(gate, case, direct(case, arm), "simt")


@pytest.fixture
def half_simdgroup_rows(simt_partial):
    """Plain rows read by 16 lanes (``LANES_PER_ROW = 16``: two tokens per load) for one test, on the SIMT partial
    (the lane map is its; the matrix partial has its own)."""
    previous = (paged.LANES_PER_ROW, paged.WIDE_LOADS)
    paged.set_lane_map(16)
    yield
    paged.set_lane_map(*previous)


@pytest.mark.gate
@pytest.mark.parametrize("geometry", [GEOMETRIES[0], GEOMETRIES[2], GEOMETRIES[4]], ids=geometry_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_pool_half_simdgroup_rows(arm, gate, dtype, geometry, half_simdgroup_rows):
    """The 16-lanes-per-row layout (V = 8 at D128 16-bit, V = 4 at D64 and D80) against the oracle."""
    case = make_case(dtype, geometry)
    oracle_gate(gate, case, direct(case, arm), "lpr16")


@pytest.fixture
def register_fetch():
    """The matrix partial with register loads (``MATRIX_RING`` 0) for one test, whatever the default."""
    previous = paged.MATRIX_RING
    paged.set_matrix_ring(0)
    yield
    paged.set_matrix_ring(previous)


# The ring fetch's cases (launch.ring_eligible: K and V head dims equal, a multiple of 64): the dense grid's, and
# block sizes that take its other copy path (1, 4: not a multiple of 8, a table entry per row) or one block per step
# off a power of two (24), lengths that end mid-step (a step's rows past the end: V read from the last live row).
RING_GEOMETRIES = [g for g in GEOMETRIES if g[2] == g[3] and g[2] % 64 == 0 and g[2] <= MATRIX_MAX_DIM] + [
    (8, 2, 128, 128, 4, 301, 2),
    (8, 2, 64, 64, 1, 77, 1),
    (4, 1, 128, 128, 24, 509, 3),
    (8, 8, 128, 128, 8, 1031, 1),
]


@pytest.mark.gate
@pytest.mark.parametrize("slots", [2, 3, 4])
@pytest.mark.parametrize("geometry", RING_GEOMETRIES, ids=geometry_id)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_dense_pool_ring(arm, gate, dtype, geometry, slots, register_fetch):
    """The ring fetch (CUDA: K / V copied ahead into shared memory) against the oracle, and bit for bit against the
    register fetch: the same words reach the same products."""
    if arm != "cuda":
        pytest.skip("the ring is the CUDA arm's fetch (cp.async); Metal and the graph arm load into registers")
    case = make_case(dtype, geometry)
    registers = np.array(direct(case, arm).astype(mx.float32))
    paged.set_matrix_ring(slots)
    out = direct(case, arm)
    oracle_gate(gate, case, out, f"ring{slots}")
    assert np.array_equal(np.array(out.astype(mx.float32)), registers, equal_nan=True), (
        f"ring {slots}: not bit-identical to the register fetch")


# --- inputs realistic kernel bugs need ---------------------------------------------------------------------------
# (Hq, Hkv, Dk, Dv, block_size, length, n, quant), ids from ``geometry_id`` and the quantization.

Q = sts.PagedQuantization


def case_id(c) -> str:
    quant = c[7]
    return geometry_id(c[:7]) + (f"-q{quant.bits}g{quant.group_size}" if quant else "")


def oracle_gate(gate, case, out, suffix: str):
    """The error-ratio gate every case below takes: FlashAttention's rule against the float64 oracle on the K/V the
    kernel reads (dequantized as it dequantizes), with ``sts.error_ratio_floor``'s floor."""
    ref, base = sts.paged_oracles(case)
    floor, why = sts.error_ratio_floor(case, ref)
    return gate.error_ratio(out, ref, base, floor=floor, why=why or None, kernel=kernel_name(case),
                            case=f"{case.id}-{suffix}")


# Block sizes that are not powers of two: the pool takes any, and token t is slot t % BS of block
# table[t // BS] (a shift and a mask are that only for powers of two; every geometry above has one). A block per
# token (BS 1: a table entry per token), 24 and 40 across several partitions, plain and affine pools (every block
# size is eligible for both), one long enough for two affine partitions.
ODD_BLOCKS = [
    (8, 2, 128, 128, 1, 70, 3, None),
    (8, 2, 64, 64, 24, 300, 4, None),
    (4, 4, 80, 80, 40, 130, 2, None),
    (8, 2, 128, 128, 24, 300, 4, Q(4, 32)),
    (4, 1, 128, 128, 40, 1100, 1, Q(8, 64)),
    (4, 1, 64, 64, 1, 100, 2, Q(4, 64)),
]


@pytest.mark.gate
@pytest.mark.parametrize("geometry", ODD_BLOCKS, ids=case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_block_sizes_off_powers_of_two(arm, gate, dtype, geometry):
    case = make_case(dtype, geometry[:7], geometry[7], seed=geometry[4])
    oracle_gate(gate, case, direct(case, arm), "odd-block")


# One physical block named by two table entries (a prefix shared by two places of a table, or a caller's table that
# repeats itself): the kernel must read it twice. ``repeats`` of the last live entries name the first ones' blocks
# (the token rows copied, so the oracle's K/V are what the pool holds); the output must match the oracle and be the
# bytes of the same rows stored at distinct blocks. (Hq, Hkv, Dk, Dv, block_size, length, n, quant, repeats).
REPEATS = [
    (8, 2, 128, 128, 16, 100, 4, None, 2),  # the partial last block reads block 0's storage
    (8, 8, 64, 64, 1, 40, 2, None, 3),
    (4, 1, 128, 128, 24, 130, 1, Q(4, 64), 1),
]


@pytest.mark.gate
@pytest.mark.parametrize("geometry", REPEATS, ids=lambda c: f"{case_id(c[:8])}-repeats{c[8]}")
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_physical_block_read_twice(arm, gate, dtype, geometry):
    hq, hkv, dk, dv, bs, length, n, quant, repeats = geometry
    case = sts.build_paged_case(np.random.default_rng(length), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                                block_size=bs, length=length, quant=quant, spare_blocks=2, repeats=repeats)
    needed = -(-length // bs)
    assert len(set(case.table)) == needed - repeats, "the table must name some blocks twice"
    out = direct(case, arm)
    oracle_gate(gate, case, out, f"repeats{repeats}")
    distinct = list(range(needed))  # the same token rows, each logical block in a block of its own
    stored = case.relaid(distinct, needed)
    gate.bit_exact(out, paged_attention(case.q_mx, stored, distinct, case.length, scale=case.scale, arm=arm),
                   what="a block read twice vs its rows stored twice", kernel=kernel_name(case),
                   case=f"{case.id}-repeats{repeats}")


# Partitions whose maxima lie more than exp's float32 range (sts.EXP_OVERFLOW, 88.7) apart: an attention sink at
# token 0 and an outlier late in the sequence (``sts.plant_score_peaks``; sts.PEAK_HIGH 220 and sts.PEAK_LOW 100,
# the other scores a few units). A merge must rescale each partition by exp(m_p - max) with max the largest of ALL
# the partitions' maxima: one that takes another reference (the first partition's, its own slice's, the first SIMD
# group's in a partial's combine) makes exp(> 88.7) = inf and a NaN output, where any reference would do for scores
# a few units apart (every case above). "late": the outlier is the larger (in a partition of another merge slice
# than the sink's, p % 8 != 0, and of another SIMD group than the partition's first, tokens 8..15 of it); "sink":
# the sink is. Plain pools in 16 partitions of 64 tokens, affine ones in 3 of 512.
PEAKS = [
    (8, 2, 128, 128, 16, 1000, 2, None),
    (4, 1, 128, 128, 16, 1100, 1, Q(4, 32)),
]
PEAK_PATTERNS = ["late", "sink"]


def late_token(length: int, n: int, span: int) -> int:
    """Token 11 (SIMD group 1's first batch) of the last partition that is not in merge slice 0 and whose token 11
    every query row sees."""
    count = -(-length // span)
    part = max(p for p in range(1, count) if p % 8 and p * span + 11 <= length - n)
    return part * span + 11


@pytest.mark.gate
@pytest.mark.parametrize("pattern", PEAK_PATTERNS)
@pytest.mark.parametrize("geometry", PEAKS, ids=case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_partition_maxima_beyond_exp_range(arm, gate, dtype, geometry, pattern):
    hq, hkv, dk, dv, bs, length, n, quant = geometry
    plain = make_case(dtype, geometry[:7], quant)
    span = paged.partition_span(plain.q_mx, plain.storage, length, None)  # the partition every arm uses
    late = late_token(length, n, span)
    peaks = ((0, sts.PEAK_LOW), (late, sts.PEAK_HIGH)) if pattern == "late" else (
        (0, sts.PEAK_HIGH), (late, sts.PEAK_LOW))
    case = sts.build_paged_case(np.random.default_rng(0), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                                block_size=bs, length=length, quant=quant, spare_blocks=3, extra_table=1,
                                peaks=peaks)
    gap = sts.peak_gap(sts.segment_score_maxima(case.q, case.k, scale=case.scale, segment=span))
    assert gap > sts.EXP_OVERFLOW, f"the partitions' maxima must lie {sts.EXP_OVERFLOW:.1f} apart, got {gap:.1f}"
    oracle_gate(gate, case, direct(case, arm), f"peaks-{pattern}")


# Score levels a max must not assume (``sts.score_level_peaks``: every token's key planted): "floor", every score in
# -206 .. -200 (sts.SCORE_FLOOR), where a running or combining max that starts at 0 instead of -inf makes every
# exp(s - 0) 0 in float32 and the output 0 / 0; "zero", every score exactly 0 (every key 0: the output is the mean
# of V), where a combine that tests a partial's max against 0 for "no visible token" drops every partial; "rise",
# every score -3 but the last token's, exactly 0 (the last row's), where a rescale that tests the new max against 0
# for "nothing seen yet" keeps the earlier steps' weights unscaled (the last token's SIMD group saw a step before
# it). Several partitions and SIMD groups, plain and affine pools (an affine group of one value and zeros stores the
# planted keys exactly).
LEVELS = [
    (8, 2, 128, 128, 16, 300, 2, None),
    (4, 1, 64, 64, 24, 1100, 1, Q(4, 32)),
]


@pytest.mark.gate
@pytest.mark.parametrize("level", sts.SCORE_LEVELS)
@pytest.mark.parametrize("geometry", LEVELS, ids=case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_no_score_above_zero(arm, gate, dtype, geometry, level):
    hq, hkv, dk, dv, bs, length, n, quant = geometry
    case = sts.build_paged_case(np.random.default_rng(1), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                                block_size=bs, length=length, quant=quant, spare_blocks=3, extra_table=1,
                                peaks=sts.score_level_peaks(length, level))
    scores = sts.segment_score_maxima(case.q, case.k, scale=case.scale, segment=1)
    top = float(np.max(scores[np.isfinite(scores)]))
    # "floor": every weight exp(s - 0) must be 0 in float32 for a max that starts at 0 to show
    assert top == 0.0 if level in ("zero", "rise") else top < -sts.EXP_UNDERFLOW, f"{level}: the largest score is {top}"
    oracle_gate(gate, case, direct(case, arm), f"level-{level}")


# A NaN sentinel where a padded or rounded table entry points: the compiled arms read ``BlockTable.padded``, the
# entries then zeros up to a power of two, and zero names physical block 0; with ``sentinel`` block 0 holds no live
# token (NaN, as every unused block) and the entries past the live ones (``extra_table``) name it too. A kernel that
# takes a token's block from an entry past the live ones (the read-ahead of the next batch's entries, a partition
# past the count, a batch's block not clamped to the last live token) reads NaN and multiplies it by a weight of 0:
# NaN. Lengths one past a partition (64 tokens), so the last partition's tokens run far past the live ones (the graph
# arm's, and a partition a compiled arm ran to its end), and block sizes that are not multiples of a SIMD group's
# 8-token batch (1 and 12), so the last batch the kernel runs holds tokens of the block after the last live one
# (5 x 12 = 60 and 43 x 12 = 516 live-block tokens: the batches 56..63 and 512..519); tables of 6, 18, 66, 6, 10 and
# 44 entries (padded to 8, 32, 128, 8, 16 and 64); plain and affine pools (whose NaN are the scale and bias planes).
SENTINELS = [
    (8, 8, 64, 64, 16, 65, 1, None),
    (6, 2, 80, 80, 8, 129, 8, None),
    (8, 2, 64, 64, 1, 65, 3, None),
    (8, 2, 64, 64, 12, 60, 2, None),
    (4, 2, 64, 42, 24, 193, 2, None),
    (8, 2, 128, 128, 12, 516, 4, Q(4, 64)),
]


@pytest.mark.gate
@pytest.mark.parametrize("geometry", SENTINELS, ids=case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_padded_table_entries_name_a_nan_block(arm, gate, dtype, geometry):
    hq, hkv, dk, dv, bs, length, n, quant = geometry
    case = sts.build_paged_case(np.random.default_rng(length), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                                block_size=bs, length=length, quant=quant, spare_blocks=1, extra_table=1,
                                sentinel=True)
    table = BlockTable.of(case.table)
    assert 0 not in case.table[:-(-length // bs)] and len(table) < table.padded.size, "block 0 must be padding only"
    out = paged_attention(case.q_mx, case.storage, table, case.length, scale=case.scale, arm=arm)
    oracle_gate(gate, case, out, "sentinel")


# The partition buffer past the call's count (compiled arms): the partial's output holds padded_length(count)
# partitions per query row (a power of two: a growing sequence rarely retraces), its rows packed by the call's count,
# and MLX leaves the rest as it finds the memory (stale values, often zeros: a stray read can land on finite data and
# pass). Launched here with that memory NaN (MLX's ``init_value``), the partial must write exactly the count's rows
# and leave the rest NaN, and the merge, which must read no further, must match the oracle: a partial that writes,
# or a merge that reads, by the buffer's partition stride instead of the count shows. 5, 13 and 3 partitions in
# buffers of 8, 16 and 4; plain and affine.
BUFFERS = [
    (8, 8, 64, 64, 16, 300, 1, None),
    (6, 2, 80, 80, 8, 800, 8, None),
    (4, 1, 128, 128, 16, 1100, 1, Q(4, 32)),
]


@pytest.mark.gate
@pytest.mark.arms("metal", "cuda")
@pytest.mark.parametrize("geometry", BUFFERS, ids=case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_partition_buffer_past_the_count_is_never_read(arm, gate, dtype, geometry):
    from impl.kernels import compiled_kernel

    case = make_case(dtype, geometry[:7], geometry[7])
    table, scale, planes, length = paged._validate(case.q_mx, case.storage, case.table, case.length, case.scale,
                                                   direct=True)
    partial = paged.partial_launch(case.q_mx, case.storage, table, length, scale, planes)
    (shape,) = partial.output_shapes
    hq, n, partitions, width = shape
    count = -(-length // paged.partition_span(case.q_mx, case.storage, length, None))
    assert count < partitions, "the buffer must hold partitions past the call's count"
    kernel = compiled_kernel(partial.spec, arm, partial.input_dtypes, partial.shared_memory, partial.variant)
    (parts,) = kernel(inputs=list(partial.inputs), template=list(partial.template), grid=partial.grid,
                      threadgroup=partial.threadgroup, output_shapes=[shape], output_dtypes=list(partial.output_dtypes),
                      init_value=float("nan"))
    written = np.arange(parts.size) < hq * n * count * width
    gate.equal(~np.isnan(np.array(parts).reshape(-1)), written,
               what=f"the partial writes its {count} partitions' rows, packed by the count, and nothing of the "
                    f"{partitions}-partition buffer past them (NaN as launched)", kernel=kernel_name(case),
               case=f"{case.id}-buffer{partitions}-written")
    (out,) = paged.merge_launch(parts, partial.inputs[4], case.q_mx.dtype).run(arm)
    oracle_gate(gate, case, out, f"buffer{partitions}-nan")


# --- through impl.kv --------------------------------------------------------

def kv_cache(direct: bool, quant=None):
    kv = pytest.importorskip("impl.kv", reason="impl.kv (PagedKVCache) is not in this checkout")
    quantization = kv.Quantization(quant.bits, quant.group_size) if quant else None
    return kv.PagedKVCache(64, 16, direct=direct, quantization=quantization)


@pytest.mark.gate
@pytest.mark.parametrize("quant", [None, sts.PagedQuantization(4, 64)], ids=lambda q: f"q{q.bits}" if q else "dense")
@pytest.mark.parametrize("dtype", DTYPES)
def test_views_from_the_kv_cache(arm, gate, dtype, quant):
    """append_and_fetch(...).attend(q, scale, "causal") runs the direct kernel on the view, and a view
    taken before later appends keeps returning the same bytes."""
    import mlx.core as mx

    rng = np.random.default_rng(5)
    hq, hkv, d, n = 8, 2, 128, 4
    mx_dtype = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}[dtype]

    def rows(tokens, heads):
        return mx.array(rng.standard_normal((1, heads, tokens, d)).astype(np.float32)).astype(mx_dtype)

    cache = kv_cache(True, quant)
    cache.append(rows(37, hkv), rows(37, hkv))
    view = cache.append_and_fetch(rows(n, hkv), rows(n, hkv))
    q, scale = rows(n, hq), d ** -0.5
    first = view.attend(q, scale, "causal", arm=arm)
    expected = paged_attention(q, view, view.block_table, view.length, scale=scale, arm=arm)
    gate.bit_exact(first, expected, what="view.attend is the direct kernel on the view",
                   kernel="paged_attention" + (f"_q{quant.bits}" if quant else ""), case=f"{dtype}-kv")

    for _ in range(3):  # appends that fill the tail block, allocate, and grow the pool
        cache.append(rows(29, hkv), rows(29, hkv))
    gate.bit_exact(view.attend(q, scale, "causal", arm=arm), first, what="the view after 87 more appended tokens",
                   kernel="paged_attention" + (f"_q{quant.bits}" if quant else ""), case=f"{dtype}-kv-immutable")


# The merge alone: (Hq, n, count, buffer partitions, Dv, pattern); patterns and partials: ``sts.split_partials``
# ("masked": -inf partitions, as a row's causal limit before them leaves them, every partition 3 mod 8 among them:
# slice 3 then never sees a token; "spread": partition 0's max 100 and a late partition's 220, the rest near 0: more
# than exp's float32 range apart, in different slices, so the slices must reduce their maxima to the one largest
# before they rescale). 13 and 37 partitions: not multiples of the slices, in buffers with NaN past the count; 300
# and 512: more than one batch of a slice (MERGE_SLICES x MERGE_BATCH = 256 partitions), so a slice rescales its
# state to a later batch's max (rising; spread, whose peak is then partition 511: the last of its batch) or keeps
# its empty state through an all -inf batch (masked); Dv 42: lanes past Dv.
MERGE_CASES = [
    (4, 1, 1, 1, 128, "random"),
    (8, 2, 13, 16, 42, "rising"),
    (32, 1, 64, 64, 128, "falling"),
    (6, 3, 37, 64, 256, "masked"),
    (2, 8, 5, 8, 80, "random"),
    (8, 2, 13, 16, 42, "spread"),
    (4, 1, 300, 304, 64, "rising"),
    (2, 2, 512, 512, 96, "spread"),
    (3, 1, 300, 320, 128, "masked"),
]
def merge_case_id(c) -> str:
    hq, n, count, partitions, dv, pattern = c
    return f"Hq{hq}-n{n}-count{count}-buffer{partitions}-Dv{dv}-{pattern}"


def merge_float32_ulps(count: int, partitions: int) -> int:
    """Float32 ulps the merge may be from the exact merge, first order, for positive values and sums (no
    cancellation) and maxima whose differences are exact in float32 (so exp's argument is). The busiest of the
    SL = ``MERGE_SLICES`` slices takes k = ceil(count / SL) partitions in b = ceil(k / B) batches (B =
    ``merge_batch(partitions)``, of the buffer's partitions): a term carries its own weight's exp, one rescale exp
    per later batch of its slice and its slice's weight: b + 1 exps (``sts.EXP_ULPS`` each); its slice's sum takes
    k fma roundings, b - 1 rescale products and the product by the slice's weight, and the min(count, SL) slices
    that hold a partition as many additions more (an empty slice adds an exact 0). That many unit roundoffs of
    relative error in the numerator and as much in the denominator, one more in the division; a relative error of
    r unit roundoffs is at most r ulps, and the float64 reference rounds to float32 within one more."""
    slices, batch = paged.launch.MERGE_SLICES, paged.merge_batch(partitions)
    k = -(-count // slices)
    b = -(-k // batch)
    return 2 * (sts.EXP_ULPS * (b + 1) + k + (b - 1) + 1 + min(count, slices)) + 1 + 1


@pytest.mark.arms("metal", "cuda")
@pytest.mark.parametrize("case", MERGE_CASES, ids=merge_case_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_merge_matches_float64_oracle(arm, gate, dtype, case):
    """The merge kernel alone reads the PARTS layout (values, then max, then sum per row; packed by the call's
    partition count, never past it) and combines the partitions as the float64 oracle does."""
    from reference.attention import split_merge_ref

    hq, n, count, partitions, dv, pattern = case
    o, m, l = sts.split_partials(count, (hq, n), dv, pattern, np.random.default_rng(count * 7 + dv))  # partition axis first
    parts = paged.pack_partials(*(mx.array(np.moveaxis(x, 0, 2)) for x in (o, m, l)), partitions)
    span = 64
    geometry = mx.array([0.125, count * span - 5, span], dtype=mx.float32)  # count partitions of the length
    (out,) = paged.merge_launch(parts, geometry, getattr(mx, dtype)).run(arm)
    ref = split_merge_ref(o, m, l).reshape(1, hq, n, dv)
    ulps, why = sts.merge_ulps(dtype, merge_float32_ulps(count, partitions),
                               f"first-order float32 bound of the merge over {count} partitions (merge_float32_ulps: "
                               f"exp {sts.EXP_ULPS} ulp, fma, sums, division)")
    gate.max_ulp(out, ref, ulps=ulps, why=why, kernel="paged_attention", case=merge_case_id(case))


def test_parts_layout_is_values_then_max_then_sum():
    """``parts``, the partial's one output: per (query row, partition) Dv values, its max, its sum, packed by the
    call's partition count in a buffer of ``partial_shape`` (``pack_partials`` fills the rest with NaN); the
    partial's launch declares that shape, and the merge refuses another, naming the argument."""
    hq, n, count, partitions, dv = 2, 3, 5, 8, 4
    o = mx.arange(hq * n * count * dv, dtype=mx.float32).reshape(hq, n, count, dv)
    m = -1.0 - mx.arange(hq * n * count, dtype=mx.float32).reshape(hq, n, count)
    l = 1000.0 + mx.arange(hq * n * count, dtype=mx.float32).reshape(hq, n, count)
    parts = paged.pack_partials(o, m, l, partitions)
    assert parts.shape == paged.partial_shape(hq, n, partitions, dv) == (hq, n, partitions, dv + 2)
    flat = np.array(parts).reshape(-1)
    rows = flat[:hq * n * count * (dv + 2)].reshape(hq * n * count, dv + 2)
    np.testing.assert_array_equal(rows[:, :dv], np.array(o).reshape(-1, dv))
    np.testing.assert_array_equal(rows[:, dv], np.array(m).reshape(-1))
    np.testing.assert_array_equal(rows[:, dv + 1], np.array(l).reshape(-1))
    assert np.isnan(flat[hq * n * count * (dv + 2):]).all()

    case = make_case("bfloat16", GEOMETRIES[2])
    table, scale, planes, _ = paged._validate(case.q_mx, case.storage, case.table, case.length, case.scale, direct=True)
    partial = paged.partial_launch(case.q_mx, case.storage, table, case.length, scale, planes)
    (shape,) = partial.output_shapes
    assert partial.spec.output_names == ("parts",) and shape[:2] == (case.q_mx.shape[1], case.q_mx.shape[2])
    assert shape == paged.partial_shape(*shape[:3], case.storage.v_head_dim)
    geometry = partial.inputs[4]
    assert paged.merge_launch(parts, geometry, mx.bfloat16).inputs == (parts, geometry)
    for bad in (parts[..., :2], parts.reshape(-1), parts.astype(mx.float16), np.array(parts)):
        with pytest.raises(ValueError, match="parts must be"):
            paged.merge_launch(bad, geometry, mx.bfloat16)
    for bad in (geometry[:2], geometry.astype(mx.float16), [0.1, 5, 64]):
        with pytest.raises(ValueError, match="geometry must be"):
            paged.merge_launch(parts, bad, mx.bfloat16)
    with pytest.raises(ValueError, match="maxima, sums"):
        paged.pack_partials(o, m[..., :-1], l)
    with pytest.raises(TypeError, match="sums must be a float32"):
        paged.pack_partials(o, m, l.astype(mx.float16))
    with pytest.raises(ValueError, match="partitions"):
        paged.pack_partials(o, m, l, count - 1)


# --- audit regressions (adversarial inputs to the public calls) -------------------------------------------------

@pytest.mark.parametrize("call", [paged_attention, paged_attention_gather], ids=["direct", "gather"])
@pytest.mark.parametrize("scale", [1e39, -1e39, 3.5e38, 1e300])
def test_a_scale_past_float32_is_refused_by_name(call, scale):
    """The kernels apply the scale as a float32 (geometry[0]): a finite Python float past float32's range became inf
    there and every output NaN (q . k * inf), where the float64 oracle is finite. It is refused, naming scale."""
    case = make_case("float16", GEOMETRIES[0])
    with pytest.raises(ValueError, match="scale"):
        call(case.q_mx, case.storage, case.table, case.length, scale=scale)


def test_largest_float32_scales_still_run(arm, gate):
    """The edge of the refusal above: the largest scale float32 holds is a scale (q = 0 keeps the scores 0, so the
    output is the mean of the visible V rows, as the float64 oracle says)."""
    from dataclasses import replace

    case = make_case("bfloat16", GEOMETRIES[0])
    case = replace(case, q=np.zeros_like(case.q), scale=float(np.finfo(np.float32).max))
    out = paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm=arm)
    ref, base = sts.paged_oracles(case)
    floor, why = sts.error_ratio_floor(case, ref)
    gate.error_ratio(out, ref, base, floor=floor, why=why or None, kernel="paged_attention",
                     case=f"{case.id}-scale-f32max")


def test_planes_that_are_not_mx_arrays_are_type_errors():
    """A storage whose keys are not an mx.array is the wrong kind of argument: TypeError naming storage.keys (it was
    a ValueError, unlike the values plane's TypeError)."""
    from dataclasses import replace

    case = make_case("float16", GEOMETRIES[0])
    for bad in (np.array(case.storage.keys), None):
        with pytest.raises(TypeError, match="storage.keys"):
            paged_attention(case.q_mx, replace(case.storage, keys=bad), case.table, case.length, scale=0.125,
                            arm="graph")
    with pytest.raises(ValueError, match="storage.keys"):
        paged_attention(case.q_mx, replace(case.storage, keys=case.storage.keys[0]), case.table, case.length,
                        scale=0.125, arm="graph")


def test_gather_masks_are_checked():
    """``paged_attention_gather``'s mask is what its docstring allows (None, "causal", a boolean or floating array that
    broadcasts to [1, Hq, n, length]); anything else is refused naming mask, before MLX's SDPA sees it (an int32
    array would pass there as an additive mask, silently not causal)."""
    case = make_case("float16", GEOMETRIES[0])
    n, length = case.q_mx.shape[2], case.length
    bad = [("bogus", ValueError), (5, TypeError), ([[True]], TypeError), (mx.zeros((3, 3), dtype=mx.bool_), ValueError),
           (mx.zeros((n, length), dtype=mx.int32), ValueError), (mx.zeros((n, length), dtype=mx.float32), ValueError)]
    for mask, error in bad:
        with pytest.raises(error, match="mask"):
            paged_attention_gather(case.q_mx, case.storage, case.table, length, scale=0.125, mask=mask)
    causal = paged_attention_gather(case.q_mx, case.storage, case.table, length, scale=0.125, mask="causal")
    query = np.arange(n)[:, None] + length - n  # bottom-right causal as a boolean array: the same call
    visible = mx.array(np.arange(length)[None, :] <= query)
    as_array = paged_attention_gather(case.q_mx, case.storage, case.table, length, scale=0.125, mask=visible)
    assert mx.array_equal(causal, as_array).item()


# --- the ring under compute-sanitizer ----------------------------------------------------------------------------
# What each tool prints when it found nothing (compute-sanitizer's summary line).
SANITIZER_CLEAN = {"racecheck": "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)",
                   "memcheck": "ERROR SUMMARY: 0 errors"}
# The limit on one tool's run of parity.sanitize_ring (six calls, their compilation included): both tools' runs took
# 30 s together on an H100 with two more such runs and the cuda gates beside them (records/h100-cuda/ring-ceiling/);
# 8x that leaves room for a loaded machine, and a hang fails here instead of stalling the run.
SANITIZER_SECONDS = 240


@pytest.mark.parametrize("tool", sorted(SANITIZER_CLEAN))
def test_ring_under_compute_sanitizer(arm, tool):
    """The ring fetch's calls (parity.sanitize_ring) under compute-sanitizer: no shared-memory hazard (racecheck),
    no invalid access (memcheck), and its outputs bit for bit the register fetch's. The ring's orderings (a copy
    landing in a slot or buffer still in use, a piece read before the barrier that makes it visible) are wrong
    only when a copy lands late, which the gates above see only by chance."""
    if arm != "cuda":
        pytest.skip("the ring is the CUDA arm's fetch (cp.async); compute-sanitizer checks CUDA kernels")
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        pytest.skip("compute-sanitizer (the CUDA toolkit's) is not on PATH")
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([exe, "--tool", tool, sys.executable, "-m", "parity.sanitize_ring"], cwd=root,
                         capture_output=True, text=True, timeout=SANITIZER_SECONDS)
    log = run.stdout + run.stderr
    assert run.returncode == 0, f"{tool}: exit status {run.returncode}:\n{log[-3000:]}"
    assert SANITIZER_CLEAN[tool] in log, f"{tool} found something:\n{log[-3000:]}"


# The statement that must follow each wait for the ring's copies: a barrier of the lanes that read them.
RING_WAIT = re.compile(r"async_copy_wait<[^>]*>\(\);")
READERS_BARRIER = re.compile(r"\s*(?://[^\n]*\s*)*(simdgroup_barrier|threadgroup_barrier)\(")


@pytest.mark.parametrize("arm", ["cuda"])
def test_ring_reads_other_lanes_copies_after_a_barrier(arm):
    """Each wait for the ring's copies is followed at once by a barrier of the lanes that read them. A lane reads
    pieces other lanes copied (ring_prologue.metal's mapping), and ``cp.async.wait_group`` completes only the
    waiting thread's own copies: another lane's bytes are visible to it only after a barrier (the CUDA memory
    model's rule, which no run on one GPU has to show: dropped, the gates and the sanitizer test still passed on an
    H100, records/h100-cuda/ring-ceiling/). Static, so it holds on every machine; the arm is the one that compiles
    the ring (mutants.generated gives this test the ring's mutants)."""
    source = paged.launch.MATRIX_PARTIAL_RING.source
    waits = list(RING_WAIT.finditer(source))
    assert len(waits) == 2, "the loop's wait and the combine's: a wait added or gone needs this test read again"
    for wait in waits:
        line = source.count("\n", 0, wait.start()) + 1
        assert READERS_BARRIER.match(source, wait.end()), (
            f"line {line} of the ring partial: {wait.group()} is not followed by a barrier of its readers")
