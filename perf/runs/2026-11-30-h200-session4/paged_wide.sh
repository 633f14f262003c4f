#!/usr/bin/env bash
# paged_wide (branch paged-wide): the plain paged partial's new loads and lane layouts on the H200.
# Variants: base = impl/paged_attention.py of main at 055778b (embedded below, imported as a separate
# module: its kernels get their own names); lpr32 = this branch's default (16-bit rows as 8-byte word
# loads, D256 as one 16-byte load per lane, 32 lanes per row); lpr16 = 16 lanes per row (two tokens per
# load; 16-byte loads at D128 16-bit); auto = 16 lanes when a row is <= 256 bytes, else 32.
# (1) PASS/FAIL per variant x dtype x shape: the cuda arm against the float64 oracle (factor 2 against
#     the naive low-precision baseline + floor, as the parity gate) and its distance to gather + SDPA.
# (2) per-call ms / TB/s / SDPA ratio at 32/8/D128/N32768 and 16/8/D256/N131072 bf16, 8 calls per eval,
#     median of 25 rounds, next to MLX SDPA on contiguous K/V (>1x = paged faster).
# Run from the repo root of branch paged-wide; ~1-2 min (NVRTC compiles). Output also in $OUT/paged_wide.txt.
set -uo pipefail
WORK=$(mktemp -d)
OUT=${OUT:-$WORK}
cat > "$WORK/paged_base.py" <<'PAGED_BASE_EOF'
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
  TypeError naming the argument.

Algorithm (every arm): the sequence is cut into partitions of ``partition`` tokens
(None: ``partition_size`` picks a multiple of 64 from N and the heads so that a launch has
about ``TARGET_THREADGROUPS`` threadgroups; short sequences get 64, the seed's size).
Partial pass: one threadgroup per (partition, KV head, chunk of up to ``MAX_ROWS`` of the
G * n query rows that read that head), so K/V are read once per KV head, not per query head
(GQA sharing, as kvq4 does). Its 4 SIMD groups take 8-token batches in turn; lane l owns dims
(j * 32 + l) * V + e of a row (V = 4 plain: one 4-vector load; quantized: V = 32 / bits, one
packed word, or less when a row has fewer than 32 words, so every lane works: ``_lanes``), so a
warp reads each K and V row as one coalesced run, and a batch issues its 8
K and 8 V rows together with the next batch's block-table entries read ahead. Scores are
float32 dot products (each lane's fma chain, then a transpose-reduction: 9 shuffles give 8
tokens' sums, lane l holding token l / 4's), q carrying ``scale`` (applied in float32 as q is
loaded); each batch makes one float32
online-softmax step (one exp per lane, one rescale); weights reach the V accumulation by
shuffle. Quantized pools dequantize on load: ``InT(scale * code + bias)`` rounded to the pool
dtype, then widened. The SIMD groups combine in threadgroup memory, rescaled to their common
max. Merge pass: per output element, rescale each partition by ``exp(max_p - max)`` and divide
the summed values by the summed normalizers, cast to q's dtype. An empty partition (rows of the
last partition beyond a query's causal limit) contributes max ``-inf``, sum 0: weight 0.

Arms: ``metal`` / ``cuda`` compile the bodies below (one source for both dialects; the
affine variant differs only in its two load blocks, as in the seed). Partial + merge run as
one ``mx.compile``d pair per launch shape (``_plan`` remembers it with the device [scale,
length, partition] geometry per call shape), and the block table's device copies come with the
``BlockTable`` (raw tables are converted once per distinct content, ``impl.block_table.freeze``): host-side work
cost more than the kernels at N = 32k on the H200 (55 us of Python per call there before; a
call with a BlockTable now costs ~3 us of Python here plus the compiled call). The table is
padded to a power of two and the partition buffers rounded up likewise, so a growing sequence
retraces rarely.
``graph`` (``_graph``) is the same computation in MLX ops: the same partitions and float32
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
call" property in float32 (``reports/runs/2026-11-29-h200-issue10/``). With nothing left to
contract, every instance rounds the same way (the property passed on the H200 afterwards:
``reports/runs/2026-11-29-h200-issue10-pass3/``).

The seed's body (one SIMD group per query head, row and 64-token partition) ran at 0.20 /
0.76 TB/s on the H200 where this one runs at the figures of ``perf/RESULTS.md``.

Gates: ``parity/test_paged_attention.py`` (error ratio against the float64
oracle ``reference.attention.attention_ref`` with FlashAttention's factor 2 and
the naive low-precision baseline, a KL gate through a fixed LM head; quantized
pools against the oracle on the dequantized K/V and against
``paged_attention_gather``); ``properties/test_paged_attention_props.py``
(Hypothesis: head layouts, head dims, block sizes, lengths across block and
partition edges, permuted tables, NaN-poisoned unused slots, KV4/KV8). The
CUDA arm's record on an NVIDIA H200: ``reports/runs/2026-11-29-h200-cuda/``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple, Protocol, runtime_checkable

import mlx.core as mx
import numpy as np

from impl.arms import resolve_arm
from impl.block_table import BlockTable, freeze, padded_length
from impl.checks import check_int, check_scale
from impl.kernels import KernelSpec, Launch

__all__ = [
    "DIRECT_MAX_QUERIES",
    "PAGED_DTYPES",
    "MAX_ROWS",
    "PARTITION_QUANTUM",
    "SIMDGROUPS",
    "TARGET_THREADGROUPS",
    "PagedStorage",
    "QUANTIZED_BITS",
    "merge_launch",
    "paged_attention",
    "paged_attention_gather",
    "partial_launch",
    "partition_size",
    "rows_per_threadgroup",
]

DIRECT_MAX_QUERIES = 8
SIMD = 32
SIMDGROUPS = 4  # SIMD groups per partial threadgroup: four 8-token batches in flight per round
# Tokens a SIMD group takes per step (a power of two dividing 32). 16 doubles the bytes each memory
# wait brings but needs 211-255 registers (nvcc -Xptxas -v) against 128-168, and quantized pools
# then use a stack frame: on the H200 it lost at every shape (perf/runs/2026-11-29-h200-session3/).
BATCH_TOKENS = 8
MAX_ROWS = 4  # query rows (GQA heads x query rows) one threadgroup serves: registers grow with it
PARTITION_QUANTUM = 64  # partitions are whole multiples of this many tokens
# Partitions are sized so that a launch has about this many threadgroups. An NVIDIA H200 has 132 SMs
# and holds 3-4 of these 128-thread groups per SM (136-168 registers per thread, nvcc -Xptxas -v),
# so 1024 is 2-3 waves; the H200 sweep found 512 / 1024 / 2048 within +-10% of each other
# (perf/runs/2026-11-29-h200-issue10/sweep*.txt). Fewer leaves SMs idle; more only adds partials.
TARGET_THREADGROUPS = 1024
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
"""

PARTIAL_SOURCE = """
  constexpr uint G = HQ / HK, ROWS = G * N, CHUNKS = (ROWS + R - 1) / R;
  constexpr uint JK = (DK + 32 * VK - 1) / (32 * VK), JV = (DV + 32 * VV - 1) / (32 * VV);
  const uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
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
        const uint d = (j * 32 + lane) * VK + e;
        qv[i][j * VK + e] = (r < ROWS && d < DK) ? float(q[(hq * N + query) * DK + d]) * geometry[0] : 0.0f;
      }
  }
  float m[R], l[R], o[R][JV * VV];
  for (uint i = 0; i < R; ++i) {
    m[i] = -INFINITY; l[i] = 0.0f;
    for (uint j = 0; j < JV * VV; ++j) o[i][j] = 0.0f;
  }
  // Each SIMD group takes batches of TB tokens (8 or 16), SG batches apart. Lane l's dims of a row
  // are (j * 32 + l) * V + e: a warp reads a K or V row as one coalesced run of vectors. A batch
  // issues its TB K rows and TB V rows together (2 * TB loads in flight per lane), and the block
  // table entries of the group's next batch are read one batch ahead, so a batch waits on one
  // memory latency: TB sets how many bytes each wait brings.
  constexpr uint SPREAD = 32 / TB;  // lanes that end up holding one token's score
  uint block[TB];
  for (uint k = 0; k < TB; ++k) {
    const uint t = first + sg * TB + k;
    block[k] = table[min(t, stop - 1) / BS];  // past the end: a live token's block, masked below
  }
  for (uint t0 = first + sg * TB; t0 < stop; t0 += SG * TB) {
    uint rows[TB];  // (physical block, head, slot) row index of each token
    for (uint k = 0; k < TB; ++k) {
      const uint t = min(t0 + k, stop - 1);  // past the end: re-read a live token, masked below
      rows[k] = (block[k] * HK + hk) * BS + t % BS;
    }
    for (uint k = 0; k < TB; ++k) {
      const uint t = t0 + SG * TB + k;
      if (t0 + SG * TB < stop) block[k] = table[min(t, stop - 1) / BS];
    }
    float dot[R][TB], vbuf[TB][JV * VV];
    for (uint k = 0; k < TB; ++k) {
      for (uint i = 0; i < R; ++i) dot[i][k] = 0.0f;
      for (uint j = 0; j < JK; ++j) {
        const uint d0 = (j * 32 + lane) * VK;
        if (d0 < DK) {
          const uint at = rows[k] * DK + d0;
          float kx[8];
          LOAD_KEY
          for (uint i = 0; i < R; ++i)
            for (uint e = 0; e < VK; ++e) dot[i][k] = fma(qv[i][j * VK + e], kx[e], dot[i][k]);
        }
      }
      for (uint j = 0; j < JV; ++j) {
        const uint d0 = (j * 32 + lane) * VV;
        float vx[8];
        for (uint e = 0; e < VV; ++e) vx[e] = 0.0f;
        if (d0 < DV) {
          const uint at = rows[k] * DV + d0;
          LOAD_VALUE
        }
        for (uint e = 0; e < VV; ++e) vbuf[k][j * VV + e] = vx[e];
      }
    }
    // Transpose-reduce the TB dots across the 32 lanes (TB - 1 + log2(SPREAD) shuffles, not TB x 5):
    // each step halves the tokens a lane keeps and adds its partner's share of them; lane l ends with
    // token l / SPREAD's score, as do the other lanes of its SPREAD (a + b == b + a exactly).
    const uint mine = t0 + lane / SPREAD;
    float p[R], factor[R], sum[R];
    for (uint i = 0; i < R; ++i) {
      float a[TB];
      for (uint k = 0; k < TB; ++k) a[k] = dot[i][k];
      for (uint keep = TB / 2, bit = 16; keep >= 1; keep /= 2, bit /= 2) {  // (not `half`: a Metal type)
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
      for (uint j = 0; j < JV * VV; ++j) o[i][j] *= factor[i];
      sum[i] = 0.0f;
    }
    for (uint k = 0; k < TB; ++k)
      for (uint i = 0; i < R; ++i) {
        const float w = simd_shuffle(p[i], k * SPREAD);  // masked tokens (past stop included) weigh 0
        sum[i] += w;
        for (uint j = 0; j < JV * VV; ++j) o[i][j] = fma(w, vbuf[k][j], o[i][j]);
      }
    for (uint i = 0; i < R; ++i) l[i] = fma(l[i], factor[i], sum[i]);
  }
  // Combine the SIMD groups' states in threadgroup memory (rescaled to their common max).
  threadgroup float osh[SG * R * DV];
  threadgroup float msh[SG * R], lsh[SG * R];
  for (uint i = 0; i < R; ++i) {
    for (uint j = 0; j < JV; ++j)
      for (uint e = 0; e < VV; ++e) {
        const uint d = (j * 32 + lane) * VV + e;
        if (d < DV) osh[(sg * R + i) * DV + d] = o[i][j * VV + e];
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
    const uint base = out_row[i] * count + part;
    out[base * DV + d] = value;
    if (d == 0) { normal[base * 2] = top; normal[base * 2 + 1] = total; }
  }
"""

# The partial body's LOAD_KEY / LOAD_VALUE blocks: `lanes` dims of a K or V row, from element `at`
# of `plane`, into the float registers `dest`. Plain pools: one 4-vector load when lanes == 4
# (the row length allows it), else element loads.
PLAIN_LOAD = """if ({lanes} == 4) {{
            const float4 w = float4(*(const DEVICE_MEM metal::vec<InT, 4>*)({plane} + at));
            {dest}[0] = w.x; {dest}[1] = w.y; {dest}[2] = w.z; {dest}[3] = w.w;
          }} else {{
            for (uint e = 0; e < {lanes}; ++e) {dest}[e] = float({plane}[at + e]);
          }}"""
# Affine KV4/KV8: a lane's `lanes` dims (a power of two dividing PACK) lie in one packed word and one
# scale group; each element is dequantized on load and rounded to the pool dtype:
# float(InT(scale * code + bias)).
AFFINE_LOAD = """{{
            const uint word = {plane}[at / PACK] >> ((at % PACK) * BITS);  // this lane's part of the word
            const float s = float({scales}[at / GROUP]), b = float({biases}[at / GROUP]);
            for (uint e = 0; e < {lanes}; ++e)
              {dest}[e] = float(InT(fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b)));
          }}"""
LOAD_PLAIN = {"LOAD_KEY": PLAIN_LOAD.format(plane="keys", dest="kx", lanes="VK"),
              "LOAD_VALUE": PLAIN_LOAD.format(plane="values", dest="vx", lanes="VV")}
LOAD_AFFINE = {"LOAD_KEY": AFFINE_LOAD.format(plane="keys", scales="ks", biases="kb", dest="kx", lanes="VK"),
               "LOAD_VALUE": AFFINE_LOAD.format(plane="values", scales="vs", biases="vb", dest="vx", lanes="VV")}

MERGE_SOURCE = """
  // One threadgroup per output row: 32 dims x 8 slices of the partitions, then a reduction.
  const uint d = thread_position_in_grid.x, slice = thread_position_in_threadgroup.y;
  const uint x = thread_position_in_threadgroup.x, row = threadgroup_position_in_grid.y;
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;  // partitions written (the buffers may hold more)
  threadgroup float tops[8];
  threadgroup float values[8][32], totals[8];
  float maximum = -INFINITY;
  for (uint part = slice; part < count; part += 8) maximum = max(maximum, normal[(row * count + part) * 2]);
  if (x == 0) tops[slice] = maximum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = 0; s < 8; ++s) maximum = max(maximum, tops[s]);
  float sum = 0, value = 0;
  for (uint part = slice; part < count; part += 8) {
    uint base = row * count + part;
    float weight = exp(normal[base * 2] - maximum);
    sum = fma(normal[base * 2 + 1], weight, sum);
    value = fma(d < DV ? parts[base * DV + d] : 0.0f, weight, value);
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


PARTIAL = KernelSpec("paged_attention_partial", ("q", "keys", "values", "table", "geometry"), ("out", "normal"),
                     _with_loads(LOAD_PLAIN), header=HEADER)
QUANTIZED_PARTIAL = KernelSpec("paged_attention_affine_partial",
                               ("q", "keys", "values", "table", "geometry", "ks", "kb", "vs", "vb"), ("out", "normal"),
                               _with_loads(LOAD_AFFINE), header=HEADER)
MERGE = KernelSpec("paged_attention_merge", ("parts", "normal", "geometry"), ("out",), MERGE_SOURCE)


# --- validation -------------------------------------------------------------


def _check_plane(name: str, array, shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    if not isinstance(array, mx.array):
        raise TypeError(f"storage.{name} must be an mx.array, got {type(array).__name__}")
    if tuple(array.shape) != shape:
        raise ValueError(f"storage.{name} must have shape {list(shape)}, got {list(array.shape)}")
    if array.dtype != dtype:
        raise ValueError(f"storage.{name} must have dtype {dtype}, got {array.dtype}")
    return array


def _validate(q, storage, block_table, length, scale, *, direct: bool):
    """Checks everything a launch depends on; returns (BlockTable, scale float, planes)."""
    if not isinstance(q, mx.array):
        raise TypeError(f"q must be an mx.array, got {type(q).__name__}")
    if q.ndim != 4 or q.shape[0] != 1:
        raise ValueError(f"q must have shape [1, Hq, n, Dk], got {list(q.shape)}")
    _, hq, n, dk = q.shape
    if direct and n > DIRECT_MAX_QUERIES:
        raise ValueError(f"q has n={n} query rows; the direct kernel takes at most {DIRECT_MAX_QUERIES}: "
                         "use paged_attention_gather (the gather + SDPA control) for longer prefills")
    if n < 1:
        raise ValueError("q must have at least one query row")
    scale = check_scale(scale)
    dtype = storage.dtype
    if dtype not in PAGED_DTYPES:
        raise ValueError(f"storage.dtype must be one of {PAGED_DTYPES}, got {dtype}")
    if q.dtype != dtype:
        raise ValueError(f"q has dtype {q.dtype} but the pool's dtype (storage.dtype) is {dtype}")
    block_size = check_int("storage.block_size", storage.block_size, minimum=1)
    head_dim = check_int("storage.head_dim", storage.head_dim, minimum=1)
    v_head_dim = check_int("storage.v_head_dim", storage.v_head_dim, minimum=1)
    if dk != head_dim:
        raise ValueError(f"q has Dk={dk} but storage.head_dim is {head_dim}")
    keys, values = storage.keys, storage.values
    if not isinstance(keys, mx.array) or keys.ndim != 4:
        raise ValueError("storage.keys must be an mx.array [num_blocks, Hkv, block_size, width]")
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
        if bits not in QUANTIZED_BITS:
            raise ValueError(f"storage.quantization.bits must be one of {QUANTIZED_BITS}, got {bits!r}")
        check_int("storage.quantization.group_size", group, minimum=1)
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
    if direct and length >= 2**24:  # the kernels read length from a float32
        raise ValueError(f"length={length} must be below 2**24 for the direct kernel")
    return table, float(scale), planes


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
    rows = (hq // hkv) * n
    fit = THREADGROUP_MEMORY // (4 * SIMDGROUPS * (v_head_dim + 2))
    if fit < 1:
        raise ValueError(f"storage.v_head_dim={v_head_dim} is too large for the direct kernel's "
                         f"{THREADGROUP_MEMORY}-byte combine buffers")
    return max(1, min(rows, MAX_ROWS, fit))


def partition_size(length: int, threadgroups_per_partition: int) -> int:
    """Tokens per partition: enough partitions for ``TARGET_THREADGROUPS`` threadgroups in all, each a
    whole number of ``PARTITION_QUANTUM`` tokens (short sequences: one quantum, as the seed's 64)."""
    wanted = max(1, TARGET_THREADGROUPS // threadgroups_per_partition)
    quanta = -(-length // (wanted * PARTITION_QUANTUM))
    return max(1, quanta) * PARTITION_QUANTUM


def _span(q: mx.array, storage: PagedStorage, length: int, partition: int | None) -> int:
    """The partition every arm uses: the caller's, or ``partition_size`` for this launch's threadgroups."""
    _, hq, n, _ = q.shape
    return _span_of(hq, n, storage.keys.shape[1], storage.v_head_dim, length, partition)


def _span_of(hq: int, n: int, hk: int, dv: int, length: int, partition: int | None) -> int:
    if partition is not None:
        return partition
    return partition_size(length, hk * -(-(hq // hk) * n // rows_per_threadgroup(hq, hk, n, dv)))


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
    span = _span(q, storage, length, partition)
    shape = _partial_shape(hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim, storage.block_size,
                           storage.dtype, _quant_key(storage.quantization), length, span)
    table = table.padded if isinstance(table, BlockTable) else table
    return Launch(shape.spec, (q, storage.keys, storage.values, table, _geometry(scale, length, span), *planes),
                  shape.template, shape.grid, shape.threadgroup, shape.output_shapes, (mx.float32, mx.float32))


def _quant_key(quantization) -> tuple[int, int] | None:
    return None if quantization is None else (quantization.bits, quantization.group_size)


@lru_cache(maxsize=256)
def _partial_shape(hq: int, n: int, hk: int, dk: int, dv: int, block_size: int, dtype: mx.Dtype,
                   quant: tuple[int, int] | None, length: int, span: int) -> "_LaunchShape":
    """The partial's launch without inputs (spec, template, grid, outputs): a pure function of the
    shapes, remembered because every layer of a decode step asks for the same one."""
    rows = rows_per_threadgroup(hq, hk, n, dv)
    chunks = -(-(hq // hk) * n // rows)
    # Partition buffers and the grid are rounded up to a power of two: a growing sequence then gets a
    # new launch shape (a retrace of the compiled pair) only when its partition count doubles.
    parts = padded_length(-(-length // span))
    bits = None if quant is None else quant[0]
    template = [("HQ", hq), ("HK", hk), ("N", n), ("DK", dk), ("DV", dv), ("BS", block_size),
                ("R", rows), ("SG", SIMDGROUPS), ("TB", BATCH_TOKENS),
                ("VK", _lanes(dk, bits)), ("VV", _lanes(dv, bits)),
                ("InT", dtype)]
    spec = PARTIAL
    if quant is not None:
        template += [("BITS", quant[0]), ("GROUP", quant[1]), ("PACK", 32 // quant[0])]
        spec = QUANTIZED_PARTIAL
    threads = SIMD * SIMDGROUPS
    return _LaunchShape(spec, tuple(template), (threads * parts, hk * chunks, 1), (threads, 1, 1),
                        ((hq, n, parts, dv), (hq, n, parts, 2)))


class _LaunchShape(NamedTuple):
    spec: KernelSpec
    template: tuple
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    output_shapes: tuple


MERGE_SLICES = 8  # threads per output element in the merge, each over every 8th partition


def merge_launch(parts: mx.array, normal: mx.array, geometry: mx.array, out_dtype: mx.Dtype) -> Launch:
    """The merge's call: ``geometry`` is the partial's [scale, length, partition] (it counts the partitions)."""
    hq, n, _, dv = parts.shape
    return Launch(MERGE, (parts, normal, geometry), (("OutT", out_dtype), ("DV", dv)),
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
    """
    arm = resolve_arm(arm)
    table, scale, planes = _validate(q, storage, block_table, length, scale, direct=True)
    partition = check_partition(partition)
    if arm == "graph":
        return _graph(q, storage, table.device, length, scale, _span(q, storage, length, partition))
    # The table comes zero-padded to a power-of-two length (entries past length are never read), so the
    # compiled pair sees a new table shape only when the sequence doubles.
    _, hq, n, _ = q.shape
    pair, geometry = _plan(arm, hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim,
                           storage.block_size, storage.dtype, _quant_key(storage.quantization), length,
                           partition, scale)
    return pair(q, storage.keys, storage.values, table.padded, geometry, *planes)


@lru_cache(maxsize=256)
def _plan(arm: str, hq: int, n: int, hk: int, dk: int, dv: int, block_size: int, dtype: mx.Dtype,
          quant: tuple[int, int] | None, length: int, partition: int | None, scale: float):
    """(compiled partial + merge, device geometry) of one call's scalars. Every layer of a decode
    step makes the same call, so after the first only this lookup remains between the checks and
    the launch: the host cost per call on the H200 was more than the kernels' time at N = 32k."""
    span = _span_of(hq, n, hk, dv, length, partition)
    shape = _partial_shape(hq, n, hk, dk, dv, block_size, dtype, quant, length, span)
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
        launch = Launch(spec, inputs, template, grid, threadgroup, output_shapes, (mx.float32, mx.float32))
        parts, normal = launch.run(arm)
        (out,) = merge_launch(parts, normal, inputs[4], out_dtype).run(arm)
        return out

    return mx.compile(pair)


# --- the graph arm ---------------------------------------------------------


def _load(storage: PagedStorage, which: str, physical: mx.array, slot: mx.array) -> mx.array:
    """Token rows [T, Hkv, D] in float32, as the kernel reads them (dequantized and rounded to InT)."""
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
    return (scales * codes + biases).astype(storage.dtype).astype(mx.float32)  # float(InT(s*q + b))


def _lane_dot(q: mx.array, k: mx.array, per_lane: int) -> mx.array:
    """q [H, R, D] . k [H, T, D] -> [H, R, T] summed as the kernel sums: lane l owns dims
    (j * 32 + l) * per_lane + e and adds them in (j, e) order in float32, then the 32 lane sums
    are added (the kernel's transpose-reduction adds them in a tree: rounding only).

    A plain float32 matmul would do for the algebra, but not for the precision:
    MLX's CPU GEMV was measured less accurate than the kernel's order (one
    D=256 case: 5.2 float32 ULP of max|s|, against 3.2 for a lane-split order and
    1.5 for NumPy/OpenBLAS), enough to fail float32 error-ratio gates the kernel
    passes, and MLX's CUDA float32 matmul rounds its inputs to TF32.
    """
    width = SIMD * per_lane
    pad = -q.shape[-1] % width  # zero dims contribute exact zeros
    if pad:
        q = mx.pad(q, [(0, 0), (0, 0), (0, pad)])
        k = mx.pad(k, [(0, 0), (0, 0), (0, pad)])
    steps = q.shape[-1] // width
    q = q.reshape(*q.shape[:-1], steps, SIMD, per_lane)
    k = k.reshape(*k.shape[:-1], steps, SIMD, per_lane)
    lanes = None  # [H, R, T, 32]: each lane's running sum over its dims, in the kernel's order
    for j in range(steps):
        for e in range(per_lane):
            step = q[:, :, None, j, :, e] * k[:, None, :, j, :, e]
            lanes = step if lanes is None else lanes + step
    return lanes.sum(axis=-1)


def _graph(q: mx.array, storage: PagedStorage, table: mx.array, length: int, scale: float,
           span: int) -> mx.array:
    """The kernels' partial + merge in MLX ops (the module docstring says where it differs)."""
    _, hq, n, dk = q.shape
    hk, bs = storage.keys.shape[1], storage.block_size
    group, parts = hq // hk, -(-length // span)
    tokens = mx.arange(parts * span)
    # Pad positions re-read the last live token (never a slot past length) and are masked below.
    live = mx.minimum(tokens, length - 1)
    physical, slot = table[live // bs], live % bs
    k = _load(storage, "keys", physical, slot).transpose(1, 0, 2)  # [Hkv, T, Dk]
    v = _load(storage, "values", physical, slot).transpose(1, 0, 2)  # [Hkv, T, Dv]
    dv = v.shape[-1]

    # head h = kv * group + r; the kernel folds the scale into q as it loads it
    qf = q.astype(mx.float32).reshape(hk, group * n, dk) * mx.array(scale, dtype=mx.float32)
    bits = None if storage.quantization is None else storage.quantization.bits
    scores = _lane_dot(qf, k, _lanes(dk, bits))
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
    table, scale, _ = _validate(q, storage, block_table, length, scale, direct=False)
    table = table.device[:-(-length // storage.block_size)]  # the live blocks
    k, v = _gather(storage.keys, table, length), _gather(storage.values, table, length)
    quant = storage.quantization
    if quant is not None:
        planes = [_gather(getattr(storage, name), table, length)
                  for name in ("key_scales", "key_biases", "value_scales", "value_biases")]
        k = mx.dequantize(k, planes[0], planes[1], group_size=quant.group_size, bits=quant.bits)
        v = mx.dequantize(v, planes[2], planes[3], group_size=quant.group_size, bits=quant.bits)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
PAGED_BASE_EOF
cat > "$WORK/check.py" <<'PAGED_CHECK_EOF'
"""paged_wide device check: correctness of each layout variant's cuda arm, then timings (see the .sh)."""
import importlib.util, math, os, statistics, sys, time
import numpy as np
import mlx.core as mx
import impl.paged_attention as P
from impl.block_table import BlockTable
from properties import strategies as sts
from reference import metrics
from perf.shapes import DecodeShape
from perf.cases import _pool, _dense_qkv

BASE_PATH = sys.argv[1]
spec = importlib.util.spec_from_file_location("paged_base", BASE_PATH)
B = importlib.util.module_from_spec(spec); spec.loader.exec_module(B)

# variant name -> (module, set_lane_map args or None for the embedded main-branch module)
DRY = os.environ.get("PAGED_WIDE_DRY") == "1"  # CPU dry run of this script: graph arm, small shapes
ARM = "graph" if DRY else "cuda"
VARIANTS = {"base(main 055778b)": (B, None), "lpr32(default)": (P, (32, True)),
            "lpr16": (P, (16, True)), "auto(16 if row<=256B)": (P, (None, True))}
print(f"MLX {mx.__version__}, device {mx.default_device()}")
fails = 0

# ---- (1) correctness: cuda arm vs the float64 oracle (FlashAttention's factor 2 against the naive
# low-precision baseline + one output ULP / the float32 floor, as parity/test_paged_attention.py) and
# vs the gather + SDPA control (max abs difference printed).
GEOMS = [  # (Hq, Hkv, Dk, Dv, block, length, n, partition)
    (32, 8, 128, 128, 16, 1000, 1, None), (32, 8, 128, 128, 32, 129, 4, 64), (32, 8, 128, 128, 16, 4097, 1, None),
    (16, 8, 256, 256, 16, 3000, 1, None), (16, 8, 256, 256, 32, 65, 4, 64), (8, 1, 256, 256, 16, 1025, 1, None),
    (8, 1, 128, 128, 32, 191, 4, 64), (8, 1, 64, 64, 16, 63, 1, None), (32, 8, 64, 64, 32, 128, 4, 64),
    (16, 8, 64, 64, 16, 700, 4, None), (16, 8, 128, 128, 16, 64, 1, 64),
]
CHECKED = {"bfloat16": GEOMS, "float16": GEOMS[1:11:2], "float32": GEOMS[::3]}  # NVRTC compiles cost ~1 s each
for vname, (mod, layout) in VARIANTS.items():
    if layout is None or layout[0] is None:
        continue  # base: main's kernel (its GPU record stands); auto: a mix of the lpr32 / lpr16 kernels
    P.set_lane_map(*layout)
    for dtype, geoms in CHECKED.items():
        for (hq, hkv, dk, dv, bs, length, n, part) in geoms:
            case = sts.build_paged_case(np.random.default_rng(1), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                                        block_size=bs, length=length, spare_blocks=3, extra_table=1, seed=1)
            out = mod.paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale,
                                      arm=ARM, partition=part)
            mx.eval(out)
            ref, base = sts.paged_oracles(case)
            floor, _ = sts.error_ratio_floor(case, ref)
            r = metrics.error_ratio(metrics.to_numpy(out), ref, base, factor=2.0, floor=floor)
            ctl = P.paged_attention_gather(case.q_mx, case.storage, case.table, case.length, scale=case.scale,
                                           mask="causal")
            dctl = float(np.max(np.abs(metrics.as_f64(out) - metrics.as_f64(ctl))))
            ok = r.passed and np.all(np.isfinite(metrics.as_f64(out)))
            fails += not ok
            t = dict(P._partial_shape(hq, n, hkv, dk, dv, bs, case.storage.dtype, None, length,
                                      P._span_of(hq, n, hkv, dv, length, part), P.PAGED).template) if layout else {}
            print(f"{'PASS' if ok else 'FAIL'} {vname:22s} {dtype:8s} Hq{hq}/Hkv{hkv} D{dk} bs{bs} N{length} n{n} "
                  f"part={part} LPR{t.get('LPR', 32)} VK{t.get('VK', '-')}: err {r.error:.3g} <= bound {r.bound:.3g} "
                  f"(baseline {r.baseline_error:.3g}); |out - gather control| {dctl:.3g}")
print(f"correctness: {fails} FAIL")

# ---- (2) timings: per call, 8 calls per mx.eval, median of 25 rounds after 5 warm-up rounds,
# host Python included (as perf/RESULTS.md); MLX SDPA on the contiguous K/V as the control.
CALLS, ROUNDS, WARM = 8, 25, 5


def per_call(fn):
    for _ in range(WARM):
        mx.eval([fn() for _ in range(CALLS)])
    times = []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        mx.eval([fn() for _ in range(CALLS)])
        times.append((time.perf_counter() - t) / CALLS)
    return statistics.median(times)


SHAPES = [DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)]
if DRY:
    SHAPES, ROUNDS, WARM = [DecodeShape(32, 8, 1, 128, 1024), DecodeShape(16, 8, 1, 256, 1024)], 2, 1
for s in SHAPES:
    mx.random.seed(0)
    q, k, v = _dense_qkv(s)
    storage, table = _pool(k, v, s, 0, None)
    mx.eval(q, k, v, storage.keys, storage.values)
    table = BlockTable.of(table)
    scale = 1.0 / math.sqrt(s.head_dim)
    nbytes = 2 * s.hkv * s.length * s.head_dim * 2 + 2 * s.hq * s.head_dim * 2 + 4 * (s.length // 16)
    sdpa = per_call(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale))
    print(f"\n{s} bf16: {nbytes / 1e6:.1f} MB per call; MLX SDPA (contiguous K/V) {sdpa * 1e3:.4f} ms "
          f"({nbytes / sdpa / 1e12:.2f} TB/s)")
    for vname, (mod, layout) in VARIANTS.items():
        if layout is not None:
            P.set_lane_map(*layout)
        t = per_call(lambda: mod.paged_attention(q, storage, table, s.length, scale=scale, arm=ARM))
        print(f"  {vname:22s} {t * 1e3:.4f} ms  {nbytes / t / 1e12:.2f} TB/s  SDPA/paged = {sdpa / t:.2f}x")
P.set_lane_map()
sys.exit(1 if fails else 0)
PAGED_CHECK_EOF
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
git log --oneline -1 2>/dev/null || true
python3 "$WORK/check.py" "$WORK/paged_base.py" 2>&1 | tee "$OUT/paged_wide.txt"
exit "${PIPESTATUS[0]}"
