"""Multi-query causal decode's kernels: the partial and merge specs, their launch geometry, the launches.

The bodies are the files beside this module: ``partial.metal``, whose markers ``_assembled`` fills
(``KV_BUFFERS``: ``buffers.metal``, or ``ring_buffers.metal`` for the ring; ``STAGER_LOOP``:
``stager_loop.metal``, or ``ring_stager_loop.metal`` around it; ``STAGE_BLOCK``: ``stage_block.metal``;
``COMPUTE_BLOCK``: ``compute_block.metal``), ``merge.metal``, and the helpers of ``multi_query.h`` and
``merge.h``.

Algorithm (every arm): a threadgroup = one KV head x one key split. Its
query tile rows are loaded once as half fragments (a SIMD group holds
``TILES`` tiles: 2 at D <= ``PAIR_MAX_HEAD_DIM`` when NQ > 8, so every K / V
fragment it loads serves 16 rows; the rows' arithmetic is the same;
``tiles_per_simdgroup``); for each block of BK keys
of the split (``block_keys``: 32, or 16 at D = 256, where two padded 32-key
blocks would pass Metal's 32 KiB of threadgroup memory), K and V are staged
in threadgroup memory as half (rows D + 8 apart), S = Q . K^T on 8x8
fragments, masked (past the split, past the row's causal limit), an online
softmax per row (running max m, float32 sum l; P = half(exp(s - m))), the
accumulator O rescaled (skipped when no row of a tile moved its max: x * 1 == x)
and O += P . V. The staging schedule (``pipeline_stages``) does not change a
number: with one stage (Metal, and CUDA where two do not fit) every SIMD group
stages a block, a barrier, the tiles compute, a barrier; with two (CUDA) the
SIMD groups past the tiles ("stagers", at least ``STAGER_SIMDGROUPS``) fill
block i + 1's buffer while the tiles compute block i, the two roles running
their own loops and meeting at a named barrier (``ROLE_BARRIER``) once per
block. A stager owns one 4-dim quad of a row and every PASS-th row of a block.
On CUDA the default is the **ring partial** (``PARTIAL_RING``, a CUDA-only
variant, ``ring_slots``): the same two-stage kernel whose stagers copy K and V
with ``cp.async`` into ``RING`` raw slots in dynamic shared memory, RING - 1
blocks ahead of the one they convert to half, so a threadgroup keeps several
blocks in flight without holding registers (views the copies cannot take run
the register staging). Its half buffers hold the same values, so it is
bit-identical to two stages, and to one (``test_pipelined_partials_match_one_stage``).
Fragments are loaded four at a time (``simdgroup_load_x4``: ldmatrix.x4 on
CUDA), and two tiles multiply 16-deep (``simdgroup_multiply_accumulate_rows16_k16``:
one m16n8k16 on CUDA; four 8x8 products elsewhere, in the same order as before).
The partials (O, m, l) of the splits
are merged in one pass (a threadgroup per query vector and 128 dims, a lane per 4 dims;
``MERGE_SLICES`` SIMD groups each take every 8th split with a running max, rescaling their sums
when it grows, then combine in threadgroup memory rescaled to their common max; a -inf partial
weighs 0) and cast to T. kvq4's seed body merges its blocks with this merge (one query row).

Arms: ``metal`` / ``cuda`` compile the seed's bodies (the files above), with port edits
that keep the Metal semantics, so that one source serves CUDA (where
``threadgroup`` means ``__shared__`` and ``device`` cannot be a macro):

* pointer types that must be spelled say ``DEVICE_MEM`` / ``THREADGROUP_MEM``
  (the header defines them as ``device`` / ``threadgroup``, the CUDA prelude
  as nothing); others are deduced (``const auto qp``, templates);
* staging reads the last-axis stride (the seed assumed 1) and takes the vector
  loads only when the strides allow them; a thread issues all its K and V
  loads of a block (``load4_vector`` / ``load4_strided``, into half4
  registers) before its stores, so they are in flight together, and a key
  past the split loads row k1 - 1 (valid) and stages zeros;
* ``0.0h`` is ``half(0.0f)`` (no half literal in CUDA); ``#pragma clang loop
  unroll(full)`` is ``UNROLL_FULL`` (the CUDA spelling is ``_Pragma("unroll")``:
  nvcc ignored the clang one and left ``qf`` / ``o`` in local memory);
* the fragment layout is asked for, not assumed: ``sg_fragment_row`` /
  ``sg_fragment_col`` and the row-lane masks ``SG_ROW_LANES_XOR1/2`` (Metal's
  layout from the header, the tensor cores' from the CUDA prelude);
* N is ``k_shape[2]`` and the split count ``threadgroups_per_grid.x`` (the
  merge: ``part_shape[0]``), not template constants: one compilation per
  (T, L, D, KVH, REP) serves a cache that grows every decode step (the seed
  compiled once per N).

The CUDA prelude (``impl/kernels/metal_simdgroup.cuh``, its comment has the
details) runs ``simdgroup_multiply_accumulate`` of half operands as one
tensor-core ``mma.sync.m16n8k8`` (rows 8..15 zero) in the mma fragment
layout, and ``simdgroup_multiply_accumulate_rows16`` (two tiles times one
fragment; ``HEADER`` defines it as two Metal products) as one m16n8k8 whose
16 rows are the two tiles; a K fragment loaded transposed is already the B operand, a V fragment
takes one ``movmatrix`` transpose. ``simdgroup_multiply_accumulate_rows16_k16`` (two tiles times a
16-deep product) is one m16n8k16, and ``simdgroup_load_x4`` one ``ldmatrix.x4`` (``.trans`` for V,
which then needs no movmatrix); ``HEADER`` spells them for Metal as four products / four loads. ``MLXGATE_SIMDGROUP_EMULATE`` (defined
before the prelude) brings back the shuffle emulation in Metal's layout; the
nvcc test compiles both. A prelude edit renames the kernel (the preludes
are part of every kernel's name: ``impl.kernels.compile.kernel_name``).

Registers (nvcc 13, sm_90, ``-Xptxas -v``, bf16, partial pass; no stack frame anywhere): 32/8/L8/D128 168 with
one stage, 162 with two (3 threadgroups of 128 threads per SM); 16/8/L8/D256 219 / 232 (one tile, 2 per SM);
64/8/L8/D128 168 at 192 threads (2 per SM). The clang unroll pragma that nvcc ignored had left ``qf`` / ``o`` in
local memory (160-384 B of stack); the shuffle fallback (``MLXGATE_SIMDGROUP_EMULATE``) takes ~2 s of nvcc per
instance, the tensor-core build ~0.25 s.

Why the design is what it is (NVIDIA H200, MLX 0.32.4 CUDA; figures and what lost: ``perf/RESULTS.md``):

* Latency-bound, not bandwidth-bound: ncu had the one-stage partial at 17-18% of DRAM peak and 0.36-0.49
  instructions issued per scheduler and cycle, the staging 55% of its instructions (64-bit address arithmetic,
  per-element conversions) and the SIMD groups past the tiles idle at the barrier half the time. So on CUDA they
  stage the next block while the tiles compute (``pipeline_stages``: ncu 164 -> 125 us at 32/8/L8/D128), fragments
  load four at a time and the rescale is skipped when no row moved its max (125 -> 110 us), two tiles multiply
  16-deep (109 us; outputs within 2e-3 of max |out| of 8-deep products, one-tile shapes bit-identical).
* Two tiles per SIMD group at NQ > 8 (``TILES_PER_SIMDGROUP``): half the mma and fragment instructions of one tile
  each; one tile per SIMD group (four computing SIMD groups) ran the partial 6% slower under ncu (171 against 161
  us), 17% slower in eval8 with the ring (131.7 against 112.1 us), and lost plainly at NQ = 64 (0.233 against 0.191
  ms).
* The ring partial (``PARTIAL_RING``, ``RING_SLOTS``): 8-12% faster than two stages at 16/8/L8/D256 in every
  protocol, equal at 32/8/L8/D128, where the tiles set the pace (the stagers wait at the role barrier 4.6x as often
  as the tiles; ncu 96.1 against 104.6 us). Only the tiles read q and the scale, so the stagers start copying at once
  (ncu 94.3 us). The stagers convert a 16-byte chunk in 32-bit words (``chunk_to_half``): a conversion through
  ``half4`` was 39% of the partial's instructions (22.2 -> 19.3 M instructions; 16/8/L8/D256 pipelined8 103.6 ->
  97.0 us).
* The merge in one pass (a running max per slice, 4 dims per lane): the merge alone 30.3 -> 23.9 us eval8, the call
  at 32/8/L8/D128/N32k 63.6 -> 59.3 us pipelined8; outputs within 1.6e-3 of max |out| of a two-pass merge (float32
  rounding of the extra rescales; one query row bit-identical).
* The host's share: each output of a custom kernel costs the H200's host ~1.5-3 us per call, so the partial writes
  one (``part``: ``pack_parts``; 112.5 -> 106.5 us eval8 at 32/8/L8/D128/N32k, 150.9 -> 137.9 at D256), and q is
  read through its strides (a decode step's transposed q: 113.2 -> 105.3 us, no copy kernel). A one-kernel call (the
  merge in each KV head's last threadgroup) needs a counter at zero, which MLX gives only through ``init_value``,
  filling the 4.2 MB partial scratch too: 79.2 against 63.2 us eval8 for stand-ins that stream K/V.
* The L8 D128 target (4x eight single-row calls in eval8) is met in the pool, not in every process: 4.12x (3.78-4.95
  per process); pipelined8 4.8-6.8x. Nothing tried moved the partial from ~51 us per call pipelined8 (splits,
  accumulator chains, software-pipelined tiles, more slots: ``perf/RESULTS.md``).
"""

from __future__ import annotations

import mlx.core as mx

from impl.arms import ARMS
from impl.checks import check_choice, check_int, check_partials
from impl.kernels import MAX_DYNAMIC_SHARED_BYTES, SIMDGROUP_HEADER, KernelSpec, Launch, kernel_text

__all__ = [
    "BK",
    "DTYPES",
    "HEADER",
    "MAX_PIPELINED_SIMDGROUPS",
    "MAX_RING_SLOTS",
    "MAX_SPLITS",
    "MERGE",
    "PARTIAL",
    "PARTIAL_RING",
    "RING_SLOTS",
    "SPLIT_KEYS",
    "STATIC_SHARED_BYTES",
    "TARGET_THREADGROUPS",
    "THREADGROUP_BYTES",
    "block_keys",
    "computing_simdgroups",
    "default_splits",
    "merge_launch",
    "pack_parts",
    "partial_launch",
    "parts_shape",
    "pipeline_stages",
    "ring_shared_bytes",
    "ring_slots",
    "simdgroups",
    "tiles_per_simdgroup",
]

BK = 32  # keys per staged block (16 at D > 248: see block_keys)
SPLIT_KEYS = 256  # the fewest keys a default split gets (the seed's keys per split)
MAX_SPLITS = 128
MERGE_SLICES = 8  # SIMD groups of a merge threadgroup, each merging every 8th split (template MERGE_SLICES)
MERGE_DIMS = 128  # output dims per merge threadgroup: 32 lanes x 4
# Default splits aim at this many threadgroups (splits x KV heads). Measured on the H200 (every count interleaved in
# one process, with 8 calls per round and with one): at 8 KV heads, 32 splits (256 threadgroups, about two thirds of one
# wave at 3 resident per SM) beat the 64 that 512 gave by 7-10% when each call must fill the GPU alone (one call per
# round: 90 against 99 us at 32/8/L8/D128/N32k, 140 against 149 at D256, 104 against 115 at 64/8), and were never
# slower with 8 calls per round; 8-16 splits lost 1.3-2.5x alone. A split of more keys pays its q load and its
# partial (NQ * D float32, merged) over twice the keys.
TARGET_THREADGROUPS = 256
MIN_SIMDGROUPS = 4  # a threadgroup stages K/V with at least 4 SIMD groups (tiles below 4 leave some only staging)
# 8-row query tiles per SIMD group: 2 where a SIMD group holds more than one tile's rows and D <= PAIR_MAX_HEAD_DIM.
# A K or V fragment loaded from threadgroup memory then serves 16 rows, and on CUDA the two tiles' products are
# one 16-row tensor-core mma (the prelude's simdgroup_multiply_accumulate_rows16; a tile alone fills half of it).
# 1 is the one-tile-per-SIMD-group kernel (slower on the H200: tiles_per_simdgroup says by how much).
TILES_PER_SIMDGROUP = 2
# Two tiles hold two accumulators of D/4 floats per lane: at D = 256 that passes 255 registers (nvcc -Xptxas -v).
PAIR_MAX_HEAD_DIM = 128
ROW_PAD = 8  # halves of padding per staged row (16 bytes): a fragment's 8 rows then start in 8 different banks
THREADGROUP_BYTES = 32768  # Metal's threadgroup memory per threadgroup: block_keys keeps every arm within it
STATIC_SHARED_BYTES = 49152  # CUDA's static shared memory per block (what a cuda_kernel body declares)
# Two-stage threadgroups (pipeline_stages): SIMD groups that only stage K/V while the tiles compute, and the most SIMD
# groups such a threadgroup may have (192 threads: launchable even at 255 registers per thread, 64K per SM).
STAGER_SIMDGROUPS = 2
MAX_PIPELINED_SIMDGROUPS = 6
# The ring partial (CUDA only, ring_slots): raw K / V slots per threadgroup, RING - 1 blocks copied ahead of the one
# the stagers convert. Measured on the H200 (interleaved in one process, in two processes at 32/8/L8/D128; every ring
# bit-identical to two stages): at 16/8/L8/D256/N32k 2 slots ran the call 8-12% faster than two stages in each of
# eval8 / pipelined8 / eval1 / pipelined1 (154.9 / 106.3 / 249.4 / 137.6 against 168.1 / 120.9 / 261.7 / 149.9
# us), 4 slots within 5% of 2; at 64/8/L8/D128 2 slots within 1-3% (faster in three protocols); at 32/8/L8/D128 2
# slots equal within the processes' noise (eval8 112.1 against 112.3 us and 111.3 against 106.9; pipelined1 78.7
# against 85.1 and 90.5 against 96.2), where the two computing SIMD groups, not the loads, set the
# pace; 3 or 4 slots lost 8-18% there: 83 KiB or more of shared memory per threadgroup leaves 2 resident per SM
# instead of 3 (67.5 KiB each at 2 slots; 168 registers x 128 threads, ncu's figure for MLX's build, fit 3).
RING_SLOTS = 2
MAX_RING_SLOTS = 8
DTYPES = (mx.bfloat16, mx.float16, mx.float32)

HEADER = SIMDGROUP_HEADER + kernel_text(__file__, "multi_query.h")

PARTIAL_SOURCE = kernel_text(__file__, "partial.metal")

# The partial's two blocks, each placed in PARTIAL_SOURCE twice (the one-stage loop and its role in the two-stage
# one): staging one block of K and V (block `it`), and the products of one block (block `step`).
STAGE_SOURCE = kernel_text(__file__, "stage_block.metal")

COMPUTE_SOURCE = kernel_text(__file__, "compute_block.metal")


# The partial's K / V buffers: STAGES half buffers, declared in the body (static threadgroup memory, every arm).
BUFFERS_SOURCE = kernel_text(__file__, "buffers.metal")

# The two-stage partial's stagers: each step stages block `it` from device memory through registers.
STAGER_SOURCE = kernel_text(__file__, "stager_loop.metal")

# The ring partial (CUDA only: ring_slots): the same half buffers, then RING raw slots, each one block of K and one of
# V as T (rows D apart), all in dynamic shared memory (partial_launch's shared_memory: past the 48 KiB a body may
# declare).
RING_BUFFERS_SOURCE = kernel_text(__file__, "ring_buffers.metal")

# The ring partial's stagers. With registers, a stager's block is in flight only between its loads and its stores,
# one block per threadgroup: on the H200, 3 threadgroups x 16 KiB per SM over a ~2.6 us step is ~2.4 TB/s (against
# 3.9-4.2 TB/s for a kernel that only streams K/V). cp.async copies hold no register, so each stager keeps RING - 1 blocks ahead of the one it converts: step `it`
# issues block it + RING - 1 into slot (it + RING - 1) % RING (the slot of block it - 1, which this same thread
# converted at the previous step: a stager reads back only its own copies, so no barrier guards the ring), waits for
# block it (async_copy_wait: all but the RING - 1 newest groups), converts its chunks to half in buffer it % STAGES
# (chunk_to_half: the register path's roundings, a whole 16-byte chunk at a time; zeros past the split: the tiles see
# the same numbers; a float16 chunk is copied, so its NaNs keep payloads that the register path's round trip through
# float may quiet: NaNs either way) and meets the tiles at the role barrier. A stager owns the 16-byte chunks stager, stager +
# STAGERS, ... of a block's rows (CHUNK elements each; each_chunk walks them for both the copies and the conversion).
# Views the copies cannot take (strided rows, rows or bases not 16-byte aligned) run the two-stage stagers' loop
# instead.
RING_STAGER_SOURCE = kernel_text(__file__, "ring_stager_loop.metal")


def _assembled(ring: bool = False) -> str:
    """PARTIAL_SOURCE with its markers filled in: the buffers, the two-stage stagers' loop (the ring's with ``ring``)
    and the blocks that stage and compute."""
    assert PARTIAL_SOURCE.count("COMPUTE_BLOCK") == 2 and STAGER_SOURCE.count("STAGE_BLOCK") == 1
    assert PARTIAL_SOURCE.count("KV_BUFFERS") == PARTIAL_SOURCE.count("STAGER_LOOP") == PARTIAL_SOURCE.count("STAGE_BLOCK") == 1
    buffers, stagers = ((RING_BUFFERS_SOURCE, RING_STAGER_SOURCE.replace("STAGER_LOOP", STAGER_SOURCE.lstrip("\n")))
                        if ring else (BUFFERS_SOURCE, STAGER_SOURCE))
    source = PARTIAL_SOURCE.replace("KV_BUFFERS\n", buffers.lstrip("\n")).replace("STAGER_LOOP", stagers.lstrip("\n"))
    return source.replace("STAGE_BLOCK", STAGE_SOURCE.lstrip("\n")).replace("COMPUTE_BLOCK", COMPUTE_SOURCE.lstrip("\n"))


MERGE_HEADER = kernel_text(__file__, "merge.h")

MERGE_SOURCE = kernel_text(__file__, "merge.metal")

PARTIAL = KernelSpec("multi_query_partial", ("q", "k", "v", "scale"), ("part",),
                     _assembled(),
                     header=HEADER, ensure_row_contiguous=False)
# The CUDA-only variant: the two-stage partial whose stagers copy K / V with cp.async into a ring (ring_slots).
PARTIAL_RING = KernelSpec("multi_query_partial_ring", PARTIAL.input_names, PARTIAL.output_names, _assembled(ring=True),
                          header=HEADER, ensure_row_contiguous=False, arms=("cuda",))
MERGE = KernelSpec("multi_query_merge", ("part",), ("out",), MERGE_SOURCE, header=MERGE_HEADER)
# The merge body spells MERGE_DIMS as 32 lanes x 4 dims (one float4 load each) in its buffers and indices; merge_launch's
# grid uses the Python constant: the two must not drift apart.
assert f"nums[MERGE_SLICES][{MERGE_DIMS}]" in MERGE_SOURCE and MERGE_DIMS == 32 * 4

assert "0.0h" not in PARTIAL_SOURCE and "threadgroup half*" not in PARTIAL_SOURCE + HEADER


def default_splits(n: int, kv_heads: int) -> int:
    """Key splits for ``n`` positions and ``kv_heads`` KV heads: enough threadgroups, each >= 256 keys.

    clamp(min(ceil(n / SPLIT_KEYS), ceil(TARGET_THREADGROUPS / kv_heads)), 1, MAX_SPLITS): the seed's
    ceil(n / 256) up to the point where the grid reaches TARGET_THREADGROUPS (at 32/8/N32k: 32 splits of 1024
    keys instead of the seed's 128 of 256).
    """
    n = check_int("n", n, minimum=0)
    kv_heads = check_int("kv_heads", kv_heads, minimum=1)
    return max(1, min(MAX_SPLITS, -(-n // SPLIT_KEYS), -(-TARGET_THREADGROUPS // kv_heads)))


def block_keys(d: int) -> int:
    """Keys per staged block at head dim ``d``: 32, or 16 where two padded 32-key blocks (K and V, half)
    would pass Metal's threadgroup memory (D > 248, i.e. D = 256)."""
    d = check_int("d", d, minimum=1)
    return BK if 2 * BK * (d + ROW_PAD) * 2 <= THREADGROUP_BYTES else BK // 2


def tiles_per_simdgroup(nq: int, d: int) -> int:
    """8-row query tiles per SIMD group: ``TILES_PER_SIMDGROUP`` when there is more than one tile and D <=
    ``PAIR_MAX_HEAD_DIM``, else 1. At NQ = 32 one tile per SIMD group (all four computing) is slower on
    the H200: ncu had its partial 6% slower (171 against 161 us) and the pipelined call 0.093 against 0.088 ms, though
    eval8 timings, host noise included, had favoured it; module docstring."""
    return TILES_PER_SIMDGROUP if nq > 8 and d <= PAIR_MAX_HEAD_DIM else 1


def computing_simdgroups(nq: int, d: int) -> int:
    """SIMD groups holding query tiles: one per ``tiles_per_simdgroup`` 8-row tiles."""
    return -(-nq // (8 * tiles_per_simdgroup(nq, d)))


def simdgroups(nq: int, d: int, stages: int = 1) -> int:
    """SIMD groups per threadgroup. One stage: the computing ones, at least MIN_SIMDGROUPS (every SIMD group
    stages). Two: the computing ones plus at least STAGER_SIMDGROUPS that only stage (MIN_SIMDGROUPS in all)."""
    computing = computing_simdgroups(nq, d)
    if stages == 1:
        return max(MIN_SIMDGROUPS, computing)
    return computing + max(STAGER_SIMDGROUPS, MIN_SIMDGROUPS - computing)


def pipeline_stages(nq: int, d: int, arm: str) -> int:
    """K/V buffers per threadgroup on ``arm``: 2 on CUDA where two blocks of K and V fit its 48 KiB of static
    shared memory and the threadgroup keeps <= MAX_PIPELINED_SIMDGROUPS SIMD groups; else 1. Metal stays at 1:
    the two roles meet at barriers from their own loops (the body's ``ROLE_BARRIER``, a PTX named barrier), and
    Metal requires every thread of a threadgroup to reach the same barrier call.

    With two, SIMD groups of their own stage block i + 1 while the tiles compute block i, so the tiles neither
    issue the staging nor wait for its loads (ncu on the H200, one stage, 32/8/L8/D128: the staging was 55% of the
    instructions and the SIMD groups past the tiles spent most of their time at the barrier after the products;
    ncu 164 -> 125 us with two stages). The blocks and every product are the same: only the schedule
    differs, so the results are bit-identical to one stage."""
    nq, d = check_int("nq", nq, minimum=1), check_int("d", d, minimum=1)
    return 2 if check_choice("arm", arm, ARMS) == "cuda" and _two_stages_fit(nq, d) else 1


def _two_stages_fit(nq: int, d: int) -> bool:
    """Whether a two-stage threadgroup exists: its buffers in CUDA's static shared memory, its SIMD groups within
    MAX_PIPELINED_SIMDGROUPS (beyond, a launch can ask for more registers than an SM has)."""
    two_blocks = 2 * 2 * block_keys(d) * (d + ROW_PAD) * 2  # stages x (K, V) x BK rows x KS halves x 2 bytes
    return two_blocks <= STATIC_SHARED_BYTES and simdgroups(nq, d, 2) <= MAX_PIPELINED_SIMDGROUPS


def ring_shared_bytes(d: int, dtype: mx.Dtype, ring: int) -> int:
    """Dynamic shared memory of the ring partial: the two-stage half buffers, then ``ring`` raw slots of one block of
    K and one of V in ``dtype``."""
    bk = block_keys(d)
    dtype, ring = check_choice("dtype", dtype, DTYPES), check_int("ring", ring, minimum=0)
    return 2 * 2 * bk * (d + ROW_PAD) * 2 + ring * 2 * bk * d * dtype.size


def ring_slots(nq: int, d: int, dtype: mx.Dtype, arm: str) -> int:
    """Raw slots of the CUDA-only ring partial on ``arm``, or 0 for the two-stage (or one-stage) partial: RING_SLOTS
    on CUDA where two stages exist (``pipeline_stages``) and the shared memory fits (``ring_shared_bytes``), else 0.
    Metal has no cp.async (the ring body is CUDA's alone: ``PARTIAL_RING.arms``).

    The ring changes where the stagers' loads wait, not a number: its half buffers hold what the two-stage stagers
    store, so its results are bit-identical to two stages (``test_pipelined_partials_match_one_stage``)."""
    check_choice("dtype", dtype, DTYPES)
    if pipeline_stages(nq, d, arm) != 2 or not RING_SLOTS:
        return 0
    return RING_SLOTS if ring_shared_bytes(d, dtype, RING_SLOTS) <= MAX_DYNAMIC_SHARED_BYTES else 0


# --- the kernels -------------------------------------------------------------


def partial_launch(q: mx.array, keys: mx.array, values: mx.array, scale: mx.array, splits: int,
                   stages: int = 1, ring: int = 0) -> Launch:
    """The partial pass (``q`` any view: the body reads its strides; ``scale`` the softmax scale as a one-element
    array in q's dtype: the body rounds q * scale to it, as the seed's separate multiply did; ``stages``: 1 or 2,
    ``pipeline_stages``;
    ``ring``: 0, or the raw slots of the CUDA-only ring partial, ``ring_slots``, which needs two stages).
    N and the split count are not template constants (the body reads them from the keys' shape and the grid):
    one compilation serves a growing cache."""
    if stages not in (1, 2):
        raise ValueError(f"stages must be 1 or 2, got {stages!r}")
    if isinstance(ring, bool) or not isinstance(ring, int) or (ring and not 2 <= ring <= MAX_RING_SLOTS):
        raise ValueError(f"ring must be 0 or an int in [2, {MAX_RING_SLOTS}], got {ring!r}")
    if ring and stages != 2:
        raise ValueError(f"ring={ring} needs stages=2 (the ring replaces the two-stage partial's stagers), "
                         f"got stages={stages}")
    _, h, L, d = q.shape
    kvh = keys.shape[1]
    rep = h // kvh
    nq = rep * L
    if stages == 2 and not _two_stages_fit(nq, d):
        raise ValueError(f"stages=2 does not fit NQ={nq}, D={d}: two K/V blocks need <= {STATIC_SHARED_BYTES} bytes "
                         f"and the threadgroup <= {MAX_PIPELINED_SIMDGROUPS} SIMD groups (pipeline_stages)")
    threads = 32 * simdgroups(nq, d, stages)
    stagers = threads if stages == 1 else threads - 32 * computing_simdgroups(nq, d)
    bk = block_keys(d)
    rows_per_pass = stagers // (d // 4)  # the body's PASS: each stager owns one 4-dim quad of a row
    template = (("T", q.dtype), ("L", L), ("D", d), ("KVH", kvh), ("REP", rep), ("NQ", nq), ("BK", bk),
                ("KS", d + ROW_PAD), ("THREADS", threads), ("TILES", tiles_per_simdgroup(nq, d)),
                ("STAGES", stages), ("STAGERS", stagers), ("ITEMS", -(-bk // rows_per_pass)))
    spec, shared = PARTIAL, 0
    if ring:
        spec, shared, template = PARTIAL_RING, ring_shared_bytes(d, q.dtype, ring), template + (("RING", ring),)
    return Launch(spec, (q, keys, values, scale), template, grid=(threads * splits, kvh, 1),
                  threadgroup=(threads, 1, 1),
                  output_shapes=(parts_shape(splits, kvh, nq, d),), output_dtypes=(mx.float32,),
                  shared_memory=shared)


def parts_shape(splits: int, kvh: int, nq: int, d: int) -> tuple[int, int]:
    """The shape of ``part``, the partial pass's one output (PARTS layout, below)."""
    return splits, kvh * nq * (d + 2)


def pack_parts(opart: mx.array, mpart: mx.array, lpart: mx.array) -> mx.array:
    """``part`` from partials made elsewhere (the merge's gate builds them): opart [S, KVH, NQ, D], mpart and lpart
    [S, KVH, NQ], float32.

    PARTS layout: one float32 buffer of shape ``parts_shape`` = (S, KVH * NQ * (D + 2)) holding three regions, not
    one row per split: O as [S, KVH, NQ, D], then m, then l, each [S, KVH, NQ] (cell c = (s * KVH + hk) * NQ + row:
    O at c * D, m at cells * D + c, l at cells * (D + 1) + c, cells = S * KVH * NQ). The first dim tells the merge
    the split count; O's rows stay 16-byte aligned for its vector loads. One output instead of three saves MLX's
    host ~4.5 us per call on the H200 (each output of a custom kernel costs it ~1.5-3 us)."""
    check_partials(("opart", opart), ("mpart", mpart), ("lpart", lpart),
                   layout="[S, KVH, NQ, D] and mpart, lpart [S, KVH, NQ]")
    splits = opart.shape[0]
    return mx.concatenate([opart.reshape(-1), mpart.reshape(-1), lpart.reshape(-1)]).reshape(splits, -1)


def merge_launch(part: mx.array, dtype: mx.Dtype, heads: int, rows: int, kvh: int, d: int) -> Launch:
    """The split merge of ``part`` (``parts_shape``; ``heads`` query heads of ``rows`` rows over ``kvh`` KV heads,
    head dim ``d``): a threadgroup of ``MERGE_SLICES`` SIMD groups per query vector and ``MERGE_DIMS`` dims."""
    rep = heads // kvh
    nq = rep * rows
    width = parts_shape(1, kvh, nq, d)[1]
    if part.ndim != 2 or part.shape[1] != width:
        raise ValueError(f"part must be [splits, {width}] (parts_shape) for heads={heads}, rows={rows}, kvh={kvh}, "
                         f"d={d}; got {list(part.shape)}")
    template = (("T", dtype), ("L", rows), ("D", d), ("KVH", kvh), ("REP", rep), ("NQ", nq),
                ("MERGE_SLICES", MERGE_SLICES))
    return Launch(MERGE, (part,), template, grid=(-(-d // MERGE_DIMS) * 32, kvh * nq * MERGE_SLICES, 1),
                  threadgroup=(32, MERGE_SLICES, 1),
                  output_shapes=((1, heads, rows, d),), output_dtypes=(dtype,))
