"""Direct paged attention: a few query rows read K/V blocks in place through a block table.

Contract (the seed's ``pagedAttentionView.attend`` direct path, mlx-bun 0.5.0
``paged-attention.ts`` / @mlx-bun/inference ``kernels/attention/paged.ts``)::

    paged_attention(q, storage, block_table, length, *, scale, arm=None, partition=None) -> [1, Hq, n, Dv]

* ``q`` [1, Hq, n, Dk], 1 <= n <= 8 (``DIRECT_MAX_QUERIES``; longer prefills
  belong to ``paged_attention_gather``), dtype float32 / float16 / bfloat16
  equal to ``storage.dtype``. Output in q's dtype.
* ``storage``: any ``PagedStorage`` (``impl.kv``'s ``BlockPool`` and its
  attention views, or plain arrays in a dataclass): ``keys`` [num_blocks, Hkv,
  block_size, Dk] and ``values`` [..., Dv] in ``dtype``, or, when
  ``quantization`` (affine, bits 4|8, ``group_size``) is set, uint32 planes
  [..., D*bits/32] with ``*_scales`` / ``*_biases`` [..., D/group_size] in ``dtype``.
* ``block_table``: an ``impl.block_table.BlockTable`` (checked and frozen once, e.g. per
  decode step: then a call checks it against the pool in O(1)), or 1-D ints (list, NumPy or
  mx.array: checked entry by entry per call; an mx.array is read back to the host for that);
  token t lives in slot ``t % block_size`` of physical block ``block_table[t // block_size]``.
* ``length``: live tokens, n <= length <= len(table) * block_size (and the pool's
  capacity). Bottom-right causal: query i sees tokens j <= length - n + i.
  Nothing at or past ``length`` is read: unused slots may hold anything, NaN included.
* GQA/MQA: query head h reads KV head h // (Hq / Hkv).
* Eligibility is validated before any launch; bad input raises ValueError /
  TypeError naming the argument. On a compiled arm with a frozen ``BlockTable``
  the checks run once per argument signature (``impl.recent_calls``).

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
8- or 16-byte load; quantized: V = 32 / bits, one packed word, or less when a row has fewer than
32 words, so every lane works: ``_lanes``), so LPR lanes read each K and V row as one coalesced
run, and a batch issues its 8 K and 8 V rows together with the next batch's block-table entries
read ahead. Scores are float32 dot products (each lane's fma chain, then a transpose-reduction
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

Arms: ``metal`` / ``cuda`` compile the bodies below (one source for both dialects; the
affine variant differs only in its two load blocks, as in the seed). Partial + merge run as
one ``mx.compile``d pair per launch shape (``_plan`` remembers it with the device [scale,
length, partition] geometry per call shape), and the block table's device copies come with the
``BlockTable`` (raw tables are converted once per distinct content, ``impl.block_table.freeze``): host-side work
cost more than the kernels at N = 32k on the H200 (55 us of Python per call there before; a
call with a BlockTable now costs ~3 us of Python here plus the compiled call). The table is
padded to a power of two and the partition buffers rounded up likewise, so a growing sequence
retraces rarely.
``graph`` (``graph_attention``) is the same computation in MLX ops: the same partitions and float32
state; scores summed in each lane's order, then across lanes (``_lane_dot``);
dequantize-on-load rounded to the pool dtype; the same merge and casts. Its liberties change
only float32 rounding: inside a partition it takes the max, ``exp(s - max)`` and the sums at
once instead of per batch and per SIMD group, adds lanes in a different tree, and multiplies
then adds where the kernel fuses. It never uses a float32 matmul: MLX's CUDA backend computes
those with TF32 inputs (seen on the H200: a one-token output, which is V itself, came back
9e-4 off).

Every multiply-add in the bodies is an explicit ``fma``: NVRTC contracts a separate multiply
and add at its discretion (``-fmad=true``), and on the H200 it evidently did so differently in
two template instances, which broke the bit-exact "row i of an n-row call equals a one-row
call" property in float32. With nothing left to contract, every instance rounds the same way
(the property holds on the H200: ``records/h200-cuda/``).

The seed's body (one SIMD group per query head, row and 64-token partition) ran at 0.20 /
0.76 TB/s on the H200 where this one runs at the figures of ``perf/RESULTS.md``.

Gates: ``parity/test_paged_attention.py`` (error ratio against the float64
oracle ``reference.attention.attention_ref`` with FlashAttention's factor 2 and
the naive low-precision baseline, a KL gate through a fixed LM head; quantized
pools against the oracle on the dequantized K/V and against
``paged_attention_gather``); ``properties/test_paged_attention_props.py``
(Hypothesis: head layouts, head dims, block sizes, lengths across block and
partition edges, permuted tables, NaN-poisoned unused slots, KV4/KV8). The
CUDA arm's record on an NVIDIA H200: ``records/h200-cuda/``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple, Protocol, runtime_checkable

import mlx.core as mx
import numpy as np

from impl.arms import resolve_arm
from impl.block_table import BlockTable, freeze, padded_length
from impl.checks import check_choice, check_int, check_scale
from impl.kernels import KernelSpec, Launch
from impl.recent_calls import RecentCalls, array_key, scalar_key

__all__ = [
    "DIRECT_MAX_LENGTH",
    "DIRECT_MAX_QUERIES",
    "PAGED_DTYPES",
    "MAX_ROWS",
    "PARTITION_QUANTUM",
    "SIMDGROUPS",
    "QUANTIZED_MIN_PARTITION",
    "QUANTIZED_TARGET_THREADGROUPS",
    "TARGET_THREADGROUPS",
    "PagedStorage",
    "QUANTIZED_BITS",
    "merge_launch",
    "paged_attention",
    "paged_attention_gather",
    "partial_launch",
    "pack_partials",
    "partial_shape",
    "partition_size",
    "partition_span",
    "single_block_table",
    "strided_partial_launch",
    "graph_attention",
    "Layout",
    "PAGED",
    "KVQ4",
    "rows_per_threadgroup",
    "set_lane_map",
]

DIRECT_MAX_QUERIES = 8
DIRECT_MAX_LENGTH = 2**24  # the kernels read the length from a float32 (exact integers below 2**24)
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
# 32 lanes 0.286, 16 lanes 0.326. Change with ``set_lane_map``.
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
PAGED_DTYPES = (mx.bfloat16, mx.float16, mx.float32)
QUANTIZED_BITS = (4, 8)


@runtime_checkable
class PagedStorage(Protocol):
    """What paged attention reads (``impl.kv.BlockPool`` and its views have these attributes)."""

    keys: mx.array  # [num_blocks, Hkv, block_size, Dk] in dtype, or uint32 [..., Dk*bits/32]
    values: mx.array  # [num_blocks, Hkv, block_size, Dv] in dtype, or uint32 [..., Dv*bits/32]
    key_scales: mx.array | None  # [num_blocks, Hkv, block_size, Dk/group] in dtype, quantized only
    key_biases: mx.array | None
    value_scales: mx.array | None  # [..., Dv/group]
    value_biases: mx.array | None
    block_size: int
    head_dim: int
    v_head_dim: int
    dtype: mx.Dtype
    quantization: object | None  # None, or has .bits in {4, 8} and .group_size


# Each threadgroup is one KV head x one partition of the sequence and serves every query row that
# reads that head (GQA: K/V are read once per head, not once per query head). Only partial output
# vectors and normalizers materialize, never gathered KV.
HEADER = """
#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif

// V = 8 or 4 consecutive elements of a plain row as float (the body's vector loads; the caller's
// pointer is aligned to V elements: rows of a multiple of V elements, each lane starting at a
// multiple of V). The 16-bit dtypes read them as one 16-byte (8-byte) load of 32-bit words and
// widen each word's pair, element 2i the low half of word i: nvcc compiled the 4 x bfloat16 struct
// load of metal::vec<T, 4> as four 2-byte loads. Float32 reads one 4-vector (V = 8: never given).
struct Wide8 {
  float v[8];
};
struct Wide4 {
  float v[4];
};

template <typename T>
METAL_FUNC Wide8 load8(const DEVICE_MEM T* p) {
  Wide8 r;
  for (uint e = 0; e < 8; ++e) r.v[e] = float(p[e]);
  return r;
}

template <typename T>
METAL_FUNC Wide4 load4(const DEVICE_MEM T* p) {
  const float4 x = float4(*(const DEVICE_MEM metal::vec<T, 4>*)p);
  return Wide4{{x.x, x.y, x.z, x.w}};
}

#if defined(__CUDACC__)
#define PAGED_BF16 __nv_bfloat16
#define PAGED_F16 __half
#else
#define PAGED_BF16 bfloat16_t
#define PAGED_F16 half
#endif

template <>
METAL_FUNC Wide8 load8<PAGED_BF16>(const DEVICE_MEM PAGED_BF16* p) {
  const uint4 x = *(const DEVICE_MEM uint4*)p;
  const uint w[4] = {x.x, x.y, x.z, x.w};
  Wide8 r;
  for (uint i = 0; i < 4; ++i) {  // a bfloat16 is the top half of its float32
    r.v[2 * i] = bf16_lo_as_float(w[i]);
    r.v[2 * i + 1] = bf16_hi_as_float(w[i]);
  }
  return r;
}

template <>
METAL_FUNC Wide4 load4<PAGED_BF16>(const DEVICE_MEM PAGED_BF16* p) {
  const uint2 x = *(const DEVICE_MEM uint2*)p;
  return Wide4{{bf16_lo_as_float(x.x), bf16_hi_as_float(x.x),
                bf16_lo_as_float(x.y), bf16_hi_as_float(x.y)}};
}

template <>
METAL_FUNC Wide4 load4<PAGED_F16>(const DEVICE_MEM PAGED_F16* p) {
  const uint2 x = *(const DEVICE_MEM uint2*)p;
  return Wide4{{half_bits_as_float(x.x & 0xffffu), half_bits_as_float(x.x >> 16),
                half_bits_as_float(x.y & 0xffffu), half_bits_as_float(x.y >> 16)}};
}

template <>
METAL_FUNC Wide8 load8<PAGED_F16>(const DEVICE_MEM PAGED_F16* p) {
  const uint4 x = *(const DEVICE_MEM uint4*)p;
  const uint w[4] = {x.x, x.y, x.z, x.w};
  Wide8 r;
  for (uint i = 0; i < 4; ++i) {
    r.v[2 * i] = half_bits_as_float(w[i] & 0xffffu);
    r.v[2 * i + 1] = half_bits_as_float(w[i] >> 16);
  }
  return r;
}
"""

PARTIAL_SOURCE = """
  constexpr uint G = HQ / HK, ROWS = G * N, CHUNKS = (ROWS + R - 1) / R;
  // LPR lanes read a K or V row (32: the SIMD group; 16: half of it, so one load instruction of the
  // SIMD group brings TPL = 2 tokens' rows). Lane l is lane `sub` = l % LPR of side l / LPR.
  constexpr uint TPL = 32 / LPR;
  static_assert(LPR == 32 || LPR == 16, "a row is read by a SIMD group or half of one");
  constexpr uint JK = (DK + LPR * VK - 1) / (LPR * VK), JV = (DV + LPR * VV - 1) / (LPR * VV);
  const uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
  const uint sub = lane % LPR, side = lane / LPR;
  const uint part = threadgroup_position_in_grid.x;
  const uint hk = threadgroup_position_in_grid.y / CHUNKS, chunk = threadgroup_position_in_grid.y % CHUNKS;
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;
  if (part >= count) return;  // the grid is rounded up (see partial_launch): this group has no partition
  const uint first = part * span, last = min(length, first + span);
  // The rows of this chunk: row i is query head hq = hk * G + r / N, query row r % N (r = chunk * R + i).
  uint lim[R], out_row[R];
  float qv[R][JK * VK];
  uint stop = first;
  for (uint i = 0; i < R; ++i) {
    const uint r = chunk * R + i;
    const uint hq = hk * G + r / N, query = r % N;
    const uint end = min(uint(length - N + query + 1), last);
    lim[i] = r < ROWS ? end : 0;  // bottom-right causal: query i sees tokens j <= length - N + i
    out_row[i] = hq * N + query;
    stop = max(stop, lim[i]);
    for (uint j = 0; j < JK; ++j)
      for (uint e = 0; e < VK; ++e) {
        const uint d = (j * LPR + sub) * VK + e;
        const float x = (r < ROWS && d < DK) ? float(q[(hq * N + query) * DK + d]) * geometry[0] : 0.0f;
        qv[i][j * VK + e] = ROUND_Q ? float(InT(x)) : x;  // ROUND_Q: q * scale formed in InT (kvq4's seed)
      }
  }
  float m[R], l[R], o[R][JV * VV];
  for (uint i = 0; i < R; ++i) {
    m[i] = -INFINITY; l[i] = 0.0f;
    for (uint j = 0; j < JV * VV; ++j) o[i][j] = 0.0f;
  }
  // Each SIMD group takes batches of TB tokens (8 or 16), SG batches apart. A lane reads KT = TB / TPL
  // of them, token k * TPL + side for k < KT; its dims of a row are (j * LPR + sub) * V + e: LPR
  // lanes read a K or V row as one coalesced run of vectors. A batch issues its K and V rows
  // together (2 * KT loads in flight per lane), and the block table entries of the group's next
  // batch are read one batch ahead, so a batch waits on one memory latency: TB sets how many bytes
  // each wait brings.
  constexpr uint KT = TB / TPL;
  constexpr uint SPREAD = LPR / KT;  // lanes of a side that end up holding one token's score
  // STRIDED: one contiguous cache per KV head (kvq4's), read through the planes' strides; no table.
  uint block[TB];
  for (uint k = 0; k < TB; ++k) {
    const uint t = first + sg * TB + k;
    block[k] = STRIDED ? 0 : table[min(t, stop - 1) / BS];  // past the end: a live token's block, masked below
  }
  for (uint t0 = first + sg * TB; t0 < stop; t0 += SG * TB) {
    uint rows[TB];  // (physical block, head, slot) row index of each token; STRIDED: the token
    for (uint k = 0; k < TB; ++k) {
      const uint t = min(t0 + k, stop - 1);  // past the end: re-read a live token, masked below
      rows[k] = STRIDED ? t : (block[k] * HK + hk) * BS + t % BS;
    }
    for (uint k = 0; k < TB; ++k) {
      const uint t = t0 + SG * TB + k;
      if (!STRIDED && t0 + SG * TB < stop) block[k] = table[min(t, stop - 1) / BS];
    }
    float dot[R][KT], vbuf[KT][JV * VV];
    for (uint k = 0; k < KT; ++k) {
      // This side's token: arithmetic, not a select between array elements, which the compiler turns
      // into a lane-indexed array read (the array then lives in local memory).
      uint row = rows[k * TPL];
      if (TPL == 2) row += side * (rows[k * TPL + TPL - 1] - row);
      for (uint i = 0; i < R; ++i) dot[i][k] = 0.0f;
      for (uint j = 0; j < JK; ++j) {
        const uint d0 = (j * LPR + sub) * VK;
        if (d0 < DK) {
          float kx[8];
          LOAD_KEY
          for (uint i = 0; i < R; ++i)
            for (uint e = 0; e < VK; ++e) dot[i][k] = fma(qv[i][j * VK + e], kx[e], dot[i][k]);
        }
      }
      for (uint j = 0; j < JV; ++j) {
        const uint d0 = (j * LPR + sub) * VV;
        float vx[8];
        for (uint e = 0; e < VV; ++e) vx[e] = 0.0f;
        if (d0 < DV) {
          LOAD_VALUE
        }
        for (uint e = 0; e < VV; ++e) vbuf[k][j * VV + e] = vx[e];
      }
    }
    // Transpose-reduce the KT dots across a side's LPR lanes (KT - 1 + log2(SPREAD) shuffles, not
    // KT x log2(LPR)): each step halves the tokens a lane keeps and adds its partner's share of them;
    // lane l ends with its side's token sub / SPREAD's score, as do the other lanes of its SPREAD
    // (a + b == b + a exactly).
    const uint mine = t0 + (sub / SPREAD) * TPL + side;
    float p[R], factor[R], sum[R];
    for (uint i = 0; i < R; ++i) {
      float a[KT];
      for (uint k = 0; k < KT; ++k) a[k] = dot[i][k];
      for (uint keep = KT / 2, bit = LPR / 2; keep >= 1; keep /= 2, bit /= 2) {  // (not `half`: a Metal type)
        const bool upper = (lane & bit) != 0;
        for (uint k = 0; k < keep; ++k)
          a[k] = (upper ? a[k + keep] : a[k]) + simd_shuffle_xor(upper ? a[k] : a[k + keep], bit);
      }
      float score = a[0];
      for (uint bit = SPREAD / 2; bit >= 1; bit /= 2) score += simd_shuffle_xor(score, bit);
      if (mine >= lim[i]) score = -INFINITY;
      // One online-softmax step per batch: rescale to the new max once, one exp per lane. The batch
      // max needs only the lanes SPREAD apart (log2(TB) shuffles): the others hold copies.
      float top = score;
      for (uint bit = SPREAD; bit < 32; bit *= 2) top = max(top, simd_shuffle_xor(top, bit));
      const float next = max(m[i], top);
      const bool none = next == -INFINITY;  // nothing visible yet: keep the empty state
      factor[i] = none ? 1.0f : exp(m[i] - next);
      p[i] = none ? 0.0f : exp(score - next);
      m[i] = next;
      if (factor[i] != 1.0f)  // the max moved (uniform across the SIMD group); x * 1 == x: skip it
        for (uint j = 0; j < JV * VV; ++j) o[i][j] *= factor[i];
      sum[i] = 0.0f;
    }
    for (uint k = 0; k < KT; ++k)
      for (uint i = 0; i < R; ++i) {
        const float w = simd_shuffle(p[i], side * LPR + k * SPREAD);  // masked tokens (past stop included) weigh 0
        sum[i] += w;
        for (uint j = 0; j < JV * VV; ++j) o[i][j] = fma(w, vbuf[k][j], o[i][j]);
      }
    for (uint i = 0; i < R; ++i) l[i] = fma(l[i], factor[i], sum[i]);
  }
  // The sides took different tokens at the same max: add their sums (every lane gets the total).
  for (uint bit = LPR; bit < 32; bit *= 2)
    for (uint i = 0; i < R; ++i) {
      l[i] += simd_shuffle_xor(l[i], bit);
      for (uint j = 0; j < JV * VV; ++j) o[i][j] += simd_shuffle_xor(o[i][j], bit);
    }
  // Combine the SIMD groups' states in threadgroup memory (rescaled to their common max).
  threadgroup float osh[SG * R * DV];
  threadgroup float msh[SG * R], lsh[SG * R];
  for (uint i = 0; i < R; ++i) {
    for (uint j = 0; j < JV; ++j)
      for (uint e = 0; e < VV; ++e) {
        const uint d = (j * LPR + sub) * VV + e;
        if (side == 0 && d < DV) osh[(sg * R + i) * DV + d] = o[i][j * VV + e];
      }
    if (lane == 0) { msh[sg * R + i] = m[i]; lsh[sg * R + i] = l[i]; }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint x = thread_index_in_threadgroup; x < R * DV; x += SG * 32) {
    const uint i = x / DV, d = x % DV;
    if (chunk * R + i >= ROWS) continue;
    float top = -INFINITY;
    for (uint s = 0; s < SG; ++s) top = max(top, msh[s * R + i]);
    float value = 0.0f, total = 0.0f;
    for (uint s = 0; s < SG; ++s) {
      const float ms = msh[s * R + i];
      if (ms == -INFINITY) continue;
      const float weight = exp(ms - top);
      value = fma(weight, osh[(s * R + i) * DV + d], value);
      total = fma(weight, lsh[s * R + i], total);
    }
    // One PARTS row per (query row, partition): DV values, then the max and the sum (``partial_shape``).
    const uint base = (out_row[i] * count + part) * (DV + 2);
    parts[base + d] = value;
    if (d == 0) { parts[base + DV] = top; parts[base + DV + 1] = total; }
  }
"""

# The partial body's LOAD_KEY / LOAD_VALUE blocks: `lanes` dims of a K or V row, from element `at`
# of `plane`, into the float registers `dest`. Plain pools: one 16-byte load of 8 elements when
# lanes == 8 (16-bit dtypes, ``_lane_map``), one 4-vector load when lanes == 4, else element loads.
PLAIN_LOAD = """const uint at = row * {width} + d0;  // element of this lane's dims in the row-major pool
          if ({lanes} == 8) {{
            const Wide8 w = load8({plane} + at);
            for (uint e = 0; e < 8; ++e) {dest}[e] = w.v[e];
          }} else if ({lanes} == 4) {{
            const Wide4 w = load4({plane} + at);
            for (uint e = 0; e < 4; ++e) {dest}[e] = w.v[e];
          }} else {{
            for (uint e = 0; e < {lanes}; ++e) {dest}[e] = float({plane}[at + e]);
          }}"""
# Affine KV4/KV8: a lane's `lanes` dims (a power of two dividing PACK) lie in one packed word and one
# scale group; each element is dequantized on load and rounded to the pool dtype:
# float(InT(scale * code + bias)).
AFFINE_LOAD = """{{
            const uint at = row * {width} + d0;  // dim index in the row-major pool
            const uint word = {plane}[at / PACK] >> ((at % PACK) * BITS);  // this lane's part of the word
            const float s = float({scales}[at / GROUP]), b = float({biases}[at / GROUP]);
            for (uint e = 0; e < {lanes}; ++e)
              {dest}[e] = float(InT(fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b)));
          }}"""
# kvq4's cache (STRIDED): plane[head, token, word] at the planes' own strides (a slice of a larger
# cache, a transpose: never copied), dequantized in float32 and not rounded (the seed's numerics).
STRIDED_AFFINE_LOAD = """{{
            const ulong token = ulong(row), head = ulong(hk);
            const uint word = {plane}[head * {plane}_strides[1] + token * {plane}_strides[2]
                                      + ulong(d0 / PACK) * {plane}_strides[3]] >> ((d0 % PACK) * BITS);
            const float s = float({scales}[head * {scales}_strides[1] + token * {scales}_strides[2]
                                           + ulong(d0 / GROUP) * {scales}_strides[3]]);
            const float b = float({biases}[head * {biases}_strides[1] + token * {biases}_strides[2]
                                           + ulong(d0 / GROUP) * {biases}_strides[3]]);
            for (uint e = 0; e < {lanes}; ++e)
              {dest}[e] = fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b);
          }}"""
LOAD_PLAIN = {"LOAD_KEY": PLAIN_LOAD.format(plane="keys", dest="kx", lanes="VK", width="DK"),
              "LOAD_VALUE": PLAIN_LOAD.format(plane="values", dest="vx", lanes="VV", width="DV")}
LOAD_AFFINE = {
    "LOAD_KEY": AFFINE_LOAD.format(plane="keys", scales="ks", biases="kb", dest="kx", lanes="VK", width="DK"),
    "LOAD_VALUE": AFFINE_LOAD.format(plane="values", scales="vs", biases="vb", dest="vx", lanes="VV", width="DV")}
LOAD_STRIDED_AFFINE = {
    "LOAD_KEY": STRIDED_AFFINE_LOAD.format(plane="keys", scales="ks", biases="kb", dest="kx", lanes="VK"),
    "LOAD_VALUE": STRIDED_AFFINE_LOAD.format(plane="values", scales="vs", biases="vb", dest="vx", lanes="VV")}

MERGE_SOURCE = """
  // One threadgroup per output row: 32 dims x 8 slices of the partitions, then a reduction.
  const uint d = thread_position_in_grid.x, slice = thread_position_in_threadgroup.y;
  const uint x = thread_position_in_threadgroup.x, row = threadgroup_position_in_grid.y;
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;  // partitions written (the buffer may hold more)
  constexpr uint W = DV + 2;  // a PARTS row: DV values, its partition's max, its sum (the partial's one output)
  threadgroup float tops[8];
  threadgroup float values[8][32], totals[8];
  float maximum = -INFINITY;
  // Both loops unrolled by 8, so a slice issues 8 partitions' loads together (the merge took 9 us for 128
  // partitions at 32/8/D128 and 25 us for kvq4's 512 on the H200 before; unrolled: within noise at D128, 3.5%
  // faster per call at D256/N128k, perf/runs/2026-11-30-h200-session5/callC1).
  UNROLL_BY_8
  for (uint part = slice; part < count; part += 8) maximum = max(maximum, parts[(row * count + part) * W + DV]);
  if (x == 0) tops[slice] = maximum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = 0; s < 8; ++s) maximum = max(maximum, tops[s]);
  float sum = 0, value = 0;
  UNROLL_BY_8
  for (uint part = slice; part < count; part += 8) {
    uint base = (row * count + part) * W;
    float weight = exp(parts[base + DV] - maximum);
    sum = fma(parts[base + DV + 1], weight, sum);
    value = fma(d < DV ? parts[base + d] : 0.0f, weight, value);
  }
  values[slice][x] = value;
  if (x == 0) totals[slice] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (slice == 0 && d < DV) {
    float v = 0, t = 0;
    for (uint s = 0; s < 8; ++s) { v += values[s][x]; t += totals[s]; }
    out[row * DV + d] = OutT(v / t);
  }
"""


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
MERGE = KernelSpec("paged_attention_merge", ("parts", "geometry"), ("out",), MERGE_SOURCE)


# --- validation -------------------------------------------------------------


def _check_plane(name: str, array, shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    if not isinstance(array, mx.array):
        raise TypeError(f"storage.{name} must be an mx.array, got {type(array).__name__}")
    if tuple(array.shape) != shape:
        raise ValueError(f"storage.{name} must have shape {list(shape)}, got {list(array.shape)}")
    if array.dtype != dtype:
        raise ValueError(f"storage.{name} must have dtype {dtype}, got {array.dtype}")
    return array


_STORAGE_FIELDS = ("keys", "values", "block_size", "head_dim", "v_head_dim", "dtype", "quantization")


def _validate(q, storage, block_table, length, scale, *, direct: bool):
    """Checks everything a launch depends on; returns (BlockTable, scale float, planes, length int)."""
    if not isinstance(q, mx.array):
        raise TypeError(f"q must be an mx.array, got {type(q).__name__}")
    if q.ndim != 4 or q.shape[0] != 1:
        raise ValueError(f"q must have shape [1, Hq, n, Dk], got {list(q.shape)}")
    _, hq, n, dk = q.shape
    if hq < 1:
        raise ValueError(f"q must have at least one head, got shape {list(q.shape)}")
    missing = [field for field in _STORAGE_FIELDS if not hasattr(storage, field)]
    if missing:
        raise TypeError(f"storage must be a PagedStorage (a BlockPool, one of its views, or planes in a dataclass); "
                        f"{type(storage).__name__} has no {', '.join(missing)}")
    if direct and n > DIRECT_MAX_QUERIES:
        raise ValueError(f"q has n={n} query rows; the direct kernel takes at most {DIRECT_MAX_QUERIES}: "
                         "use paged_attention_gather (the gather + SDPA control) for longer prefills")
    if n < 1:
        raise ValueError("q must have at least one query row")
    scale = check_scale(scale)
    dtype = storage.dtype
    if not isinstance(dtype, mx.Dtype) or dtype not in PAGED_DTYPES:
        raise ValueError(f"storage.dtype must be one of {PAGED_DTYPES}, got {dtype}")
    if q.dtype != dtype:
        raise ValueError(f"q has dtype {q.dtype} but the pool's dtype (storage.dtype) is {dtype}")
    if not math.isfinite(_as_float32(scale)):  # the kernels read it from a float32 (geometry): inf would make NaN
        raise ValueError(f"scale={scale!r} is not finite as a float32 (the kernels apply it in float32)")
    block_size = check_int("storage.block_size", storage.block_size, minimum=1)
    head_dim = check_int("storage.head_dim", storage.head_dim, minimum=1)
    v_head_dim = check_int("storage.v_head_dim", storage.v_head_dim, minimum=1)
    if dk != head_dim:
        raise ValueError(f"q has Dk={dk} but storage.head_dim is {head_dim}")
    keys, values = storage.keys, storage.values
    if not isinstance(keys, mx.array):
        raise TypeError(f"storage.keys must be an mx.array [num_blocks, Hkv, block_size, width], got {type(keys).__name__}")
    if keys.ndim != 4:
        raise ValueError(f"storage.keys must be an mx.array [num_blocks, Hkv, block_size, width], got {list(keys.shape)}")
    num_blocks, hkv = keys.shape[0], keys.shape[1]
    if hkv < 1 or hq % hkv:
        raise ValueError(f"q has Hq={hq} heads, not a multiple of the pool's Hkv={hkv}")
    quant = storage.quantization
    if quant is None:
        _check_plane("keys", keys, (num_blocks, hkv, block_size, head_dim), dtype)
        _check_plane("values", values, (num_blocks, hkv, block_size, v_head_dim), dtype)
        planes = ()
    else:
        bits = getattr(quant, "bits", None)
        group = getattr(quant, "group_size", None)
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits not in QUANTIZED_BITS:
            raise ValueError(f"storage.quantization.bits must be one of {QUANTIZED_BITS}, got {bits!r}")
        bits = int(bits)
        group = check_int("storage.quantization.group_size", group, minimum=1)
        if group % (32 // bits):  # a packed word's dims must share one scale group
            raise ValueError(f"storage.quantization.group_size={group} must be a multiple of the "
                             f"{32 // bits} values a {bits}-bit word packs")
        for name, dim in (("head_dim", head_dim), ("v_head_dim", v_head_dim)):
            if dim % group:
                raise ValueError(f"storage.quantization.group_size={group} does not divide storage.{name}={dim}")
        pack = 32 // bits
        _check_plane("keys", keys, (num_blocks, hkv, block_size, head_dim // pack), mx.uint32)
        _check_plane("values", values, (num_blocks, hkv, block_size, v_head_dim // pack), mx.uint32)
        planes = tuple(
            _check_plane(name, getattr(storage, name), (num_blocks, hkv, block_size, dim // group), dtype)
            for name, dim in (("key_scales", head_dim), ("key_biases", head_dim),
                              ("value_scales", v_head_dim), ("value_biases", v_head_dim)))
    length = check_int("length", length, minimum=1)
    table = freeze(block_table)
    table.check_pool(num_blocks)
    if length < n:
        raise ValueError(f"length={length} is shorter than the n={n} query rows it must contain")
    if length > num_blocks * block_size:
        raise ValueError(f"length={length} exceeds the pool's capacity {num_blocks} blocks x {block_size}")
    needed = -(-length // block_size)
    if len(table) < needed:
        raise ValueError(f"block_table has {len(table)} blocks but length={length} needs {needed} "
                         f"of block_size {block_size}")
    if direct and length >= DIRECT_MAX_LENGTH:
        raise ValueError(f"length={length} must be below 2**24 for the direct kernel")
    return table, float(scale), planes, length


@lru_cache(maxsize=64)
def _as_float32(scale: float) -> float:
    """``scale`` rounded to float32 as the kernels' geometry holds it (on the CPU stream: no device wait)."""
    return mx.array(scale, dtype=mx.float32).astype(mx.float32, stream=mx.cpu).item()


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


def partition_size(length: int, threadgroups_per_partition: int, quantized: bool = False) -> int:
    """Tokens per partition: enough partitions for ``TARGET_THREADGROUPS`` threadgroups in all
    (``QUANTIZED_TARGET_THREADGROUPS`` for affine pools), each a whole number of ``PARTITION_QUANTUM``
    tokens (short sequences: one quantum, as the seed's 64); an affine pool's partition is at least
    ``QUANTIZED_MIN_PARTITION`` tokens, or the whole sequence (rounded up to the quantum) when shorter."""
    length = check_int("length", length, minimum=0)
    threadgroups_per_partition = check_int("threadgroups_per_partition", threadgroups_per_partition, minimum=1)
    if not isinstance(quantized, bool):
        raise TypeError(f"quantized must be a bool, got {type(quantized).__name__}")
    target = QUANTIZED_TARGET_THREADGROUPS if quantized else TARGET_THREADGROUPS
    wanted = max(1, target // threadgroups_per_partition)
    quanta = max(1, -(-length // (wanted * PARTITION_QUANTUM)))
    if quantized:
        whole = max(1, -(-length // PARTITION_QUANTUM))
        quanta = max(quanta, min(QUANTIZED_MIN_PARTITION // PARTITION_QUANTUM, whole))
    return quanta * PARTITION_QUANTUM


def partition_span(q: mx.array, storage: PagedStorage, length: int, partition: int | None) -> int:
    """The partition every arm uses: the caller's, or ``partition_size`` for this launch's threadgroups."""
    _, hq, n, _ = q.shape
    return _span_of(hq, n, storage.keys.shape[1], storage.v_head_dim, length, partition,
                    storage.quantization is not None)


def _span_of(hq: int, n: int, hk: int, dv: int, length: int, partition: int | None, quantized: bool) -> int:
    # A partition of ``length`` tokens or more is the one partition holding every token: every arm computes
    # the same numbers with it as with ``length``, so it is clamped there (the graph arm's arrays and the
    # kernels' geometry then never grow with a huge ``partition``).
    if partition is not None:
        return min(partition, max(length, 1))
    return partition_size(length, hk * -(-(hq // hk) * n // rows_per_threadgroup(hq, hk, n, dv)), quantized)


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


def set_lane_map(lanes_per_row: int | None = SIMD, wide_loads: bool = True) -> None:
    """Choose ``LANES_PER_ROW`` and ``WIDE_LOADS`` for later calls (sweeps, tests) and forget the
    launch shapes and plans remembered under the previous choice."""
    global LANES_PER_ROW, WIDE_LOADS
    lanes_per_row = check_choice("lanes_per_row", lanes_per_row, (None, SIMD, SIMD // 2))
    wide_loads = check_choice("wide_loads", wide_loads, (True, False))
    LANES_PER_ROW, WIDE_LOADS = lanes_per_row, wide_loads
    _partial_shape.cache_clear()
    _plan.cache_clear()


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
                   planes: Sequence[mx.array] = (), partition: int | None = None) -> Launch:
    """The partial pass's call (inputs, template, grid): one threadgroup per (partition, KV head, row chunk).
    ``table``: a ``BlockTable`` (its padded device copy is read) or an int32 mx.array."""
    _, hq, n, _ = q.shape
    span = partition_span(q, storage, length, partition)
    shape = _partial_shape(hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim, storage.block_size,
                           storage.dtype, _quant_key(storage.quantization), length, span, PAGED)
    table = table.padded if isinstance(table, BlockTable) else table
    return Launch(shape.spec, (q, storage.keys, storage.values, table, _geometry(scale, length, span), *planes),
                  shape.template, shape.grid, shape.threadgroup, shape.output_shapes, (mx.float32,))


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
    return None if quantization is None else (quantization.bits, quantization.group_size)


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


@lru_cache(maxsize=256)
def _partial_shape(hq: int, n: int, hk: int, dk: int, dv: int, block_size: int, dtype: mx.Dtype,
                   quant: tuple[int, int] | None, length: int, span: int, layout: Layout) -> "_LaunchShape":
    """The partial's launch without inputs (spec, template, grid, outputs): a pure function of the
    shapes, remembered because every layer of a decode step asks for the same one."""
    if layout not in (PAGED, KVQ4) or (layout.strided and quant is None):
        raise ValueError(f"layout must be PAGED or, for an affine cache, KVQ4; got {layout}")
    rows = rows_per_threadgroup(hq, hk, n, dv)
    chunks = -(-(hq // hk) * n // rows)
    # Partition buffers and the grid are rounded up to a power of two: a growing sequence then gets a
    # new launch shape (a retrace of the compiled pair) only when its partition count doubles.
    parts = padded_length(-(-length // span))
    lanes = _lane_map(dk, dv, dtype, None if quant is None else quant[0])
    template = [("HQ", hq), ("HK", hk), ("N", n), ("DK", dk), ("DV", dv), ("BS", block_size),
                ("R", rows), ("SG", SIMDGROUPS), ("TB", BATCH_TOKENS), ("LPR", lanes.lanes),
                ("VK", lanes.vk), ("VV", lanes.vv),
                ("STRIDED", layout.strided), ("ROUND_Q", layout.round_q), ("InT", dtype)]
    spec = PARTIAL
    if quant is not None:
        template += [("BITS", quant[0]), ("GROUP", quant[1]), ("PACK", 32 // quant[0])]
        spec = STRIDED_PARTIAL if layout.strided else QUANTIZED_PARTIAL
    threads = SIMD * SIMDGROUPS
    return _LaunchShape(spec, tuple(template), (threads * parts, hk * chunks, 1), (threads, 1, 1),
                        (partial_shape(hq, n, parts, dv),))


class _LaunchShape(NamedTuple):
    spec: KernelSpec
    template: tuple
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    output_shapes: tuple


MERGE_SLICES = 8  # threads per output element in the merge, each over every 8th partition


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
    for name, x in (("values", values), ("maxima", maxima), ("sums", sums)):
        if not isinstance(x, mx.array) or x.dtype != mx.float32:
            raise TypeError(f"{name} must be a float32 mx.array, got {getattr(x, 'dtype', type(x).__name__)}")
    if values.ndim != 4 or maxima.shape != values.shape[:3] or sums.shape != values.shape[:3]:
        raise ValueError(f"values must be [Hq, n, count, Dv] and maxima, sums [Hq, n, count]; got "
                         f"{list(values.shape)}, {list(maxima.shape)}, {list(sums.shape)}")
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
    hq, n, _, width = parts.shape
    dv = width - 2
    return Launch(MERGE, (parts, geometry), (("OutT", out_dtype), ("DV", dv)),
                  grid=(-(-dv // SIMD) * SIMD, hq * n * MERGE_SLICES, 1), threadgroup=(SIMD, MERGE_SLICES, 1),
                  output_shapes=((1, hq, n, dv),), output_dtypes=(out_dtype,))


def check_partition(partition) -> int | None:
    if partition is None:
        return None
    return check_int("partition", partition, minimum=1)


def paged_attention(q: mx.array, storage: PagedStorage, block_table, length: int, *, scale: float,
                    arm: str | None = None, partition: int | None = None) -> mx.array:
    """Causal attention of q's n <= 8 rows over the first ``length`` paged tokens (module docstring).

    ``partition``: tokens per partition; None chooses it from the length and the heads
    (``partition_size``). It partitions the softmax, so it is part of the numbers (rounding only).
    A partition of ``length`` tokens or more is the one partition, and is run as ``length``.
    """
    # A compiled arm's call whose arguments were validated before goes straight to its compiled pair
    # (impl.recent_calls: the checks cost the H200's host about a tenth of the call). A frozen BlockTable is
    # keyed by identity (it is immutable); a list or array takes the checks (freeze converts it once).
    key, plan = _RECENT.lookup(lambda: (resolve_arm(arm), array_key(q), _storage_key(storage),
                                        _table_key(block_table), scalar_key(length), scalar_key(scale),
                                        scalar_key(partition)))
    if plan is None:
        arm = resolve_arm(arm)
        table, scale, planes, length = _validate(q, storage, block_table, length, scale, direct=True)
        partition = check_partition(partition)
        if arm == "graph":
            return graph_attention(q, storage, table.device, length, scale,
                                   partition_span(q, storage, length, partition))
        # The table comes zero-padded to a power-of-two length (entries past length are never read), so the
        # compiled pair sees a new table shape only when the sequence doubles.
        _, hq, n, _ = q.shape
        pair, geometry = _plan(arm, hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim,
                               storage.block_size, storage.dtype, _quant_key(storage.quantization), length,
                               partition, scale)
        plan = _RECENT.remember(key, (pair, table.padded, geometry))
    else:
        planes = () if storage.quantization is None else tuple(getattr(storage, name) for name in _PLANE_NAMES)
    pair, padded, geometry = plan
    return pair(q, storage.keys, storage.values, padded, geometry, *planes)


_RECENT = RecentCalls(_CACHE_SIZE)  # validated (arm, arguments) -> (compiled pair, padded table, geometry)
_PLANE_NAMES = ("key_scales", "key_biases", "value_scales", "value_biases")


def _storage_key(storage) -> tuple:
    """What the checks read of ``storage``: its scalars, its planes' shapes and dtypes, its quantization."""
    quant = storage.quantization
    if quant is None:
        quantization = planes = None
    else:
        quantization = type(quant), scalar_key(quant.bits), scalar_key(quant.group_size)
        planes = tuple(array_key(getattr(storage, name)) for name in _PLANE_NAMES)
    return (type(storage), storage.dtype, scalar_key(storage.block_size), scalar_key(storage.head_dim),
            scalar_key(storage.v_head_dim), array_key(storage.keys), array_key(storage.values), quantization, planes)


def _table_key(block_table) -> BlockTable:
    if type(block_table) is not BlockTable:
        raise TypeError("only a frozen BlockTable is keyed")
    return block_table


@lru_cache(maxsize=256)
def _plan(arm: str, hq: int, n: int, hk: int, dk: int, dv: int, block_size: int, dtype: mx.Dtype,
          quant: tuple[int, int] | None, length: int, partition: int | None, scale: float):
    """(compiled partial + merge, device geometry) of one call's scalars. Every layer of a decode
    step makes the same call, so after the first only this lookup remains between the checks and
    the launch: the host cost per call on the H200 was more than the kernels' time at N = 32k."""
    span = _span_of(hq, n, hk, dv, length, partition, quant is not None)
    shape = _partial_shape(hq, n, hk, dk, dv, block_size, dtype, quant, length, span, PAGED)
    pair = _compiled_pair(arm, shape.spec, shape.template, shape.grid, shape.threadgroup, shape.output_shapes, dtype)
    return pair, _geometry(scale, length, span)


@lru_cache(maxsize=64)
def _compiled_pair(arm: str, spec: KernelSpec, template, grid, threadgroup, output_shapes, out_dtype: mx.Dtype):
    """Partial + merge as one ``mx.compile``d function per launch configuration.

    A call then replays the traced pair instead of building two custom-kernel primitives in
    Python (measured on the H200: 80-140 us of host time per call, more than the kernels' GPU
    time at N = 32k). The cache key is everything the trace closes over; mx.compile itself
    retraces when an input's shape or dtype changes.
    """

    def pair(*inputs):
        launch = Launch(spec, inputs, template, grid, threadgroup, output_shapes, (mx.float32,))
        (parts,) = launch.run(arm)
        (out,) = merge_launch(parts, inputs[4], out_dtype).run(arm)
        return out

    return mx.compile(pair)


# --- the graph arm ---------------------------------------------------------


def _load(storage: PagedStorage, which: str, physical: mx.array, slot: mx.array, round_kv: bool = True) -> mx.array:
    """Token rows [T, Hkv, D] in float32, as the kernel reads them (dequantized, then rounded to InT
    when ``round_kv``)."""
    plane = storage.keys if which == "keys" else storage.values
    rows = plane[physical, :, slot]  # [T, Hkv, width]
    if storage.quantization is None:
        return rows.astype(mx.float32)
    bits, group = storage.quantization.bits, storage.quantization.group_size
    prefix = "key" if which == "keys" else "value"
    scales = getattr(storage, f"{prefix}_scales")[physical, :, slot].astype(mx.float32)
    biases = getattr(storage, f"{prefix}_biases")[physical, :, slot].astype(mx.float32)
    pack = 32 // bits
    shifts = mx.arange(pack, dtype=mx.uint32) * bits
    codes = (rows[..., None] >> shifts) & ((1 << bits) - 1)  # element i of a word at bits i*BITS
    codes = codes.reshape(*rows.shape[:-1], -1).astype(mx.float32)
    scales, biases = mx.repeat(scales, group, axis=-1), mx.repeat(biases, group, axis=-1)
    values = scales * codes + biases
    return values.astype(storage.dtype).astype(mx.float32) if round_kv else values  # float(InT(s*q + b))


def _lane_dot(q: mx.array, k: mx.array, per_lane: int, lanes: int = SIMD) -> mx.array:
    """q [H, R, D] . k [H, T, D] -> [H, R, T] summed as the kernel sums: of the ``lanes`` that read a
    row, lane l owns dims (j * lanes + l) * per_lane + e and adds them in (j, e) order in float32,
    then the lane sums are added (the kernel's transpose-reduction adds them in a tree: rounding only).

    A plain float32 matmul would do for the algebra, but not for the precision:
    MLX's CPU GEMV was measured less accurate than the kernel's order (one
    D=256 case: 5.2 float32 ULP of max|s|, against 3.2 for a lane-split order and
    1.5 for NumPy/OpenBLAS), enough to fail float32 error-ratio gates the kernel
    passes, and MLX's CUDA float32 matmul rounds its inputs to TF32.
    """
    width = lanes * per_lane
    pad = -q.shape[-1] % width  # zero dims contribute exact zeros
    if pad:
        q = mx.pad(q, [(0, 0), (0, 0), (0, pad)])
        k = mx.pad(k, [(0, 0), (0, 0), (0, pad)])
    steps = q.shape[-1] // width
    q = q.reshape(*q.shape[:-1], steps, lanes, per_lane)
    k = k.reshape(*k.shape[:-1], steps, lanes, per_lane)
    sums = None  # [H, R, T, lanes]: each lane's running sum over its dims, in the kernel's order
    for j in range(steps):
        for e in range(per_lane):
            step = q[:, :, None, j, :, e] * k[:, None, :, j, :, e]
            sums = step if sums is None else sums + step
    return sums.sum(axis=-1)


def graph_attention(q: mx.array, storage: PagedStorage, table: mx.array, length: int, scale: float,
           span: int, layout: Layout = PAGED) -> mx.array:
    """The kernels' partial + merge in MLX ops (the module docstring says where it differs).
    A ``KVQ4`` layout passes its planes [1, Hkv, N, width] as one block of ``block_size`` N, table [0]."""
    _, hq, n, dk = q.shape
    hk, bs = storage.keys.shape[1], storage.block_size
    group, parts = hq // hk, -(-length // span)
    tokens = mx.arange(parts * span)
    # Pad positions re-read the last live token (never a slot past length) and are masked below.
    live = mx.minimum(tokens, length - 1)
    physical, slot = table[live // bs], live % bs
    k = _load(storage, "keys", physical, slot, layout.round_kv).transpose(1, 0, 2)  # [Hkv, T, Dk]
    v = _load(storage, "values", physical, slot, layout.round_kv).transpose(1, 0, 2)  # [Hkv, T, Dv]
    dv = v.shape[-1]

    # head h = kv * group + r; the kernel folds the scale into q as it loads it (in float32, or rounded
    # to q's dtype: a product of two values of the dtype is exact in float32, so this is MLX's q * scale)
    qf = q.astype(mx.float32) * mx.array(scale, dtype=mx.float32)
    if layout.round_q:
        qf = qf.astype(q.dtype).astype(mx.float32)
    qf = qf.reshape(hk, group * n, dk)
    bits = None if storage.quantization is None else storage.quantization.bits
    lanes = _lane_map(dk, dv, storage.dtype, bits)
    scores = _lane_dot(qf, k, lanes.vk, lanes.lanes)
    query = mx.arange(n).reshape(1, n, 1)
    visible = tokens.reshape(1, 1, -1) <= (length - n + query)  # bottom-right causal, [1, n, T]
    scores = mx.where(visible, scores.reshape(hk, group, n, -1), -mx.inf)
    scores = scores.reshape(hk, group * n, parts, span)

    # Partial: per partition max, normalizer and unnormalized values (float32).
    maximum = scores.max(axis=-1)  # [Hkv, group*n, parts]; -inf for an empty partition
    shift = mx.where(maximum == -mx.inf, 0.0, maximum)
    weights = mx.exp(scores - shift[..., None])  # masked: exp(-inf) = 0
    total = weights.sum(axis=-1)
    # Elementwise products summed over the partition's tokens, not a matmul: MLX's
    # CUDA backend computes float32 matmuls with TF32 inputs (10-bit mantissas).
    accum = (weights[..., None] * v.reshape(hk, 1, parts, span, dv)).sum(axis=-2)  # [Hkv, group*n, parts, Dv]

    # Merge: rescale partitions to the global max.
    overall = maximum.max(axis=-1, keepdims=True)
    rescale = mx.exp(maximum - overall)  # empty partitions: 0
    value = (accum * rescale[..., None]).sum(axis=-2)
    normalizer = (total * rescale).sum(axis=-1)
    out = (value / normalizer[..., None]).astype(q.dtype)
    return out.reshape(1, hq, n, dv)


# --- the gather + SDPA control ---------------------------------------------


def _gather(plane: mx.array, table: mx.array, length: int) -> mx.array:
    """Blocks of ``plane`` in table order as one [1, Hkv, length, width] sequence."""
    picked = mx.take(plane, table, axis=0)  # [blocks, Hkv, bs, width]
    hkv, width = plane.shape[1], plane.shape[3]
    return picked.transpose(1, 0, 2, 3).reshape(1, hkv, -1, width)[:, :, :length]


def paged_attention_gather(q: mx.array, storage: PagedStorage, block_table, length: int, *, scale: float,
                           mask=None) -> mx.array:
    """The seed's numerical control: gather the live blocks, (dequantize,) then MLX's fused SDPA.

    Any n; ``mask`` is passed to ``mx.fast.scaled_dot_product_attention``
    (None, ``"causal"`` for bottom-right causal, or an array). Quantized pools
    go through ``mx.dequantize`` (affine), whose output dtype is the scales'.
    """
    table, scale, _, length = _validate(q, storage, block_table, length, scale, direct=False)
    table = table.device[:-(-length // storage.block_size)]  # the live blocks
    k, v = _gather(storage.keys, table, length), _gather(storage.values, table, length)
    quant = storage.quantization
    if quant is not None:
        planes = [_gather(getattr(storage, name), table, length)
                  for name in ("key_scales", "key_biases", "value_scales", "value_biases")]
        k = mx.dequantize(k, planes[0], planes[1], group_size=quant.group_size, bits=quant.bits)
        v = mx.dequantize(v, planes[2], planes[3], group_size=quant.group_size, bits=quant.bits)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
