"""Multi-query causal flash-decoding: a few query rows (L <= 8) over a long KV cache.

Contract (the seed's ``multiQueryCausalSdpa``, @mlx-bun/inference 1.0.0
``kernels/attention/multi-query.ts``; the speculative-verify shape)::

    multi_query_causal(q, keys, values, *, scale, splits=None, arm=None) -> [1, H, L, D]

* ``q`` [1, H, L, D], 1 <= L <= 8 (``MAX_ROWS``), D a multiple of 8 up to 256
  (the body works in 8x8 fragments; ``qf`` and ``o`` keep D/4 values per
  lane in registers); float32 / float16 / bfloat16 (T). Output in T. Any
  view (a decode step's q is often [1, L, H, D] transposed): the kernel reads
  ``q_strides``, so a call copies nothing and adds no graph node for q.
* ``keys`` / ``values`` [1, KVH, N, D] in T, N >= L: the L query rows are the
  last L positions of the cache. They may be strided views (a slice of a
  larger cache, a transpose): the kernel reads ``k_strides`` / ``v_strides``,
  with 4-wide vector loads when both K and V rows allow them (unit last
  stride, head and row strides multiples of 4; the view must then start
  4-element aligned, as every slice along heads or tokens of a cache does)
  and strided loads otherwise.
* GQA: H = KVH * REP; query head h reads KV head ``h // REP``. The NQ = REP * L
  query vectors of a KV head share one threadgroup (one SIMD group per
  ``tiles_per_simdgroup`` 8-row tiles, at least 4: ``simdgroups``), so NQ <= 64
  (``MAX_VECTORS``); above it a ValueError names q.
* Causal, bottom-right: row (r, i) (head kv * REP + r, query i) sees keys
  ``j <= N - L + i``.
* ``scale``: finite real, folded into q in T (``q * scale`` rounded to T) as the
  seed does; the kernel multiplies as it loads q (a one-element ``scale`` input
  in T), the graph arm with an MLX multiply.
* ``splits``: key splits (threadgroups per KV head), default
  ``default_splits(N, KVH)`` = clamp(min(ceil(N / 256), ceil(256 / KVH)), 1, 128)
  (the seed's ceil(N / 256) until the grid holds ``TARGET_THREADGROUPS``); an
  int in [1, 128] overrides it (split s covers keys [s * per, min(N, (s + 1) *
  per)), per = ceil(N / splits); a split may be empty, or hide all its keys
  from some rows: the merge skips such -inf partials).
* Precision (the seed's design, "not bit-identical to MLX's kernels; gate by
  KL"): the kernel rounds Q * scale, K and V to half and multiplies on the
  simdgroup matrix unit (half in, float accumulate); the probabilities P are
  rounded to half for P . V while the softmax sums stay float32. So whatever T
  is, the result carries half precision, and Q * scale, K and V must stay
  within half's range (|x| < 65504).
* Bad input (L > 8, NQ > 64, D, dtypes, shapes, N < L, splits, scale) raises
  ValueError / TypeError naming the argument, before any launch. On a compiled
  arm the checks run once per argument signature (``impl.recent_calls``: shapes,
  dtypes, scalars with their types): a decode step's later layers go straight
  to the compiled call.

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

Arms: ``metal`` / ``cuda`` compile the seed's bodies below, with port edits
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
A call runs partial and merge as one ``mx.compile``d function per
input signature, the ``TRACES_KEPT`` most recent kept (``_compiled_call``: a decode
step's layers share N, so the first traces and the rest replay; built call by call, the
primitives cost host time comparable to the kernels at N = 32k on the H200).

``graph`` is the same algorithm in MLX ops: the same splits and BK-key
blocks, one block of every split per step, the same half roundings (Q * scale,
K, V, P) and -inf handling, float32 accumulation; its only liberty is the
order of float32 additions inside the 8x8 products (a matmul: its operands
are half values, exact in float32 and in the TF32 that MLX's CUDA backend uses
for float32 matmuls).

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

Gates: ``parity/test_multi_query.py`` (error ratio against the float64 oracle
``reference.attention.attention_ref``, with the naive computation in T, or in
float16 for float32 inputs, the kernel's working precision, as baseline; KL
through a fixed LM head against the oracle); ``properties/test_multi_query_props.py``
(Hypothesis: L 1..8, NQ up to 64, D 64/128/256, N across split and block
edges, forced splits with fully masked partials, strided and transposed K/V,
causality, bad input); ``impl/kernels/test_cuda_compile_decode.py`` (nvcc
compiles every instance, one and two stages, both prelude paths; the simdgroup
probe holds the prelude's products, loads (simdgroup_load_x4 too) and
thread_elements() bit-exact on a GPU); ``test_pipelined_partials_match_one_stage`` (CUDA:
two stages and the ring, at 2 and 4 slots, bit-identical to one stage, on views that take the copies and views
that do not); ``test_merge_matches_float64_oracle`` (compiled arms: the merge
alone against ``reference.attention.split_merge_ref`` on partials whose maxima rise, fall, hide
whole slices; float32 within a derived ulp bound, bf16 / f16 within 1 ulp);
``test_query_views_are_read_through_strides`` (q as a transposed decode-step view, a dim-strided view, head and
row slices: bit-identical to its contiguous copy); ``test_parts_layout_is_o_then_m_then_l``.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial

import mlx.core as mx
import numpy as np

from impl.arms import ARMS, resolve_arm
from impl.checks import check_choice, check_int, check_scale
from impl.kernels import MAX_DYNAMIC_SHARED_BYTES, TRACES_KEPT, KernelSpec, Launch, input_signature
from impl.recent_calls import RecentCalls, array_key, scalar_key

__all__ = [
    "BK",
    "DTYPES",
    "MAX_HEAD_DIM",
    "MAX_ROWS",
    "MAX_SPLITS",
    "MAX_VECTORS",
    "SPLIT_KEYS",
    "block_keys",
    "default_splits",
    "merge_launch",
    "multi_query_causal",
    "partial_launch",
    "pipeline_stages",
    "ring_shared_bytes",
    "ring_slots",
]

BK = 32  # keys per staged block (16 at D > 248: see block_keys)
MAX_ROWS = 8  # L
MAX_VECTORS = 64  # NQ = REP * L: 8 SIMD groups x 8-row tiles
MAX_HEAD_DIM = 256
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

HEADER = """
#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif
#ifndef THREADGROUP_MEM
#define THREADGROUP_MEM threadgroup  // Metal's threadgroup address space (the CUDA prelude: empty)
#endif
#ifndef UNROLL_FULL
#define UNROLL_FULL _Pragma("clang loop unroll(full)")  // the CUDA prelude: _Pragma("unroll")
#endif
#ifndef ROLE_BARRIER
// The two-stage partial's barrier (CUDA's named barrier: the CUDA prelude). Metal has every thread of a threadgroup
// meet at the same barrier call, so it never runs the two-stage loops (pipeline_stages gives it one stage).
#define ROLE_BARRIER(threads) threadgroup_barrier(metal::mem_flags::mem_threadgroup)
#endif
#ifndef SG_FRAGMENT_LAYOUT
#define SG_FRAGMENT_LAYOUT
// Metal's simdgroup-matrix layout: lane l holds row sg_fragment_row(l), columns sg_fragment_col(l) and
// that + 1; the lanes of one row are l ^ 1, l ^ 8 and l ^ 9. (The CUDA prelude defines its own.)
METAL_FUNC uint sg_fragment_row(uint l) { return ((l / 4u) & 4u) + ((l / 2u) % 4u); }
METAL_FUNC uint sg_fragment_col(uint l) { return ((l / 4u) & 2u) * 2u + (l % 2u) * 2u; }
#define SG_ROW_LANES_XOR1 1u
#define SG_ROW_LANES_XOR2 8u
#endif
#ifndef SG_LOAD_X4
#define SG_LOAD_X4
// m0..m3 = the four 8x8 matrices side by side at src (columns 0-7, 8-15, 16-23, 24-31): four simdgroup loads here;
// the CUDA prelude defines it as one ldmatrix.x4 (metal_simdgroup.cuh).
#define simdgroup_load_x4(m0, m1, m2, m3, src, stride, transpose) \
  do { \
    metal::simdgroup_load(m0, src, stride, ulong2(0, 0), transpose); \
    metal::simdgroup_load(m1, src, stride, ulong2(8, 0), transpose); \
    metal::simdgroup_load(m2, src, stride, ulong2(16, 0), transpose); \
    metal::simdgroup_load(m3, src, stride, ulong2(24, 0), transpose); \
  } while (0)
#endif
#ifndef SG_MULTIPLY_ACCUMULATE_ROWS16
#define SG_MULTIPLY_ACCUMULATE_ROWS16
// d0 += a0 · b and d1 += a1 · b: two 8-row tiles times one 8x8 matrix. Here two simdgroup products; the CUDA
// prelude defines it as one 16-row tensor-core product (metal_simdgroup.cuh).
#define simdgroup_multiply_accumulate_rows16(d0, d1, a0, a1, b) \
  do { \
    metal::simdgroup_multiply_accumulate(d0, a0, b, d0); \
    metal::simdgroup_multiply_accumulate(d1, a1, b, d1); \
  } while (0)
#endif
#ifndef SG_MULTIPLY_ACCUMULATE_ROWS16_K16
#define SG_MULTIPLY_ACCUMULATE_ROWS16_K16
// d0 += a0 · b0 + a2 · b1 and d1 += a1 · b0 + a3 · b1: two tiles times a 16-deep product, b0's step then b1's. Here
// four simdgroup products; the CUDA prelude defines it as one 16x8x16 tensor-core product (metal_simdgroup.cuh).
#define simdgroup_multiply_accumulate_rows16_k16(d0, d1, a0, a1, a2, a3, b0, b1) \
  do { \
    simdgroup_multiply_accumulate_rows16(d0, d1, a0, a1, b0); \
    simdgroup_multiply_accumulate_rows16(d0, d1, a2, a3, b1); \
  } while (0)
#endif

// Dims [d, d + 4) of one K/V row as half: one 4-wide vector load (the row allows it), or 4 loads `step` apart.
template <typename T>
METAL_FUNC half4 load4_vector(const DEVICE_MEM T* src, ulong at) {
  const metal::vec<T, 4> raw = *(const DEVICE_MEM metal::vec<T, 4>*)(src + at);  // one load, by value
  return half4(float4(raw));
}

#if defined(__CUDACC__)
// CUDA, bfloat16 rows: the 4-vector as one 8-byte load of two words, each half widened by a shift or a mask (a
// bfloat16 is the top half of its float32; nvcc had converted element by element: two PRMTs and four IMADs per
// 4-vector in the staging, ncu on the H200, perf/runs/2026-11-30-h200-session6/callE2). Metal converts natively.
template <>
METAL_FUNC half4 load4_vector<__nv_bfloat16>(const __nv_bfloat16* src, ulong at) {
  const uint2 w = *(const uint2*)(src + at);
  return half4(make_float4(bf16_lo_as_float(w.x), bf16_hi_as_float(w.x),
                           bf16_lo_as_float(w.y), bf16_hi_as_float(w.y)));
}
#endif

#if defined(__CUDACC__)
// The ring partial's conversion (CUDA only, like the ring): the 16-byte chunk of T at src as half at dst (16 /
// sizeof(T) elements; dst 16- or, for float32, 8-byte aligned), zeros when !live. Whole 32-bit words: a bfloat16
// word's two elements widen by a shift and a mask and round to nearest even as one pair, a float16 chunk is copied.
// The same numbers as load4_vector's half4(float4): ncu on the H200 had that conversion, element by element through
// half4, at ~4 instructions per element and 39% of the ring partial's instructions at 32/8/L8/D128 (byte permutes
// assembling half4s; perf/runs/2026-11-30-h200-session10/callR6/prof/ring.sass.csv).
METAL_FUNC uint half2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits: the element first in memory
  return *(const uint*)&h;
}
template <typename T>
METAL_FUNC void chunk_to_half(const T* src, half* dst, bool live);
template <>
METAL_FUNC void chunk_to_half<__nv_bfloat16>(const __nv_bfloat16* src, half* dst, bool live) {
  const uint4 w = *(const uint4*)src;
  const uint4 h = make_uint4(half2_bits(bf16_lo_as_float(w.x), bf16_hi_as_float(w.x)),
                             half2_bits(bf16_lo_as_float(w.y), bf16_hi_as_float(w.y)),
                             half2_bits(bf16_lo_as_float(w.z), bf16_hi_as_float(w.z)),
                             half2_bits(bf16_lo_as_float(w.w), bf16_hi_as_float(w.w)));
  *(uint4*)dst = live ? h : make_uint4(0u, 0u, 0u, 0u);
}
template <>
METAL_FUNC void chunk_to_half<__half>(const __half* src, half* dst, bool live) {
  *(uint4*)dst = live ? *(const uint4*)src : make_uint4(0u, 0u, 0u, 0u);
}
template <>
METAL_FUNC void chunk_to_half<float>(const float* src, half* dst, bool live) {
  const float4 f = *(const float4*)src;
  const uint2 h = make_uint2(half2_bits(f.x, f.y), half2_bits(f.z, f.w));
  *(uint2*)dst = live ? h : make_uint2(0u, 0u);
}
#endif

template <typename T>
METAL_FUNC half4 load4_strided(const DEVICE_MEM T* src, ulong at, ulong step) {
  half4 h;
  for (uint e = 0; e < 4u; ++e) h[e] = half(float(src[at + (ulong)e * step]));
  return h;
}
"""

PARTIAL_SOURCE = """
  const uint lane = thread_index_in_simdgroup;
  const uint sg = simdgroup_index_in_threadgroup;
  const uint tid = thread_position_in_threadgroup.x;
  const uint hk = threadgroup_position_in_grid.y;
  const uint split = threadgroup_position_in_grid.x;
  // Run-time cache length and split count: one compiled instance serves every N.
  const uint n = (uint)k_shape[2], splits = threadgroups_per_grid.x;
  const uint fm = sg_fragment_row(lane), fn = sg_fragment_col(lane);
KV_BUFFERS
  // Query tiles: TILES 8-row tiles per SIMD group, tile t holding rows (sg * TILES + t) * 8 .. + 7 of the head
  // group's rep·L vectors; every K / V fragment loaded serves all of them.
  const bool tile = sg * (uint)TILES * 8u < (uint)NQ;  // simdgroups past the tiles only stage K/V
  metal::simdgroup_half8x8 qf[TILES][D / 8];
  metal::simdgroup_float8x8 o[TILES][D / 8];
  float m[TILES], l[TILES];
  uint limit[TILES];                                   // keys <= limit[t] are visible to this lane's row of tile t
  bool rowOks[TILES];
  // Only the tiles read q and the scale: the SIMD groups past them stage their first block at once. (When every warp
  // read scale[0] here, 15% of the ring partial's stall samples were warps, stagers included, waiting for it before
  // any copy went out: ncu on the H200, perf/runs/2026-11-30-h200-session10/callR5.)
  if (tile) {
    const float qscale = float(scale[0]);                // the softmax scale, in T
    UNROLL_FULL
    for (uint t = 0; t < (uint)TILES; ++t) {
      const uint row = (sg * (uint)TILES + t) * 8u + fm;  // this lane's fragment row
      const bool rowOk = row < (uint)NQ;
      const uint rr = rowOk ? row / (uint)L : 0u, qi = rowOk ? row % (uint)L : 0u;
      // q may be any view (a decode step's q is often [1, L, H, D] transposed): read through its strides, so the
      // call needs no copy of q (and no graph node for one: ~2 us of the H200 host's time per call, session 11).
      const auto qp = q + (ulong)(hk * (uint)REP + rr) * (ulong)q_strides[1] + (ulong)qi * (ulong)q_strides[2];
      const ulong qds = (ulong)q_strides[3];
      // Q * scale rounded to T (the seed's mulScalar in T), then to half.
      UNROLL_FULL
      for (uint f = 0; f < (uint)D / 8u; ++f) {
        qf[t][f].thread_elements()[0] = rowOk ? half(T(float(qp[(8u * f + fn) * qds]) * qscale)) : half(0.0f);
        qf[t][f].thread_elements()[1] = rowOk ? half(T(float(qp[(8u * f + fn + 1u) * qds]) * qscale)) : half(0.0f);
      }
      UNROLL_FULL
      for (uint f = 0; f < (uint)D / 8u; ++f) o[t][f] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
      m[t] = -INFINITY;
      l[t] = 0.0f;
      limit[t] = n - (uint)L + qi;
      rowOks[t] = rowOk;
    }
  }
  // Key range of this split, and its blocks of BK keys.
  const uint per = (n + splits - 1u) / splits;
  const uint k0 = split * per, k1 = metal::min(n, k0 + per);
  const uint blocks = k1 > k0 ? (k1 - k0 + (uint)BK - 1u) / (uint)BK : 0u;
  const ulong hs = (ulong)k_strides[1], rs = (ulong)k_strides[2], ds = (ulong)k_strides[3];
  const ulong vhs = (ulong)v_strides[1], vrs = (ulong)v_strides[2], vds = (ulong)v_strides[3];
  const bool kvec = ds == 1 && hs % 4 == 0 && rs % 4 == 0;
  const bool vvec = vds == 1 && vhs % 4 == 0 && vrs % 4 == 0;
  // Staging: the last STAGERS threads (all of them with one stage; with two, the SIMD groups past the tiles) each
  // own one 4-dim quad d0 of a row and the rows j0, j0 + PASS, ... of a block, so their addresses are one base
  // pointer plus a row offset per item (ITEMS = ceil(BK / PASS) items).
  constexpr uint QUADS = D / 4, PASS = STAGERS / QUADS;  // rows one pass of the stagers covers (D <= 4 * STAGERS)
  // (The computing threads of a two-stage group come first: their index wraps past PASS * QUADS.)
  const uint stager = tid - (uint)(THREADS - STAGERS);
  const bool staging = stager < PASS * QUADS;
  const uint d0 = 4u * (stager % QUADS), j0 = stager / QUADS;
  const auto kp = k + (ulong)hk * hs + (ulong)d0 * ds;  // this stager's quad of the head's K rows
  const auto vp = v + (ulong)hk * vhs + (ulong)d0 * vds;
  // Step `it` stages block `it` into buffer it % STAGES and computes block it + 1 - STAGES.
  if (STAGES == 1) {
    // Every thread stages, a barrier, the tiles compute, a barrier.
    for (uint it = 0; it < blocks; ++it) {
      if (staging) {
STAGE_BLOCK      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
      if (tile) {
COMPUTE_BLOCK      }
      threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    }
  } else if (tile) {
    // Two stages (CUDA only: pipeline_stages): the tiles compute block it - 1 while the stagers stage block it, and
    // the roles meet at one named barrier per step from their own loops, so neither role's registers are live in
    // the other's (one loop for both had the stagers carry the tiles' fragments: 250 registers against 168).
    for (uint it = 0; it < blocks + 1u; ++it) {
      if (it >= 1u) {
COMPUTE_BLOCK      }
      ROLE_BARRIER(THREADS);
    }
  } else {
STAGER_LOOP  }
  // Partial results: unnormalized O, running max and sum per row, in ONE output (``part``; its layout:
  // ``pack_parts``). MLX's host pays ~1.5-3 us per call for each output of a custom kernel (session 13, U4).
  if (!tile) return;
  const ulong cells = (ulong)splits * (uint)KVH * (uint)NQ;  // (split, KV head, row) cells: m starts at cells * D
  UNROLL_FULL
  for (uint t = 0; t < (uint)TILES; ++t) {
    const uint row = (sg * (uint)TILES + t) * 8u + fm;
    if (!rowOks[t]) continue;
    const ulong base = ((ulong)split * (uint)KVH + hk) * (uint)NQ + row;
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f) {
      part[base * (uint)D + 8u * f + fn] = o[t][f].thread_elements()[0];
      part[base * (uint)D + 8u * f + fn + 1u] = o[t][f].thread_elements()[1];
    }
    if (fn == 0u) { part[cells * (uint)D + base] = m[t]; part[cells * (uint)(D + 1) + base] = l[t]; }
  }
"""

# The partial's two blocks, each placed in PARTIAL_SOURCE twice (the one-stage loop and its role in the two-stage
# one): staging one block of K and V (block `it`), and the products of one block (block `step`).
STAGE_SOURCE = """
        // A thread issues all its K and V loads of the block, then its stores (the loads in flight together); a
        // key past the split loads a live row (key k1 - 1) and stages zeros. (Fetching block i + 1 into registers
        // while block i is computed, by every thread, was measured slower on the H200: module docstring.)
        const uint kb = k0 + it * (uint)BK;  // the block staged
        half4 kr[ITEMS], vr[ITEMS];
        if (kvec && vvec) {
          UNROLL_FULL
          for (uint b = 0; b < (uint)ITEMS; ++b) {
            const ulong key = metal::min(kb + j0 + b * PASS, k1 - 1u);
            kr[b] = load4_vector(kp, key * rs);
            vr[b] = load4_vector(vp, key * vrs);
          }
        } else {
          UNROLL_FULL
          for (uint b = 0; b < (uint)ITEMS; ++b) {
            const ulong key = metal::min(kb + j0 + b * PASS, k1 - 1u);
            kr[b] = load4_strided(kp, key * rs, ds);
            vr[b] = load4_strided(vp, key * vrs, vds);
          }
        }
        const uint at = (it % (uint)STAGES) * (uint)(BK * KS) + j0 * (uint)KS + d0;
        UNROLL_FULL
        for (uint b = 0; b < (uint)ITEMS; ++b) {
          const uint j = j0 + b * PASS;
          if (BK % PASS == 0 || j < (uint)BK) {
            const bool live = kb + j < k1;
            *(THREADGROUP_MEM half4*)(kt + at + b * PASS * (uint)KS) = live ? kr[b] : half4(half(0.0f));
            *(THREADGROUP_MEM half4*)(vt + at + b * PASS * (uint)KS) = live ? vr[b] : half4(half(0.0f));
          }
        }
"""

COMPUTE_SOURCE = """
        const uint step = it + 1u - (uint)STAGES, kb = k0 + step * (uint)BK;  // the block computed
        const THREADGROUP_MEM half* kc = kt + (step % (uint)STAGES) * (uint)(BK * KS);  // this block's buffers
        const THREADGROUP_MEM half* vc = vt + (step % (uint)STAGES) * (uint)(BK * KS);
        // S = Q · Kᵀ for BK keys: BK/8 fragments of [8 rows × 8 keys] per tile. The key fragments c are the inner
        // loop: consecutive products go to different accumulators, so none waits for the one before in program order
        // (ptxas interleaved the other order as well: the same speed on the H200; the sums over f keep their order).
        metal::simdgroup_float8x8 s[TILES][BK / 8];
        metal::simdgroup_half8x8 p[TILES][BK / 8];
        UNROLL_FULL
        for (uint c = 0; c < (uint)BK / 8u; ++c)
          UNROLL_FULL
          for (uint t = 0; t < (uint)TILES; ++t) s[t][c] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        // Key fragments four dims-blocks at a time (simdgroup_load_x4: one ldmatrix.x4 on CUDA), each
        // accumulator still summing its f in order; a D that is not a multiple of 32 ends with single loads.
        UNROLL_FULL
        for (uint f0 = 0; f0 < (uint)D / 8u; f0 += 4u)
          UNROLL_FULL
          for (uint c = 0; c < (uint)BK / 8u; ++c) {
            metal::simdgroup_half8x8 kf[4];
            const THREADGROUP_MEM half* at = kc + (8u * c) * (uint)KS + 8u * f0;
            if (f0 + 4u <= (uint)D / 8u)
              simdgroup_load_x4(kf[0], kf[1], kf[2], kf[3], at, (ulong)KS, true);
            else {  // (braces: a loop pragma right after `else`)
              UNROLL_FULL
              for (uint i = 0; f0 + i < (uint)D / 8u; ++i)
                metal::simdgroup_load(kf[i], at + 8u * i, (ulong)KS, ulong2(0, 0), true);
            }
            // Two tiles take two dims-blocks per product where they pair up (one 16x8x16 mma on CUDA).
            UNROLL_FULL
            for (uint i = 0; i < 4u && f0 + i < (uint)D / 8u; ++i) {
              const uint f = f0 + i;
              if (TILES == 2 && i % 2u == 0u && f + 1u < (uint)D / 8u)
                simdgroup_multiply_accumulate_rows16_k16(s[0][c], s[TILES - 1][c], qf[0][f], qf[TILES - 1][f],
                                                         qf[0][f + 1u], qf[TILES - 1][f + 1u], kf[i], kf[i + 1u]);
              else if (TILES == 2 && i % 2u == 0u)
                simdgroup_multiply_accumulate_rows16(s[0][c], s[TILES - 1][c], qf[0][f], qf[TILES - 1][f], kf[i]);
              else if (TILES == 1)
                metal::simdgroup_multiply_accumulate(s[0][c], qf[0][f], kf[i], s[0][c]);
            }
          }
        // Causal / range mask and online softmax for this lane's row fm of each tile.
        UNROLL_FULL
        for (uint t = 0; t < (uint)TILES; ++t) {
          float bmax = -INFINITY;
          UNROLL_FULL
          for (uint c = 0; c < (uint)BK / 8u; ++c)
            UNROLL_FULL
            for (uint e = 0; e < 2u; ++e) {
              const uint key = kb + 8u * c + fn + e;
              float v = s[t][c].thread_elements()[e];
              if (!rowOks[t] || key >= k1 || key > limit[t]) v = -INFINITY;
              s[t][c].thread_elements()[e] = v;
              bmax = metal::max(bmax, v);
            }
          bmax = metal::max(bmax, metal::simd_shuffle_xor(bmax, SG_ROW_LANES_XOR1));
          bmax = metal::max(bmax, metal::simd_shuffle_xor(bmax, SG_ROW_LANES_XOR2));
          const float mnew = metal::max(m[t], bmax);
          const float corr = mnew == -INFINITY ? 1.0f : metal::exp(m[t] - mnew);
          float bsum = 0.0f;
          UNROLL_FULL
          for (uint c = 0; c < (uint)BK / 8u; ++c)
            UNROLL_FULL
            for (uint e = 0; e < 2u; ++e) {
              const float v = s[t][c].thread_elements()[e];
              const float w = v == -INFINITY ? 0.0f : metal::exp(v - mnew);
              bsum += w;
              p[t][c].thread_elements()[e] = half(w);
            }
          bsum += metal::simd_shuffle_xor(bsum, SG_ROW_LANES_XOR1);
          bsum += metal::simd_shuffle_xor(bsum, SG_ROW_LANES_XOR2);
          l[t] = l[t] * corr + bsum;
          m[t] = mnew;
          // x * 1 == x: the accumulator's rescale is skipped when no row of the tile moved its max (a vote, so the
          // branch is uniform across the SIMD group; after the first blocks the max rarely moves).
          if (!metal::simd_all(corr == 1.0f)) {
            UNROLL_FULL
            for (uint f = 0; f < (uint)D / 8u; ++f) {
              o[t][f].thread_elements()[0] *= corr;
              o[t][f].thread_elements()[1] *= corr;
            }
          }
        }
        // O += P · V, the D/8 accumulators f inner (independent products in a row, as for S; each O fragment still
        // sums its key fragments c in order).
        // Key fragments in pairs (c, c + 1): two tiles take both in one product (one 16x8x16 mma on CUDA).
        UNROLL_FULL
        for (uint c = 0; c < (uint)BK / 8u; c += 2u)
          UNROLL_FULL
          for (uint f0 = 0; f0 < (uint)D / 8u; f0 += 4u) {
            metal::simdgroup_half8x8 vf[2][4];
            UNROLL_FULL
            for (uint h = 0; h < 2u; ++h) {
              const THREADGROUP_MEM half* at = vc + (8u * (c + h)) * (uint)KS + 8u * f0;
              if (f0 + 4u <= (uint)D / 8u)
                simdgroup_load_x4(vf[h][0], vf[h][1], vf[h][2], vf[h][3], at, (ulong)KS, false);
              else {
                UNROLL_FULL
                for (uint i = 0; f0 + i < (uint)D / 8u; ++i) metal::simdgroup_load(vf[h][i], at + 8u * i, (ulong)KS);
              }
            }
            UNROLL_FULL
            for (uint i = 0; i < 4u && f0 + i < (uint)D / 8u; ++i) {
              const uint f = f0 + i;
              if (TILES == 2) {
                simdgroup_multiply_accumulate_rows16_k16(o[0][f], o[TILES - 1][f], p[0][c], p[TILES - 1][c],
                                                         p[0][c + 1u], p[TILES - 1][c + 1u], vf[0][i], vf[1][i]);
              } else {
                metal::simdgroup_multiply_accumulate(o[0][f], p[0][c], vf[0][i], o[0][f]);
                metal::simdgroup_multiply_accumulate(o[0][f], p[0][c + 1u], vf[1][i], o[0][f]);
              }
            }
          }
"""


# The partial's K / V buffers: STAGES half buffers, declared in the body (static threadgroup memory, every arm).
BUFFERS_SOURCE = """
  // STAGES buffers of one block of K and one of V as half, rows KS >= D apart (the padding spreads a fragment's
  // rows over banks).
  threadgroup half kt[STAGES * BK * KS];
  threadgroup half vt[STAGES * BK * KS];
"""

# The two-stage partial's stagers: each step stages block `it` from device memory through registers.
STAGER_SOURCE = """
    for (uint it = 0; it < blocks + 1u; ++it) {
      if (staging && it < blocks) {
STAGE_BLOCK      }
      ROLE_BARRIER(THREADS);
    }
"""

# The ring partial (CUDA only: ring_slots): the same half buffers, then RING raw slots, each one block of K and one of
# V as T (rows D apart), all in dynamic shared memory (partial_launch's shared_memory: past the 48 KiB a body may
# declare).
RING_BUFFERS_SOURCE = """
  // The STAGES half buffers of the two-stage partial, then RING raw slots of one block of K and V as T.
  extern __shared__ __align__(16) unsigned char kv_memory[];
  half* const kt = (half*)kv_memory;
  half* const vt = kt + STAGES * BK * KS;
  T* const raw = (T*)(vt + STAGES * BK * KS);
"""

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
RING_STAGER_SOURCE = """
    constexpr uint CHUNK = 16u / sizeof(T), ROW_CHUNKS = D / CHUNK, BLOCK_CHUNKS = BK * ROW_CHUNKS;
    constexpr uint RING_ITEMS = (BLOCK_CHUNKS + STAGERS - 1u) / STAGERS;
    const bool copies = kvec && vvec && hs % CHUNK == 0 && rs % CHUNK == 0 && vhs % CHUNK == 0 &&
                        vrs % CHUNK == 0 && (size_t)k % 16u == 0 && (size_t)v % 16u == 0;
    if (!copies) {
STAGER_LOOP    } else {
      const auto kh = k + (ulong)hk * hs;  // this KV head's rows
      const auto vh = v + (ulong)hk * vhs;
      // f(j, e) for each of this stager's chunks of a block: row j, elements [e, e + CHUNK).
      const auto each_chunk = [&](auto&& f) {
        UNROLL_FULL
        for (uint i = 0; i < RING_ITEMS; ++i) {
          const uint c = stager + i * (uint)STAGERS;
          if (BLOCK_CHUNKS % STAGERS == 0 || c < BLOCK_CHUNKS) f(c / ROW_CHUNKS, (c % ROW_CHUNKS) * CHUNK);
        }
      };
      // Block b's copies into slot b % RING; a key past the split copies a live row (key k1 - 1).
      const auto issue = [&](uint b) {
        T* const slot = raw + (b % (uint)RING) * (uint)(2 * BK * D);
        const uint kb = k0 + b * (uint)BK;
        each_chunk([&](uint j, uint e) {
          const ulong key = metal::min(kb + j, k1 - 1u);
          async_copy16(slot + j * (uint)D + e, kh + key * rs + e);
          async_copy16(slot + ((uint)BK + j) * (uint)D + e, vh + key * vrs + e);
        });
      };
      // Block b's chunks of this stager, converted to half in buffer b % STAGES (zeros past the split).
      const auto convert = [&](uint b) {
        const T* const slot = raw + (b % (uint)RING) * (uint)(2 * BK * D);
        const uint kb = k0 + b * (uint)BK, at = (b % (uint)STAGES) * (uint)(BK * KS);
        each_chunk([&](uint j, uint e) {
          const bool live = kb + j < k1;
          chunk_to_half(slot + j * (uint)D + e, kt + at + j * (uint)KS + e, live);
          chunk_to_half(slot + ((uint)BK + j) * (uint)D + e, vt + at + j * (uint)KS + e, live);
        });
      };
      for (uint b = 0; b + 1u < (uint)RING; ++b) {  // the first RING - 1 blocks ahead (a group per block, empty too)
        if (b < blocks) issue(b);
        async_copy_commit();
      }
      for (uint it = 0; it < blocks + 1u; ++it) {
        if (it < blocks) {
          if (it + (uint)RING - 1u < blocks) issue(it + (uint)RING - 1u);
          async_copy_commit();
          async_copy_wait<RING - 1>();  // block it's copies have landed
          convert(it);
        }
        ROLE_BARRIER(THREADS);
      }
    }
"""


def _assembled(ring: bool = False) -> str:
    """PARTIAL_SOURCE with its markers filled in: the buffers, the two-stage stagers' loop (the ring's with ``ring``)
    and the blocks that stage and compute."""
    assert PARTIAL_SOURCE.count("COMPUTE_BLOCK") == 2 and STAGER_SOURCE.count("STAGE_BLOCK") == 1
    assert PARTIAL_SOURCE.count("KV_BUFFERS") == PARTIAL_SOURCE.count("STAGER_LOOP") == PARTIAL_SOURCE.count("STAGE_BLOCK") == 1
    buffers, stagers = ((RING_BUFFERS_SOURCE, RING_STAGER_SOURCE.replace("STAGER_LOOP", STAGER_SOURCE.lstrip("\n")))
                        if ring else (BUFFERS_SOURCE, STAGER_SOURCE))
    source = PARTIAL_SOURCE.replace("KV_BUFFERS\n", buffers.lstrip("\n")).replace("STAGER_LOOP", stagers.lstrip("\n"))
    return source.replace("STAGE_BLOCK", STAGE_SOURCE.lstrip("\n")).replace("COMPUTE_BLOCK", COMPUTE_SOURCE.lstrip("\n"))


MERGE_HEADER = """
#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif
"""

MERGE_SOURCE = """
  // One threadgroup per (query vector, 128 dims): lane x owns dims d .. d + 3 (one 16-byte load per split) and
  // SIMD group `slice` the splits slice, slice + 8, ... in ONE pass: a split's weight is taken against the
  // slice's running max and the slice's sums are rescaled when that max grows, so nothing waits for a max before
  // its loads go out (the two-pass merge, the max of every split first, then the sums, paid two dependent memory
  // round trips and a 32-dim threadgroup per 32 dims: 30 against 24 us per call alone, 8 per eval, on the H200,
  // perf/runs/2026-11-30-h200-session8/callG1). The slices then combine in threadgroup memory, each rescaled to
  // their common max. A -inf partial (no key of the split visible to the row; its O and l are 0) weighs 0.
  const uint x = thread_position_in_threadgroup.x, slice = thread_position_in_threadgroup.y;
  const uint d = (threadgroup_position_in_grid.x * 32u + x) * 4u;  // D is a multiple of 8
  const uint qv = threadgroup_position_in_grid.y;                  // 0..KVH·NQ-1
  const uint splits = (uint)part_shape[0];                         // run-time, as in the partial pass
  const ulong stride = (ulong)(KVH * NQ), cells = (ulong)splits * stride;  // PARTS: O, then m, then l
  const bool live = d < (uint)D;
  threadgroup float tops[MERGE_SLICES], dens[MERGE_SLICES], nums[MERGE_SLICES][128];
  float top = -INFINITY, den = 0.0f, num[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  UNROLL_BY_8
  for (uint s = slice; s < splits; s += (uint)MERGE_SLICES) {
    const ulong b = (ulong)s * stride + qv;
    const float ms = part[cells * (uint)D + b], ls = part[cells * (uint)(D + 1) + b];
    // (a lane past D reads dims 0..3 and never writes them: every load stays unconditional, issued early)
    const float4 os = float4(*(const DEVICE_MEM metal::vec<float, 4>*)(part + b * (uint)D + (live ? d : 0u)));
    if (ms == -INFINITY) continue;
    const float next = metal::max(top, ms);
    const float c = top == -INFINITY ? 0.0f : metal::exp(top - next), w = metal::exp(ms - next);
    num[0] = num[0] * c + w * os.x;
    num[1] = num[1] * c + w * os.y;
    num[2] = num[2] * c + w * os.z;
    num[3] = num[3] * c + w * os.w;
    den = den * c + w * ls;
    top = next;
  }
  for (uint e = 0; e < 4u; ++e) nums[slice][4u * x + e] = num[e];
  if (x == 0u) { tops[slice] = top; dens[slice] = den; }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  if (slice == 0u && live) {
    float gtop = -INFINITY;
    for (uint i = 0; i < (uint)MERGE_SLICES; ++i) gtop = metal::max(gtop, tops[i]);
    float total[4] = {0.0f, 0.0f, 0.0f, 0.0f}, weight = 0.0f;
    for (uint i = 0; i < (uint)MERGE_SLICES; ++i) {
      if (tops[i] == -INFINITY) continue;  // a slice with no visible split
      const float c = metal::exp(tops[i] - gtop);
      weight += c * dens[i];
      for (uint e = 0; e < 4u; ++e) total[e] += c * nums[i][4u * x + e];
    }
    const uint hk = qv / (uint)NQ, row = qv % (uint)NQ, rr = row / (uint)L, qi = row % (uint)L;
    const ulong at = ((ulong)(hk * (uint)REP + rr) * (uint)L + qi) * (uint)D + d;
    for (uint e = 0; e < 4u; ++e) out[at + e] = T(total[e] / weight);
  }
"""

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


# --- validation -------------------------------------------------------------



def _validate(q, keys, values, scale, splits) -> tuple[float, int]:
    """Checks everything a launch depends on; returns (scale, splits)."""
    for name, x in (("q", q), ("keys", keys), ("values", values)):
        if not isinstance(x, mx.array):
            raise TypeError(f"{name} must be an mx.array, got {type(x).__name__}")
        if x.ndim != 4 or x.shape[0] != 1:
            raise ValueError(f"{name} must have shape [1, heads, rows, D], got {list(x.shape)}")
        if x.dtype not in DTYPES:
            raise ValueError(f"{name} must be one of {DTYPES}, got {x.dtype}")
    _, h, L, d = q.shape
    _, kvh, n, dk = keys.shape
    if not 1 <= L <= MAX_ROWS:
        raise ValueError(f"q has L={L} query rows; the kernel takes 1..{MAX_ROWS}")
    if d % 8 or not 8 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"q has head dim D={d}; the kernel needs a multiple of 8 in [8, {MAX_HEAD_DIM}]")
    if keys.dtype != q.dtype or values.dtype != q.dtype:
        raise ValueError(f"q, keys and values must share one dtype, got {q.dtype}, {keys.dtype}, {values.dtype}")
    if dk != d:
        raise ValueError(f"keys have head dim {dk} but q has D={d}")
    if tuple(values.shape) != tuple(keys.shape):
        raise ValueError(f"values must have the keys' shape {list(keys.shape)} (same heads, positions and head dim), "
                         f"got {list(values.shape)}")
    if h < 1:
        raise ValueError(f"q has H={h} heads: it needs at least one")
    if kvh < 1 or h % kvh:
        raise ValueError(f"q has H={h} heads, not a multiple of the keys' KVH={kvh}")
    if (h // kvh) * L > MAX_VECTORS:
        raise ValueError(f"q has {h // kvh} heads per KV head x L={L} rows = {(h // kvh) * L} query vectors per "
                         f"KV head; the kernel's threadgroup holds at most {MAX_VECTORS}")
    if n < L:
        raise ValueError(f"keys hold N={n} positions, fewer than q's L={L} rows (the rows are the last L positions)")
    scale = check_scale(scale)
    if not math.isfinite(_scale_in(scale, q.dtype)):  # q * scale is formed in T: an infinite scale makes NaN
        raise ValueError(f"scale={scale!r} is not finite in q's dtype {q.dtype} (q * scale is formed in it)")
    if splits is None:
        return scale, default_splits(n, kvh)
    if isinstance(splits, bool) or not isinstance(splits, (int, np.integer)):
        raise TypeError(f"splits must be None or an int, got {type(splits).__name__}")
    if not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"splits must be in [1, {MAX_SPLITS}], got {splits}")
    return scale, int(splits)


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
    for name, x in (("opart", opart), ("mpart", mpart), ("lpart", lpart)):
        if not isinstance(x, mx.array) or x.dtype != mx.float32:
            raise TypeError(f"{name} must be a float32 mx.array, got {getattr(x, 'dtype', type(x).__name__)}")
    if opart.ndim != 4 or mpart.shape != opart.shape[:3] or lpart.shape != opart.shape[:3]:
        raise ValueError(f"opart must be [S, KVH, NQ, D] and mpart, lpart [S, KVH, NQ]; got {list(opart.shape)}, "
                         f"{list(mpart.shape)}, {list(lpart.shape)}")
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


def multi_query_causal(q: mx.array, keys: mx.array, values: mx.array, *, scale: float, splits: int | None = None,
                       arm: str | None = None) -> mx.array:
    """Causal attention of q's L <= 8 rows (the last L positions) over the cache (module docstring)."""
    # A compiled arm's call whose arguments were validated before goes straight to its compiled call
    # (impl.recent_calls: the checks cost the H200's host about a tenth of the call).
    key, call = _RECENT.lookup(lambda: (resolve_arm(arm), array_key(q), array_key(keys), array_key(values),
                                        scalar_key(scale), scalar_key(splits)))
    if call is None:
        scale, splits = _validate(q, keys, values, scale, splits)
        arm = resolve_arm(arm)
        if arm == "graph":
            return _graph(q * _scale_array(scale, q.dtype), keys, values, splits)
        call = _RECENT.remember(key, _compiled_call(arm, scale, splits, input_signature((q, keys, values))))
    return call(q, keys, values)


_RECENT = RecentCalls(TRACES_KEPT)  # validated (arm, arguments) -> compiled call


@lru_cache(maxsize=64)
def _scale_in(scale: float, dtype: mx.Dtype) -> float:
    """``scale`` rounded to ``dtype`` as ``_scale_array`` holds it (on the CPU stream: no device wait)."""
    return mx.array(scale, dtype=dtype).astype(mx.float32, stream=mx.cpu).item()


def _scale_array(scale: float, dtype: mx.Dtype) -> mx.array:
    """The softmax scale in q's dtype: q * scale is rounded to it (the seed's mulScalar in T; the kernel body
    multiplies as it loads q, the graph arm with an MLX multiply)."""
    return mx.array([scale], dtype=dtype)


@lru_cache(maxsize=TRACES_KEPT)
def _compiled_call(arm: str, scale: float, splits: int, signature: tuple):
    """Partial and merge as one ``mx.compile``d function for the inputs' ``signature``
    (``input_signature``; ``impl.kernels.compile.TRACES_KEPT`` says why one per signature, so few):
    built call by call, the three primitives cost host time comparable to the kernels at N = 32k."""
    return mx.compile(partial(_kernel_call, arm, scale, splits))


def _kernel_call(arm: str, scale: float, splits: int, q: mx.array, keys: mx.array, values: mx.array) -> mx.array:
    """The compiled arm's call, as ``_compiled_call`` traces it: two kernels and nothing else per call. q goes to
    the partial as given (its body reads ``q_strides``) and the partial's one output to the merge: every extra node
    or output costs the host time per call (on the H200 ~1.5-3 us per output; a copy of a transposed q ~8 us)."""
    nq, d = q.shape[1] // keys.shape[1] * q.shape[2], q.shape[3]
    stages = pipeline_stages(nq, d, arm)
    ring = ring_slots(nq, d, q.dtype, arm)
    (part,) = partial_launch(q, keys, values, _scale_array(scale, q.dtype), splits, stages, ring).run(arm)
    (out,) = merge_launch(part, q.dtype, q.shape[1], q.shape[2], keys.shape[1], d).run(arm)
    return out


# --- the graph arm -----------------------------------------------------------


def _half(x: mx.array) -> mx.array:
    """x rounded to half, held in float32 (the kernel's half(...) then its float use)."""
    return x.astype(mx.float16).astype(mx.float32)


def _graph(qs: mx.array, keys: mx.array, values: mx.array, splits: int) -> mx.array:
    """The partial + merge kernels in MLX ops (the module docstring says where they differ)."""
    _, h, L, d = qs.shape
    kvh, n = keys.shape[1], keys.shape[2]
    nq = (h // kvh) * L
    per = -(-n // splits)
    bk = block_keys(d)
    blocks = -(-per // bk)

    # Key of (split, block, slot): s * per + b * BK + j, live when below the split's end min(N, (s+1) * per).
    split_start = mx.arange(splits).reshape(splits, 1, 1) * per
    key = split_start + mx.arange(blocks).reshape(1, blocks, 1) * bk + mx.arange(bk).reshape(1, 1, bk)
    live = key < mx.minimum(split_start + per, n)  # [splits, blocks, bk]
    # A dead slot stages zeros (never read from the cache).
    gathered = mx.where(live, key, 0).reshape(-1)
    k = mx.where(live[..., None], _half(mx.take(keys[0], gathered, axis=1)).reshape(kvh, splits, blocks, bk, d), 0.0)
    v = mx.where(live[..., None], _half(mx.take(values[0], gathered, axis=1)).reshape(kvh, splits, blocks, bk, d), 0.0)

    # Query vector row = r * L + i of KV head hk is head hk * REP + r, query i.
    qf = _half(qs.astype(mx.float32)).reshape(kvh, 1, nq, d)  # [KVH, 1, NQ, D]
    qi = mx.arange(nq) % L
    limit = (n - L + qi).reshape(1, nq, 1)  # keys <= limit are visible to the row

    m = mx.full((kvh, splits, nq), -mx.inf, dtype=mx.float32)
    l = mx.zeros((kvh, splits, nq), dtype=mx.float32)
    o = mx.zeros((kvh, splits, nq, d), dtype=mx.float32)
    for b in range(blocks):
        s = qf @ k[:, :, b].swapaxes(-1, -2)  # [KVH, splits, NQ, bk]
        visible = live[None, :, b, None, :] & (key[None, :, b, None, :] <= limit[None])  # [1, splits, NQ, bk]
        s = mx.where(visible, s, -mx.inf)
        mnew = mx.maximum(m, s.max(axis=-1))
        corr = mx.where(mnew == -mx.inf, 1.0, mx.exp(m - mnew))
        w = mx.where(s == -mx.inf, 0.0, mx.exp(s - mnew[..., None]))
        l = l * corr + w.sum(axis=-1)
        m = mnew
        o = o * corr[..., None] + _half(w) @ v[:, :, b]  # P rounded to half for P . V

    # Merge the splits, skipping -inf partials.
    top = m.max(axis=1, keepdims=True)
    weight = mx.where(m == -mx.inf, 0.0, mx.exp(m - top))
    num = (weight[..., None] * o).sum(axis=1)
    den = (weight * l).sum(axis=1)
    out = (num / den[..., None]).astype(qs.dtype)  # [KVH, NQ, D]
    return out.reshape(1, h, L, d)
