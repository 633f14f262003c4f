"""Direct paged attention's kernels: the partial and merge specs, their launch geometry, the launches.

The bodies are the files beside this module: ``partial.metal`` (its K/V load blocks, one per pool
layout, are ``load_plain.metal``, ``load_affine.metal`` and ``load_strided_affine.metal``: templates over
the plane and register names), ``merge.metal``, and the helpers of ``paged_attention.h``.

Algorithm (every arm): the sequence is cut into partitions of ``partition`` tokens
(None: ``partition_size`` picks a multiple of 64 from N and the heads so that a launch has
about ``TARGET_THREADGROUPS`` threadgroups, ``QUANTIZED_TARGET_THREADGROUPS`` for affine
pools, whose partitions also keep at least ``QUANTIZED_MIN_PARTITION`` tokens where N has them;
short plain sequences get 64, the seed's size).
Partial pass: one threadgroup per (partition, KV head, chunk of up to ``MAX_ROWS`` of the
G * n query rows that read that head), so K/V are read once per KV head, not per query head
(GQA sharing, as kvq4 does). Its 4 SIMD groups take 8-token batches in turn. LPR lanes read a
row (``_lane_map``: 32, or 16 for plain pools when ``LANES_PER_ROW`` says so: half a SIMD group per
token, two tokens per load instruction); lane l owns dims (j * LPR + l % LPR) * V + e of a row
(plain: V = 8, one 16-byte load, for 16-bit rows of a multiple of 8 * LPR dims, else V = 4, one
8- or 16-byte load; a plane of fewer than 8 elements, in Metal's constant space, is read element by
element; quantized: V = 32 / bits, one packed word, or less when a row has fewer than 32 words, so
every lane works: ``_lanes``), so LPR lanes read each K and V row as one coalesced run, and a batch
issues its 8 K and 8 V rows together with the next batch's block-table entries read ahead. Scores
are float32 dot products (each lane's fma chain, then a transpose-reduction
over a row's lanes: LPR 32, 9 shuffles give 8 tokens' sums, lane l holding token l / 4's; LPR
16, 5 shuffles give each half's 4), q carrying ``scale`` (applied in float32 as q is
loaded); each batch makes one float32
online-softmax step (one exp per lane, one rescale, skipped when the max stays); weights reach
the V accumulation by shuffle (with LPR 16 each half accumulates its tokens; the halves are added
at the end). Quantized pools dequantize on load: ``InT(scale * code + bias)`` rounded to the pool
dtype, then widened. The SIMD groups combine in threadgroup memory, rescaled to their common
max, and the partial writes its one output, ``parts``: per (query row, partition) a row of Dv
values, then the partition's max and sum (``partial_shape``; one output rather than two: MLX's
host pays ~1.5-3 us per output per call on the H200). Merge pass: per output element, rescale
each partition by ``exp(max_p - max)`` and divide the summed values by the summed normalizers,
cast to q's dtype. An empty partition (rows of the
last partition beyond a query's causal limit) contributes max ``-inf``, sum 0: weight 0.

The same body serves kvq4's contiguous 4-bit cache (``impl.kvq4_decode``, body ``direct``): its
``KVQ4`` layout (``Layout``: template ``STRIDED``, ``ROUND_Q``) reads no block table, addresses
token t of KV head h through each plane's own strides (``STRIDED_PARTIAL``, inputs not copied),
keeps dequantized values in float32 and rounds ``q * scale`` to the dtype, as kvq4's seed does
(``strided_partial_launch``; the graph arm takes the same ``layout``).

The matrix partial (``partial_matrix.metal``, ``MATRIX_PARTIAL``) takes plain bfloat16 / float16 pools whose
head dims are multiples of 16 up to ``MATRIX_MAX_DIM`` (``matrix_eligible``; ``USE_MATRIX_PARTIAL``'s comment has
why and its figures): the same grid, partitions, output and merge, with a threadgroup serving up to 8 query rows
of its KV head (one 8-row tile) and each SIMD group multiplying 8-token tiles on the matrix units: S^T = K . Q^T
and O += P . V as simdgroup products (CUDA: tensor-core mma, ``impl/kernels/metal_simdgroup.cuh``; Metal: Apple's
simdgroup matrices), the online softmax in float32 between them.

Arms: ``metal`` / ``cuda`` compile these bodies (one source for both dialects; the affine variant
differs only in its two load blocks, as in the seed).

Every multiply-add in the bodies is an explicit ``fma``: NVRTC contracts a separate multiply
and add at its discretion (``-fmad=true``), and on the H200 it evidently did so differently in
two template instances, which broke the bit-exact "row i of an n-row call equals a one-row
call" property in float32. With nothing left to contract, every instance rounds the same way
(the property holds on the H200: ``records/h200-cuda/``).

The seed's body (one SIMD group per query head, row and 64-token partition) ran at 0.20 /
0.76 TB/s on the H200 where this one runs at the figures of ``perf/RESULTS.md``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from string import Template
from typing import TYPE_CHECKING, NamedTuple

import mlx.core as mx

from impl.block_table import BlockTable, padded_length
from impl.checks import check_choice, check_int, check_partials
from impl.kernels import SIMDGROUP_HEADER, KernelSpec, Launch, kernel_text

if TYPE_CHECKING:
    from impl.paged_attention import PagedStorage

__all__ = [
    "HEADER",
    "KVQ4",
    "MATRIX_MAX_DIM",
    "MATRIX_MIN_PARTITION",
    "MATRIX_PARTIAL",
    "MATRIX_PARTIAL_RING",
    "MATRIX_RING",
    "MAX_MERGE_THREADS",
    "MAX_RING_SLOTS",
    "MATRIX_TOKEN_TILES",
    "USE_MATRIX_PARTIAL",
    "MAX_ROWS",
    "MERGE",
    "MERGE_BATCH",
    "MERGE_SLICES",
    "PAGED",
    "PARTIAL",
    "PARTITION_QUANTUM",
    "QUANTIZED_MIN_PARTITION",
    "QUANTIZED_PARTIAL",
    "QUANTIZED_TARGET_THREADGROUPS",
    "SIMDGROUPS",
    "STRIDED_PARTIAL",
    "TARGET_THREADGROUPS",
    "THREADGROUP_MEMORY",
    "Layout",
    "choose_lane_map",
    "choose_matrix_partial",
    "choose_matrix_ring",
    "choose_merge",
    "choose_threadgroup_target",
    "matrix_eligible",
    "matrix_rows_per_threadgroup",
    "merge_batch",
    "merge_launch",
    "pack_partials",
    "partial_launch",
    "partial_shape",
    "partition_size",
    "partition_span",
    "ring_eligible",
    "ring_shared_bytes",
    "ring_slots",
    "rows_per_threadgroup",
    "single_block_table",
    "strided_partial_launch",
]

SIMD = 32
SIMDGROUPS = 4  # SIMD groups per partial threadgroup: four 8-token batches in flight per round
# Tokens a SIMD group takes per step (a power of two dividing 32). 16 doubles the bytes each memory
# wait brings but needs 211-255 registers (nvcc -Xptxas -v) against 128-168, and quantized pools
# then use a stack frame: on the H200 it loses at every shape, with the 16-bit word loads too:
# 32/8/D128/N32k 0.123 against 0.100 ms, 16/8/D256/N128k 0.293 against 0.281.
BATCH_TOKENS = 8
# Lanes that read one K/V row of a plain pool (template LPR): 32 (a SIMD group per token) or 16 (half
# of one: a load instruction of the SIMD group brings two tokens' rows, and the score's reduction
# and the weights' broadcast take half the shuffles). None: 16 when a row is at most HALF_ROW_BYTES
# bytes (16 lanes x one 16-byte load: a bf16/f16 D128 row), else 32. Quantized pools always use 32.
# 32 by default: at 32/8/D128 bf16 (4 rows per threadgroup) 16 lanes per row need 155 registers
# against 119 (nvcc 13 -Xptxas -v, sm_90), 3 threadgroups per H200 SM instead of 4, for ~10% fewer
# instructions per batch (PTX count). Measured on the H200 (ms per call): 32/8/D128/N32k 32 lanes 0.108, 16 lanes 0.116, None 0.115; 16/8/D256/N128k
# 32 lanes 0.286, 16 lanes 0.326. Change with ``set_lane_map`` (the package's).
LANES_PER_ROW: int | None = SIMD
HALF_ROW_BYTES = 256
# Plain 16-bit pools read 8 elements per lane with one 16-byte load where a row allows it (D a
# multiple of 8 * LPR, e.g. D256); False: 4 elements (one 8-byte load) per lane and load.
WIDE_LOADS = True
MAX_ROWS = 4  # query rows (GQA heads x query rows) one threadgroup serves: registers grow with it
PARTITION_QUANTUM = 64  # partitions are whole multiples of this many tokens
# Partitions are sized so that a launch has about this many threadgroups (plain pools). An NVIDIA H200 has 132
# SMs and holds 3-4 of these 128-thread groups per SM (136-168 registers per thread, nvcc -Xptxas -v), so 512 is
# 1-1.3 waves. Measured on the H200 with each call of a round on its own cache and with one call per round
# (us per call, 512 against 1024 threadgroups): 32/8/D128/N32k eval8
# 108.9 / 107.5, alone (pipelined1) 64.7 / 76.5; 16/8/D256/N128k 281.1 / 287.6 and 254.2 / 267.7; 32/8/D128/N128k
# 221.1 / 217.6 and 189.1 / 201.3; 8/1/D128/N32k 65.6 / 71.4 and 59.0 / 59.5: equal with 8 calls per round, 5-15%
# faster alone. (With 8 calls on one cache, 512-2048 are within +-10%: such calls share K/V in the L2, see
# perf.cases.)
TARGET_THREADGROUPS = 512
# Affine (KV4 / KV8) pools and kvq4's layout keep 1024 threadgroups, in partitions of at least 512 tokens. H200
# (us per call, eval8 / alone): KV4 16/8/D256/N128k at 1024 threadgroups 379 / 341 against 386 / 376 at
# 512 (KV8 501 / 496 against 525 / 595), while at 32/8/D128/N32k, where 1024 threadgroups mean 256-token
# partitions, 512 tokens won (KV4 128.7 / 87.7 against 143.6 / 87.7; KV8 169.5 / 110.9 against 171.8 / 121.6),
# and kvq4 took 93.7 / 68.9 at 8/1/N32k with 512 tokens against 114.5 / 85.1 with 64 (its 1024 threadgroups).
# A shorter partition of these pools pays more partials and merge work than it gains in parallelism.
QUANTIZED_TARGET_THREADGROUPS = 1024
QUANTIZED_MIN_PARTITION = 512
THREADGROUP_MEMORY = 32 * 1024  # bytes of threadgroup memory a body may declare: Apple GPUs' limit

# USE_MATRIX_PARTIAL: the matrix partial (partial_matrix.metal, MATRIX_PARTIAL) serves plain bfloat16 / float16
# pools whose K and V head dims are multiples of 16 up to MATRIX_MAX_DIM, for every block size: per step a SIMD
# group multiplies TT 8-token tiles on the matrix units (CUDA: tensor-core mma; Metal: simdgroup products), and a
# threadgroup serves up to 8 query rows of a KV head (one 8-row tile) where the SIMT body serves 4. Its numerics:
# q . k summed in float32 (exact 16-bit products), the scale applied to the float32 score, P rounded to the pool
# dtype for P . V and the sum of the same rounded weights in float32: the error of the naive computation in the
# pool dtype, which the gates take as their baseline. Why: the SIMT body's dot and V chains, shuffle reductions and
# weight broadcasts kept it below the H200's bandwidth at D128 (kernel time 32/8/D128/N128k 192.3 us, 2.79 TB/s);
# the matrix body takes 137.6 us (3.90 TB/s), 42.0 against 56.0 at N32k, 19.3 against 30.2 at 8/1/N32k
# (perf/RESULTS.md, "Paged decode kernel time"). D256 stays on the SIMT body (4.3 TB/s, at the copy limit), where
# the matrix body's O alone would hold 64 registers per lane. ``choose_matrix_partial``
# (``impl.paged_attention.set_matrix_partial``) turns it off or changes TT, for sweeps and tests.
USE_MATRIX_PARTIAL = True
MATRIX_TOKEN_TILES = 1  # TT: 8-token tiles per SIMD-group step (1 or 2; 2 lost: perf/RESULTS.md, "Tried and lost")
MATRIX_MAX_DIM = 128
# MATRIX_RING: steps of K / V a matrix partial's SIMD group keeps in its ring on CUDA (``ring_slots``: TT 1, K and V
# head dims equal and a multiple of 64, partitions of a multiple of 8 tokens), RING - 1 of them copied ahead by
# cp.async (ring_prologue.metal); 0: register loads there too. Metal always loads into registers (no cp.async, and
# its 32 KB of threadgroup memory would not hold the ring). Why: register loads leave a SIMD group nothing in flight
# while it computes, and the partial took ~7 us more than a kernel that only reads the same pool at 32/8/D128/N128k
# (records/h200-cuda/ncu-partial/). H200 kernel time, partial + merge, 3 slots against register loads
# (records/h200-cuda/matrix-partial-ring/): 32/8/D128/N128k 132.1-133.1 against 138.4-139.7 us (MLX SDPA 129.2),
# N32k 40.6-40.7 against 41.5-42.6, 8/1/N32k 15.2-15.5 against 16.5-16.6, 16/8/D64/N32k 25.5-25.6 against
# 26.7-27.2; on an H100 with the ring the default (records/h100-cuda/ring-default/: its gates, compute-sanitizer and
# mutants there) 32/8/D128/N128k 186.4-187.1 against 189.0-189.5 (MLX SDPA 183.0-183.6), N4k 13.5-13.8 against 14.2.
# What holds the ring partial at N128k (records/h100-cuda/ring-gap/): the memory-instruction pipe, not DRAM alone. Its
# 16-byte copies, the ring's reads and the scores' shuffles share it; the body's scale load shares a scoreboard with
# the loop's block-table read (nvcc 13, sm_90), so each step's scores wait for the entry the next copies need, and
# that wait paces the copies. Staging the scale so nothing waits there cost 7% (H100 N128k 196.4-197.7 against
# 183.5-184.6 us, partial): the copies then back up that pipe (32% of ncu's stall samples, against 2%) and DRAM
# throughput falls from 87% to 80%. Fewer instructions per byte did not help (a bulk copy per row: 6% slower,
# records/h100-cuda/ring-gap/bulk/); the step's reads ahead of its own copies in that pipe did (ring_issue.metal:
# 0.5-1.6 us less at N128k, bit-identical; records/h100-cuda/ring-reads-first/).
MATRIX_RING = 3
MATRIX_ROWS = 8  # query rows one matrix threadgroup serves: one 8-row tile
# A matrix partial's default partition holds at least MATRIX_MIN_PARTITION tokens: with one KV head the threadgroup
# target alone gives 64-token partitions (512 of them), whose merge then costs more than the partial. H200 kernel
# time (us, partial + merge, 32-slice merge) at floors 64 / 128 / 256 / 512: 8/1/D128/N32k 22.7 / 19.4 / 20.3 /
# 28.3; 32/8/D128/N4k 14.0 / 13.9 / 17.5 / 26.5 (the floor cuts its 64 partitions to 32, 16, 8); N32k and N128k
# within 1% (their partitions are longer anyway).
MATRIX_MIN_PARTITION = 128

# Each threadgroup is one KV head x one partition of the sequence and serves every query row that
# reads that head (GQA: K/V are read once per head, not once per query head). Only partial output
# vectors and normalizers materialize, never gathered KV.
HEADER = kernel_text(__file__, "paged_attention.h")
PARTIAL_SOURCE = kernel_text(__file__, "partial.metal")

# The partial body's LOAD_KEY / LOAD_VALUE blocks, templates whose $ fields name what they read: `lanes`
# dims of a K or V row, from element `at` of `plane`, into the float registers `dest`. Plain pools: one
# 16-byte load of 8 elements when lanes == 8 (16-bit dtypes, ``_lane_map``), one 4-vector load when
# lanes == 4, else element loads.
PLAIN_LOAD = Template(kernel_text(__file__, "load_plain.metal"))
# Affine KV4/KV8: a lane's `lanes` dims (a power of two dividing PACK) lie in one packed word and one
# scale group; each element is dequantized on load and rounded to the pool dtype:
# float(InT(scale * code + bias)).
AFFINE_LOAD = Template(kernel_text(__file__, "load_affine.metal"))
# kvq4's cache (STRIDED): plane[head, token, word] at the planes' own strides (a slice of a larger
# cache, a transpose: never copied), dequantized in float32 and not rounded (the seed's numerics).
STRIDED_AFFINE_LOAD = Template(kernel_text(__file__, "load_strided_affine.metal"))
LOAD_PLAIN = {"LOAD_KEY": PLAIN_LOAD.substitute(plane="keys", dest="kx", lanes="VK", width="DK"),
              "LOAD_VALUE": PLAIN_LOAD.substitute(plane="values", dest="vx", lanes="VV", width="DV")}
LOAD_AFFINE = {
    "LOAD_KEY": AFFINE_LOAD.substitute(plane="keys", scales="ks", biases="kb", dest="kx", lanes="VK", width="DK"),
    "LOAD_VALUE": AFFINE_LOAD.substitute(plane="values", scales="vs", biases="vb", dest="vx", lanes="VV",
                                         width="DV")}
LOAD_STRIDED_AFFINE = {
    "LOAD_KEY": STRIDED_AFFINE_LOAD.substitute(plane="keys", scales="ks", biases="kb", dest="kx", lanes="VK"),
    "LOAD_VALUE": STRIDED_AFFINE_LOAD.substitute(plane="values", scales="vs", biases="vb", dest="vx",
                                                 lanes="VV")}

MERGE_SOURCE = kernel_text(__file__, "merge.metal")
MATRIX_PARTIAL_SOURCE = kernel_text(__file__, "partial_matrix.metal")
# The ring fetch (``MATRIX_RING``): the matrix partial with four of its blocks replaced by the ring's pieces: the
# first step's block-table read (ring_prologue.metal), the step's register loads (ring_fetch.metal), a comment after
# the score product where the ring issues a later step's copies (ring_issue.metal: after the step's reads, which then
# do not queue behind the copies: 0.5-1.6 us less of 180-188 at 32/8/D128/N128k on two H100s, records/h100-cuda/
# ring-reads-first/) and the combine's buffer (ring_osh.metal, which takes the ring's memory).
_FETCH_START = "    for (uint h = 0; h < TT; ++h) {\n      const uint t = min(t0 + 8 * h + fr, stop - 1);\n"
REGISTER_BLOCKS = {
    "prologue": "  uint block[TT];\n"
                "  for (uint h = 0; h < TT; ++h) block[h] = table[min(first + sg * TB + 8 * h + fr, stop - 1) / BS];\n",
    "fetch": MATRIX_PARTIAL_SOURCE[MATRIX_PARTIAL_SOURCE.index(_FETCH_START):
                                   MATRIX_PARTIAL_SOURCE.index("    // S^T = K . Q^T, two dim tiles")],
    "issue": "    // (Register loads copy nothing ahead; the ring issues a later step's copies here: ring_issue.metal.)\n",
    "osh": "  threadgroup float osh[SG * R * DV];\n",
}


RING_PIECES = {"prologue": kernel_text(__file__, "ring_prologue.metal"), "fetch": kernel_text(__file__, "ring_fetch.metal"),
               "issue": kernel_text(__file__, "ring_issue.metal"), "osh": kernel_text(__file__, "ring_osh.metal")}
RING_HEADER = kernel_text(__file__, "ring.h")


def _ring_source(pieces: dict[str, str] = RING_PIECES) -> str:
    """The matrix partial with ``pieces`` (RING_PIECES, or a candidate fetch's) in place of REGISTER_BLOCKS (each in
    the body once)."""
    body = MATRIX_PARTIAL_SOURCE
    for name, block in REGISTER_BLOCKS.items():
        assert block and body.count(block) == 1, name
        body = body.replace(block, pieces[name])
    return body


def _with_loads(loads: dict[str, str]) -> str:
    """The partial body with its K and V load blocks filled in (plain or affine)."""
    body = PARTIAL_SOURCE
    for marker, code in loads.items():
        assert body.count(marker) == 1, marker
        body = body.replace(marker, code)
    return body


PARTIAL = KernelSpec("paged_attention_partial", ("q", "keys", "values", "table", "geometry"), ("parts",),
                     _with_loads(LOAD_PLAIN), header=HEADER)
QUANTIZED_PARTIAL = KernelSpec("paged_attention_affine_partial",
                               ("q", "keys", "values", "table", "geometry", "ks", "kb", "vs", "vb"), ("parts",),
                               _with_loads(LOAD_AFFINE), header=HEADER)
# The same body over kvq4's strided cache: the planes keep their layout (MLX passes their strides).
STRIDED_PARTIAL = KernelSpec("direct_attention_strided_affine_partial",
                             ("q", "keys", "values", "table", "geometry", "ks", "kb", "vs", "vb"), ("parts",),
                             _with_loads(LOAD_STRIDED_AFFINE), header=HEADER, ensure_row_contiguous=False)
# The matrix partial over plain 16-bit pools (USE_MATRIX_PARTIAL's comment): the same inputs and output.
MATRIX_PARTIAL = KernelSpec("paged_attention_matrix_partial", ("q", "keys", "values", "table", "geometry"), ("parts",),
                            MATRIX_PARTIAL_SOURCE, header=SIMDGROUP_HEADER + HEADER)
# The same body with the ring fetch (CUDA only: cp.async, dynamic shared memory; ``MATRIX_RING``'s comment).
MATRIX_PARTIAL_RING = KernelSpec("paged_attention_matrix_partial_ring", MATRIX_PARTIAL.input_names,
                                 MATRIX_PARTIAL.output_names, _ring_source(),
                                 header=SIMDGROUP_HEADER + HEADER + RING_HEADER, arms=("cuda",))
MERGE = KernelSpec("paged_attention_merge", ("parts", "geometry"), ("out",), MERGE_SOURCE)


# Device geometries of recent calls (tables: ``impl.block_table.freeze``). A fresh mx.array from host
# data costs the GPU a transfer at eval: measured on the H200, 0.1-0.2 ms per call at N = 32k-128k,
# as much as the kernels. One decode step calls the kernel once per layer with the same length, so a
# small cache turns that into one transfer per step. MLX arrays are immutable, so sharing is safe.
_CACHE_SIZE = 16


def _cached(cache: OrderedDict, key, make):
    value = cache.get(key)
    if value is None:
        value = cache[key] = make()
        if len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return value


_GEOMETRIES: OrderedDict = OrderedDict()


def _geometry(scale: float, length: int, span: int) -> mx.array:
    return _cached(_GEOMETRIES, (scale, length, span), lambda: mx.array([scale, length, span], dtype=mx.float32))


# --- the direct kernel -----------------------------------------------------


def rows_per_threadgroup(hq: int, hkv: int, n: int, v_head_dim: int) -> int:
    """Query rows R a partial threadgroup serves: all of its KV head's (G * n) up to ``MAX_ROWS``, fewer
    when the SIMD groups' combine buffers (SG * R * (Dv + 2) floats) would not fit threadgroup memory."""
    hq, hkv = check_int("hq", hq, minimum=1), check_int("hkv", hkv, minimum=1)
    n, v_head_dim = check_int("n", n, minimum=1), check_int("v_head_dim", v_head_dim, minimum=1)
    if hq % hkv:
        raise ValueError(f"hq must be a multiple of hkv, got hq={hq}, hkv={hkv}")
    rows = (hq // hkv) * n
    fit = THREADGROUP_MEMORY // (4 * SIMDGROUPS * (v_head_dim + 2))
    if fit < 1:
        raise ValueError(f"storage.v_head_dim={v_head_dim} is too large for the direct kernel's "
                         f"{THREADGROUP_MEMORY}-byte combine buffers")
    return max(1, min(rows, MAX_ROWS, fit))


def matrix_eligible(head_dim: int, v_head_dim: int, dtype: mx.Dtype, quant, layout: "Layout") -> bool:
    """Whether a launch takes the matrix partial (``USE_MATRIX_PARTIAL``'s comment): the policy is on, the pool is
    plain (``quant`` None, ``layout`` PAGED) bfloat16 or float16, and both head dims are multiples of 16 up to
    ``MATRIX_MAX_DIM``."""
    return (USE_MATRIX_PARTIAL and quant is None and layout == PAGED and dtype in (mx.bfloat16, mx.float16)
            and head_dim % 16 == 0 and v_head_dim % 16 == 0 and max(head_dim, v_head_dim) <= MATRIX_MAX_DIM)


def matrix_rows_per_threadgroup(hq: int, hkv: int, n: int, head_dim: int, v_head_dim: int) -> int:
    """Query rows R a matrix-partial threadgroup serves: all of its KV head's (G * n) up to ``MATRIX_ROWS``, fewer
    when its threadgroup memory (q's tile, the S transposes, the combine buffers) would pass ``THREADGROUP_MEMORY``."""
    hq, hkv = check_int("hq", hq, minimum=1), check_int("hkv", hkv, minimum=1)
    n = check_int("n", n, minimum=1)
    head_dim, v_head_dim = check_int("head_dim", head_dim, minimum=1), check_int("v_head_dim", v_head_dim, minimum=1)
    if hq % hkv:
        raise ValueError(f"hq must be a multiple of hkv, got hq={hq}, hkv={hkv}")
    fixed = 2 * MATRIX_ROWS * head_dim + 4 * SIMDGROUPS * 8 * (8 * MATRIX_TOKEN_TILES + 4)
    fit = (THREADGROUP_MEMORY - fixed) // (4 * SIMDGROUPS * (v_head_dim + 2))
    if fit < 1:
        raise ValueError(f"head_dim={head_dim}, v_head_dim={v_head_dim} are too large for the matrix partial's "
                         f"{THREADGROUP_MEMORY}-byte threadgroup memory")
    return max(1, min((hq // hkv) * n, MATRIX_ROWS, fit))


def choose_matrix_partial(enabled: bool = True, token_tiles: int = 1) -> None:
    """Set ``USE_MATRIX_PARTIAL`` and ``MATRIX_TOKEN_TILES`` (checked first: a refused choice changes nothing) and
    forget the launch shapes remembered under the previous choice (``impl.paged_attention.set_matrix_partial``
    forgets its plans too: call that one)."""
    global USE_MATRIX_PARTIAL, MATRIX_TOKEN_TILES
    enabled = check_choice("enabled", enabled, (True, False))
    token_tiles = check_choice("token_tiles", token_tiles, (1, 2))
    USE_MATRIX_PARTIAL, MATRIX_TOKEN_TILES = enabled, token_tiles
    _partial_shape.cache_clear()


MAX_RING_SLOTS = 4  # 4 x 4 KB per SIMD group at D128: 64 KB a threadgroup, 3 threadgroups per H200 SM


def choose_matrix_ring(slots: int = 0) -> None:
    """Set ``MATRIX_RING``: 0, or 2 to ``MAX_RING_SLOTS`` slots (checked first: a refused choice changes nothing).
    ``impl.paged_attention.set_matrix_ring`` forgets its plans too: call that one. The launch shapes are keyed on
    the slots themselves."""
    global MATRIX_RING
    slots = check_int("slots", slots, minimum=0)
    if slots == 1 or slots > MAX_RING_SLOTS:
        raise ValueError(f"slots must be 0 (register loads) or 2 to {MAX_RING_SLOTS}, got {slots}")
    MATRIX_RING = slots


def choose_threadgroup_target(threadgroups: int) -> None:
    """Set ``TARGET_THREADGROUPS``, the threadgroups a plain pool's default partition aims at (checked first: a
    refused choice changes nothing). ``impl.paged_attention.set_threadgroup_target`` forgets its plans too: call
    that one. The launch shapes need no forgetting: they are keyed on the partition itself."""
    global TARGET_THREADGROUPS
    TARGET_THREADGROUPS = check_int("threadgroups", threadgroups, minimum=1)


def _rows_of(hq: int, n: int, hk: int, dk: int, dv: int, dtype: mx.Dtype, quant, layout: "Layout") -> int:
    """The rows per threadgroup of the partial this launch takes."""
    if matrix_eligible(dk, dv, dtype, quant, layout):
        return matrix_rows_per_threadgroup(hq, hk, n, dk, dv)
    return rows_per_threadgroup(hq, hk, n, dv)


def partition_size(length: int, threadgroups_per_partition: int, quantized: bool = False,
                   matrix: bool = False) -> int:
    """Tokens per partition: enough partitions for ``TARGET_THREADGROUPS`` threadgroups in all
    (``QUANTIZED_TARGET_THREADGROUPS`` for affine pools), each a whole number of ``PARTITION_QUANTUM``
    tokens (short sequences: one quantum, as the seed's 64); an affine pool's partition is at least
    ``QUANTIZED_MIN_PARTITION`` tokens, a matrix partial's (``matrix``) at least ``MATRIX_MIN_PARTITION``, or the
    whole sequence (rounded up to the quantum) when shorter."""
    length = check_int("length", length, minimum=0)
    threadgroups_per_partition = check_int("threadgroups_per_partition", threadgroups_per_partition, minimum=1)
    for name, flag in (("quantized", quantized), ("matrix", matrix)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
    if quantized and matrix:
        raise ValueError("quantized and matrix exclude each other: the matrix partial reads plain pools only")
    target = QUANTIZED_TARGET_THREADGROUPS if quantized else TARGET_THREADGROUPS
    wanted = max(1, target // threadgroups_per_partition)
    quanta = max(1, -(-length // (wanted * PARTITION_QUANTUM)))
    whole = max(1, -(-length // PARTITION_QUANTUM))
    if quantized:
        quanta = max(quanta, min(QUANTIZED_MIN_PARTITION // PARTITION_QUANTUM, whole))
    if matrix:
        quanta = max(quanta, min(MATRIX_MIN_PARTITION // PARTITION_QUANTUM, whole))
    return quanta * PARTITION_QUANTUM


def partition_span(q: mx.array, storage: PagedStorage, length: int, partition: int | None) -> int:
    """The partition every arm uses: the caller's, or ``partition_size`` for this launch's threadgroups."""
    _, hq, n, _ = q.shape
    return _span_of(hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim, storage.dtype,
                    _quant_key(storage.quantization), length, partition)


def _span_of(hq: int, n: int, hk: int, dk: int, dv: int, dtype: mx.Dtype, quant, length: int,
             partition: int | None) -> int:
    # A partition of ``length`` tokens or more is the one partition holding every token: every arm computes
    # the same numbers with it as with ``length``, so it is clamped there (the graph arm's arrays and the
    # kernels' geometry then never grow with a huge ``partition``).
    if partition is not None:
        return min(partition, max(length, 1))
    # (A strided layout is quantized: never the matrix partial.)
    rows = _rows_of(hq, n, hk, dk, dv, dtype, quant, PAGED)
    return partition_size(length, hk * -(-(hq // hk) * n // rows), quant is not None,
                          matrix_eligible(dk, dv, dtype, quant, PAGED))


class _LaneMap(NamedTuple):
    lanes: int  # LPR: lanes per K/V row
    vk: int  # dims per lane per load of a K row
    vv: int  # ... of a V row


def _lane_map(dk: int, dv: int, dtype: mx.Dtype, bits: int | None) -> _LaneMap:
    """How the partial's lanes read rows (``LANES_PER_ROW``, ``WIDE_LOADS``): lanes per row, and the
    dims a lane takes per load of a K and a V row."""
    if bits is not None:
        return _LaneMap(SIMD, _lanes(dk, bits), _lanes(dv, bits))
    lanes = LANES_PER_ROW
    if lanes is None:
        lanes = SIMD // 2 if max(dk, dv) * dtype.size <= HALF_ROW_BYTES else SIMD
    if lanes not in (SIMD, SIMD // 2):
        raise ValueError(f"LANES_PER_ROW must be None, {SIMD} or {SIMD // 2}, got {lanes}")

    def per_lane(dim):
        if WIDE_LOADS and dtype.size == 2 and dim % (8 * lanes) == 0:
            return 8  # one 16-byte load (load8 in HEADER)
        return _lanes(dim, None)

    return _LaneMap(lanes, per_lane(dk), per_lane(dv))


def choose_lane_map(lanes_per_row: int | None = SIMD, wide_loads: bool = True) -> None:
    """Set ``LANES_PER_ROW`` and ``WIDE_LOADS`` (checked first: a refused choice changes nothing) and forget the
    launch shapes remembered under the previous choice (``impl.paged_attention.set_lane_map`` forgets its plans
    too: call that one)."""
    global LANES_PER_ROW, WIDE_LOADS
    lanes_per_row = check_choice("lanes_per_row", lanes_per_row, (None, SIMD, SIMD // 2))
    wide_loads = check_choice("wide_loads", wide_loads, (True, False))
    LANES_PER_ROW, WIDE_LOADS = lanes_per_row, wide_loads
    _partial_shape.cache_clear()


def _lanes(dim: int, bits: int | None) -> int:
    """Dims per lane per step: a 4-vector when dim allows it (plain), else one element; quantized
    (``bits``), one packed word, or a power-of-two part of one when a row has fewer words than a
    SIMD group has lanes (a D128 KV4 row is 16 words: whole words would leave half the lanes idle,
    and dequantizing on load is the arithmetic that bounds those pools)."""
    if bits is not None:
        share = max(1, min(32 // bits, dim // SIMD))
        return 1 << (share.bit_length() - 1)
    return 4 if dim % 4 == 0 else 1


def partial_launch(q: mx.array, storage: PagedStorage, table, length: int, scale: float,
                   planes: Sequence[mx.array] = (), partition: int | None = None, arm: str | None = None) -> Launch:
    """The partial pass's call (inputs, template, grid): one threadgroup per (partition, KV head, row chunk).
    ``table``: a ``BlockTable`` (its padded device copy is read) or an int32 mx.array. ``arm``: the arm the launch
    is for, which picks the matrix partial's fetch (``ring_slots``: the ring on CUDA where ``MATRIX_RING`` asks for
    it); None: register loads, which every compiled arm runs."""
    _, hq, n, _ = q.shape
    span = partition_span(q, storage, length, partition)
    quant = _quant_key(storage.quantization)
    ring = 0 if arm is None else ring_slots(arm, storage.head_dim, storage.v_head_dim, storage.dtype, quant, PAGED,
                                              span)
    shape = _partial_shape(hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim, storage.block_size,
                           storage.dtype, quant, length, span, PAGED, ring)
    table = table.padded if isinstance(table, BlockTable) else table
    return Launch(shape.spec, (q, storage.keys, storage.values, table, _geometry(scale, length, span), *planes),
                  shape.template, shape.grid, shape.threadgroup, shape.output_shapes, (mx.float32,),
                  shape.shared_memory)


def strided_partial_launch(q: mx.array, storage: PagedStorage, length: int, scale: float,
                           partition: int | None = None) -> Launch:
    """The partial pass over a strided affine cache (``KVQ4`` layout: kvq4's numerics).

    ``storage.keys`` / ``values`` are uint32 [1, Hkv, N, D*bits/32] views (any strides: MLX hands the
    kernel their strides), the scale and bias planes [1, Hkv, N, D/group]; ``q`` must be row-contiguous
    (this spec does not ask MLX to copy its inputs); ``scale`` is applied in float32 and the product
    rounded to q's dtype, so pass the scale as the dtype holds it to reproduce ``q * scale`` in T.
    """
    _, hq, n, _ = q.shape
    span = partition_span(q, storage, length, partition)
    shape = _partial_shape(hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim, 1,
                           storage.dtype, _quant_key(storage.quantization), length, span, KVQ4)
    planes = (storage.key_scales, storage.key_biases, storage.value_scales, storage.value_biases)
    return Launch(shape.spec, (q, storage.keys, storage.values, single_block_table(), _geometry(scale, length, span),
                               *planes),
                  shape.template, shape.grid, shape.threadgroup, shape.output_shapes, (mx.float32,))


@lru_cache(maxsize=1)
def single_block_table() -> mx.array:
    """[0]: the table of a cache that is one block per KV head (the strided layout's kernel reads none,
    but the input must exist; the graph arm gathers token t from "block" 0, slot t)."""
    return mx.zeros((1,), dtype=mx.int32)


def _quant_key(quantization) -> tuple[int, int] | None:
    """(bits, group size) as Python ints: the checks accept NumPy integers there, and MLX's ops take only ints."""
    return None if quantization is None else (int(quantization.bits), int(quantization.group_size))


class Layout(NamedTuple):
    """How the partial finds and rounds its operands.

    ``strided``: K/V are one contiguous-per-head cache read through the planes' strides (kvq4's
    layout; no block table) instead of a paged pool. ``round_q``: q * scale is rounded to the
    dtype (kvq4's seed forms it in T before its kernel) instead of kept in float32.
    ``round_kv``: dequantized K/V are rounded to the dtype (paged pools: ``float(InT(s*c + b))``)
    instead of kept in float32 (kvq4's seed). Only affine pools dequantize.
    """

    strided: bool = False
    round_q: bool = False
    round_kv: bool = True


PAGED = Layout()
KVQ4 = Layout(strided=True, round_q=True, round_kv=False)


def ring_eligible(head_dim: int, v_head_dim: int, dtype: mx.Dtype, quant, layout: "Layout") -> bool:
    """Whether a matrix partial can take the ring fetch (``MATRIX_RING``): it is the matrix partial, with TT 1, and
    K and V rows of the same head dim, a multiple of 64 (whole 8-chunk bank rows: ``ring_prologue.metal``)."""
    return (matrix_eligible(head_dim, v_head_dim, dtype, quant, layout) and MATRIX_TOKEN_TILES == 1
            and head_dim == v_head_dim and head_dim % 64 == 0)


def ring_slots(arm: str, head_dim: int, v_head_dim: int, dtype: mx.Dtype, quant, layout: "Layout", span: int) -> int:
    """The ring's slots for a launch on ``arm`` with partitions of ``span`` tokens: ``MATRIX_RING`` on CUDA where
    ``ring_eligible`` and the span is a multiple of 8 (every step then starts on a multiple of 8 tokens: with blocks
    of a multiple of 8 its rows lie in one block, which the ring's copies take as one run), else 0."""
    arm = check_choice("arm", arm, ("metal", "cuda", "graph"))
    span = check_int("span", span, minimum=1)
    if (arm != "cuda" or not MATRIX_RING or span % 8
            or not ring_eligible(head_dim, v_head_dim, dtype, quant, layout)):
        return 0
    return MATRIX_RING


def ring_shared_bytes(head_dim: int, ring: int) -> int:
    """Dynamic shared memory of the ring fetch: per SIMD group ``ring`` slots of one step's 8 K and 8 V rows
    (16-bit). The combine's buffer (R x Dv floats per SIMD group) takes the same memory after the last step."""
    head_dim, ring = check_int("head_dim", head_dim, minimum=1), check_int("ring", ring, minimum=2)
    return SIMDGROUPS * ring * 2 * 8 * head_dim * 2


@lru_cache(maxsize=256)
def _partial_shape(hq: int, n: int, hk: int, dk: int, dv: int, block_size: int, dtype: mx.Dtype,
                   quant: tuple[int, int] | None, length: int, span: int, layout: Layout,
                   ring: int = 0) -> "_LaunchShape":
    """The partial's launch without inputs (spec, template, grid, outputs): a pure function of the
    shapes, remembered because every layer of a decode step asks for the same one. ``ring``: the matrix partial's
    ring slots (``ring_slots``), 0 for register loads."""
    if layout not in (PAGED, KVQ4) or (layout.strided and quant is None):
        raise ValueError(f"layout must be PAGED or, for an affine cache, KVQ4; got {layout}")
    rows = _rows_of(hq, n, hk, dk, dv, dtype, quant, layout)
    chunks = -(-(hq // hk) * n // rows)
    # Partition buffers and the grid are rounded up to a power of two: a growing sequence then gets a
    # new launch shape (a retrace of the compiled pair) only when its partition count doubles.
    parts = padded_length(-(-length // span))
    threads = SIMD * SIMDGROUPS
    grid, outputs = (threads * parts, hk * chunks, 1), (partial_shape(hq, n, parts, dv),)
    if matrix_eligible(dk, dv, dtype, quant, layout):
        template = (("HQ", hq), ("HK", hk), ("N", n), ("DK", dk), ("DV", dv), ("BS", block_size), ("R", rows),
                    ("SG", SIMDGROUPS), ("TT", MATRIX_TOKEN_TILES), ("InT", dtype))
        if ring:
            return _LaunchShape(MATRIX_PARTIAL_RING, template + (("RING", ring),), grid, (threads, 1, 1), outputs,
                                ring_shared_bytes(dk, ring))
        return _LaunchShape(MATRIX_PARTIAL, template, grid, (threads, 1, 1), outputs)
    lanes = _lane_map(dk, dv, dtype, None if quant is None else quant[0])
    template = [("HQ", hq), ("HK", hk), ("N", n), ("DK", dk), ("DV", dv), ("BS", block_size),
                ("R", rows), ("SG", SIMDGROUPS), ("TB", BATCH_TOKENS), ("LPR", lanes.lanes),
                ("VK", lanes.vk), ("VV", lanes.vv),
                ("STRIDED", layout.strided), ("ROUND_Q", layout.round_q), ("InT", dtype)]
    spec = PARTIAL
    if quant is not None:
        template += [("BITS", quant[0]), ("GROUP", quant[1]), ("PACK", 32 // quant[0])]
        spec = STRIDED_PARTIAL if layout.strided else QUANTIZED_PARTIAL
    return _LaunchShape(spec, tuple(template), grid, (threads, 1, 1), outputs)


class _LaunchShape(NamedTuple):
    spec: KernelSpec
    template: tuple
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    output_shapes: tuple
    shared_memory: int = 0


# Threads per output element in the merge (template SL), each over every SL-th partition: a 32 x SL threadgroup
# per output row and 32 dims. H200 merge kernel time (us), 8 against 32 slices: 8/1/D128/N32k with 256 partitions
# 14.8 / 6.3 (512: 27.6 / 9.7), 32/8/D128/N32k (64) 6.0 / 4.2, 16/8/D256/N128k (64) 7.2 / 4.8. 1024 threads is
# Metal's threadgroup limit, as normalized argmax's row kernel uses (its macos-metal probe checks the pipeline).
MERGE_SLICES = 32
# The most partitions a merge slice reads together (merge.metal's template B, ``merge_batch``): one batch of loads,
# then one rescale to the batch's max. H200 merge kernel time (us, the same process, records/h200-cuda/merge/): 256
# partitions (8/1/D128/N32k) 5.9 for two passes of guarded loads, 3.6 in one pass of batches of 8; 32 partitions
# (32/8/N4k) 3.2 and 3.2; 64 (32/8/N32k) 4.2 and 3.6; 512 (8/1/N128k) 10.3 against 6.5 (batches of 8 then, before
# the slices' rescale moved out of the last loop). A batch larger than a slice's share of the partitions only
# repeats loads (a batch of 8 at 64 partitions: 4.9-5.3 us), so the batch follows the partition count.
MERGE_BATCH = 8


MAX_MERGE_THREADS = 1024  # Metal's threadgroup limit: a merge threadgroup is SIMD x MERGE_SLICES threads


def choose_merge(slices: int = 32, batch: int = 8) -> None:
    """Set ``MERGE_SLICES`` and ``MERGE_BATCH`` (checked first: a refused choice changes nothing).
    ``impl.paged_attention.set_merge`` forgets its plans too: call that one."""
    global MERGE_SLICES, MERGE_BATCH
    slices = check_int("slices", slices, minimum=1)
    if SIMD * slices > MAX_MERGE_THREADS:
        raise ValueError(f"slices must be at most {MAX_MERGE_THREADS // SIMD} (a merge threadgroup is {SIMD} x slices "
                         f"threads, at most {MAX_MERGE_THREADS}), got {slices}")
    MERGE_SLICES, MERGE_BATCH = slices, check_int("batch", batch, minimum=1)


def merge_batch(partitions: int) -> int:
    """Partitions a merge slice reads at once for a buffer of ``partitions``: its share, ceil(partitions /
    MERGE_SLICES), at most ``MERGE_BATCH``."""
    partitions = check_int("partitions", partitions, minimum=1)
    return min(MERGE_BATCH, -(-partitions // MERGE_SLICES))


def partial_shape(hq: int, n: int, partitions: int, dv: int) -> tuple[int, int, int, int]:
    """The shape of ``parts``, the partial pass's one output, for ``partitions`` partitions of Dv ``dv``.

    PARTS layout: float32 rows of ``dv + 2``, one per (query head, query row, partition): the partition's
    unnormalized values (``dv``), then its max, then its sum of ``exp(score - max)``. Row (h, i, p) is at
    ``((h * n + i) * count + p) * (dv + 2)``, ``count`` the partitions the call has (the buffer holds
    ``partitions`` >= count, a power of two: ``_partial_shape``). One output instead of two (values, then
    [max, sum]) saves MLX's host ~3 us per call on the H200 (an output costs ~1.5-3 us)."""
    return (check_int("hq", hq, minimum=1), check_int("n", n, minimum=1),
            check_int("partitions", partitions, minimum=1), check_int("dv", dv, minimum=1) + 2)


def pack_partials(values: mx.array, maxima: mx.array, sums: mx.array, partitions: int | None = None) -> mx.array:
    """``parts`` from partials made elsewhere (the merge's gate builds them): ``values`` [Hq, n, count, Dv], ``maxima``
    and ``sums`` [Hq, n, count], float32, in the PARTS layout (``partial_shape``) of a buffer of ``partitions`` >=
    count partitions (None: count). The rows are packed by ``count``, as the partial writes them; the buffer's
    remaining floats hold NaN, so a merge that reads past the call's partitions shows it."""
    check_partials(("values", values), ("maxima", maxima), ("sums", sums),
                   layout="[Hq, n, count, Dv] and maxima, sums [Hq, n, count]")
    hq, n, count, dv = values.shape
    partitions = count if partitions is None else check_int("partitions", partitions, minimum=count)
    rows = mx.concatenate([values, maxima[..., None], sums[..., None]], axis=-1).reshape(-1)
    tail = mx.full((hq * n * (partitions - count) * (dv + 2),), mx.nan, dtype=mx.float32)
    return mx.concatenate([rows, tail]).reshape(partial_shape(hq, n, partitions, dv))


def merge_launch(parts: mx.array, geometry: mx.array, out_dtype: mx.Dtype) -> Launch:
    """The merge's call: ``parts`` in the PARTS layout (``partial_shape``), ``geometry`` the partial's [scale, length,
    partition] (it counts the partitions)."""
    if not isinstance(parts, mx.array) or parts.ndim != 4 or parts.shape[3] < 3 or parts.dtype != mx.float32:
        raise ValueError("parts must be a float32 mx.array [Hq, n, partitions, Dv + 2] (partial_shape), got "
                         f"{getattr(parts, 'dtype', type(parts).__name__)} {list(getattr(parts, 'shape', ()))}")
    if not isinstance(geometry, mx.array) or tuple(geometry.shape) != (3,) or geometry.dtype != mx.float32:
        raise ValueError("geometry must be the partial's float32 [scale, length, partition], got "
                         f"{getattr(geometry, 'dtype', type(geometry).__name__)} {list(getattr(geometry, 'shape', ()))}")
    hq, n, partitions, width = parts.shape
    dv = width - 2
    return Launch(MERGE, (parts, geometry),
                  (("OutT", out_dtype), ("DV", dv), ("SL", MERGE_SLICES), ("B", merge_batch(partitions))),
                  grid=(-(-dv // SIMD) * SIMD, hq * n * MERGE_SLICES, 1), threadgroup=(SIMD, MERGE_SLICES, 1),
                  output_shapes=((1, hq, n, dv),), output_dtypes=(out_dtype,))

