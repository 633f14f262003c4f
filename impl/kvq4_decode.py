"""One-row decode attention over a 4-bit, group-64 affine KV cache, head dim 256.

Contract (the seed's ``kvq4DecodeSdpa``, @mlx-bun/inference 1.0.0
``kernels/attention/kvq4-decode.ts``)::

    kvq4_decode(q, keys, values, *, scale, block=None, arm=None) -> [1, H, 1, 256]

* ``q`` [1, H, 1, 256]: one query row (B = 1, L = 1), float32 / float16 /
  bfloat16 (T). Output in T.
* ``keys`` / ``values``: ``QuantizedKV(packed, scales, biases)`` or a plain
  ``(packed, scales, biases)`` tuple, the layout of ``mx.quantize(x,
  group_size=64, bits=4)`` for x [1, KVH, N, 256]: ``packed`` uint32 [1, KVH,
  N, 32] (dim d is the 4-bit code at bits ``4 * (d % 8)`` of word ``d // 8``),
  ``scales`` / ``biases`` [1, KVH, N, 4] in T. Any of the six planes may be a
  strided view (a slice of a larger cache along heads or tokens, a transpose):
  the kernel reads each plane through its own ``*_strides``, never copying.
  N >= 1 is a runtime argument (read from ``kp_shape``): one compiled kernel
  serves every cache length.
* GQA: H = KVH * REP with an even REP (the threadgroup splits its query heads
  into 2 head groups); query head h reads KV head ``h // REP``.
* ``scale``: finite real; ``q * scale`` is formed in T (MLX's op) before the
  kernel, as the seed does.
* ``block``: tokens per threadgroup, any int >= 1; it partitions the softmax,
  so it is part of the numbers. ``None`` (the default) takes
  ``default_block(N, KVH)``: enough threadgroups to fill the device several
  times (``WAVES`` per compute unit), rounded to whole batches of every
  sub-chunk, between 64 and the seed's 512 (measured on an M4 Pro). Every arm
  uses the same rule, so on one machine the arms agree on the partition.
* ``kvq4_decode_eligible(q, keys, group_size, bits)`` says whether the seed's
  conditions hold (B = L = 1, D = 256, bits 4, group 64, an even GQA factor).
  ``kvq4_decode`` refuses anything else with a ValueError / TypeError naming
  the argument, before any launch. The compiled arms also need the combine
  buffers (``4 * (SUB * REP * 256 + 2 * SUB * REP)`` bytes of threadgroup
  memory) to fit the device: Metal's 32 KiB allows REP <= 6, CUDA's 48 KiB of
  static shared memory REP <= 10; the graph arm has no such bound. (The
  merge's 16.1 KiB, ``MERGE_THREADGROUP_BYTES``, does not depend on REP.)

Algorithm (every arm): a threadgroup is one KV head x one block of ``block``
tokens: 8 SIMD groups = SUB = 4 token sub-chunks of ceil(block / 4) tokens x
2 head groups of REP / 2 query heads. Each lane owns 8 of the 256 dims (one
packed word) and dequantizes on load in float32, ``fma(scale, code, bias)``
(never rounded to T). A SIMD group walks its sub-chunk in batches of
``BATCH`` = 8 tokens: it issues the batch's loads together (several tokens'
reads in flight), each lane forms its 8-term fma dot of every token with every
head (q carries the scale), and a transposed sum over the 32 lanes (xor 16:
4 shuffles, xor 8: 2, xor 4: 1, then xor 2 and xor 1: 9 shuffles for 8
scores) leaves lane l with the score of token l / 4. Slots past the
sub-chunk's end (a ragged last batch) score -inf. A float32 online softmax
then updates once per batch: the batch max, one ``exp`` per lane for its
token and one for the rescale (a batch with nothing live yet subtracts 0,
never -inf - -inf); each lane keeps the running sum of its slot, and the 8
slots are summed when the sub-chunk ends; the V accumulation takes token j's
weight from lane 4j. The 4 sub-chunks combine in threadgroup memory (rescaled
to their max; a sub-chunk with no token has max -inf and is skipped), then a
merge kernel (one threadgroup per query head, ``MERGE_WARPS`` SIMD groups
taking the blocks in turn, then summed in threadgroup memory) combines the
blocks the same way and divides, casting to T.

Arms: ``metal`` / ``cuda`` compile the two bodies below, the seed's algorithm
with two port fixes that keep its Metal semantics (the last-axis stride of
every plane is read, the seed assumed 1; biases are read through their own
strides, the seed used the scales' strides for both) and the batched loop and
parallel merge above (the seed scored one token per step with a full
``simd_sum`` and two ``exp`` per head, and merged with one thread per output
element looping over every block). ``graph`` is the same computation in MLX
ops: same blocks, sub-chunks, batches of 8 with one float32 online-softmax
update each (one batch of every sub-chunk per step), per-slot running sums,
combine and merge. Its liberties only change float32 rounding:
``scale * code + bias`` is two ops (exactly the fma for float16/bfloat16
scales, whose product with a 4-bit code is exact in float32), ``l * factor +
p`` likewise; the score's 8-term and 32-lane sums, the sum of a batch's 8
weighted V rows (the kernel's fma chain), the sum of the 8 slots and the
merge's sums over blocks are MLX's sums, in MLX's order (of elementwise float32
products: a float32 matmul would run in TF32 on MLX's CUDA backend, see
``parity/test_kvq4_decode.py::test_float32_matmul_precision``). In both, a
dead slot re-reads the sub-chunk's last token (always a cached token) and is
masked to weight 0.

Gates: ``parity/test_kvq4_decode.py`` (error ratio against the float64 oracle
``reference.attention.attention_ref`` on the K/V as the kernel dequantizes
them, with the naive computation in T on ``mx.dequantize``-rounded K/V as
baseline; KL through a fixed LM head against ``mx.dequantize`` +
``mx.fast.scaled_dot_product_attention``); ``properties/test_kvq4_decode_props.py``
(Hypothesis: GQA 2..8, N across block, sub-chunk and batch edges, blocks
64..512, strided and transposed planes, the default block rule, bad input).
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx

from impl.arms import metal_available, resolve_arm
from impl.checks import check_int, check_scale
from impl.kernels import KernelSpec, Launch

__all__ = [
    "BATCH",
    "BITS",
    "DTYPES",
    "GROUP_SIZE",
    "HEAD_DIM",
    "KV4_DECODE_BLOCK",
    "MERGE_THREADGROUP_BYTES",
    "SUB",
    "THREADGROUP_MEMORY",
    "WAVES",
    "QuantizedKV",
    "default_block",
    "device_cores",
    "kvq4_decode",
    "kvq4_decode_eligible",
    "max_gqa_factor",
    "merge_launch",
    "partial_launch",
    "threadgroup_bytes",
]

HEAD_DIM = 256
BITS = 4
GROUP_SIZE = 64
WORDS = HEAD_DIM * BITS // 32  # packed uint32 words per row: one per lane
GROUPS = HEAD_DIM // GROUP_SIZE
SUB = 4  # token sub-chunks per threadgroup
BATCH = 8  # tokens a SIMD group scores per online-softmax step
KV4_DECODE_BLOCK = 512  # the seed's block (measured on an M4 Pro): the largest the default rule picks
MIN_BLOCK = 2 * SUB * BATCH  # the smallest it picks: every SIMD group gets at least two batches
SIMD = 32
# Default split (``default_block``): about WAVES threadgroups per compute unit. A partial threadgroup's threads
# hold 118-205 registers (nvcc 13, sm_90: 118 at REP 2, 128 at REP 4, 176 at REP 8), so an H200 SM keeps 1-2
# resident: 8 per SM is 4-8 rounds, enough that the last round's imbalance is small, while each SIMD group still
# streams whole batches.
WAVES = 8
# Compute units per backend (MLX's device_info reports none): NVIDIA H200's 132 SMs, the device this rule was
# tuned for; an M4 Pro's 20 GPU cores, the seed's device. Without a GPU (graph arm on CPU) the CUDA figure.
DEVICE_CORES = {"cuda": 132, "metal": 20}
MERGE_WARPS = 16  # SIMD groups of a merge threadgroup (one threadgroup per query head)
DTYPES = (mx.bfloat16, mx.float16, mx.float32)
# Threadgroup memory a compiled arm may declare (bytes): Apple GPUs' limit, CUDA's static __shared__ limit.
THREADGROUP_MEMORY = {"metal": 32 * 1024, "cuda": 48 * 1024}


class QuantizedKV(NamedTuple):
    """One quantized K or V plane set, as ``mx.quantize`` returns it (plus its parameters)."""

    packed: mx.array  # uint32 [1, KVH, N, 32]
    scales: mx.array  # T [1, KVH, N, 4]
    biases: mx.array  # T [1, KVH, N, 4]
    group_size: int = GROUP_SIZE
    bits: int = BITS


PARTIAL_SOURCE = """
  const uint lane = thread_index_in_simdgroup;
  const uint sg = simdgroup_index_in_threadgroup;
  const uint hk = threadgroup_position_in_grid.y, block = threadgroup_position_in_grid.x;
  const uint hg = sg % 2u, sc = sg / 2u;              // head group, token sub-chunk
  constexpr uint HPG = REP / 2;                       // heads per group
  static_assert(BATCH == 8, "the transposed lane sum hands 8 tokens to 32 lanes, 4 lanes each");
  const uint N = kp_shape[2];                         // cached positions: an argument, not a specialization
  const uint t0 = block * (uint)BLOCK, tEnd = metal::min(N, t0 + (uint)BLOCK);
  const uint sub = ((uint)BLOCK + (uint)SUB - 1u) / (uint)SUB;
  const uint s0 = t0 + sc * sub, s1 = metal::min(tEnd, s0 + sub);
  // Queries (pre-scaled), 8 dims per lane.
  float qv[HPG][8];
  #pragma clang loop unroll(full)
  for (uint h = 0; h < HPG; ++h)
    #pragma clang loop unroll(full)
    for (uint i = 0; i < 8u; ++i) qv[h][i] = float(q[(hk * (uint)REP + hg * HPG + h) * (uint)D + lane * 8u + i]);
  // Per head: the running max m (the same in every lane), this lane's share of the running sum l (the tokens of
  // its batch slot, lane / 4: the 4 lanes of a slot hold the same share) and the accumulator o of its 8 dims.
  float m[HPG], l[HPG], o[HPG][8];
  #pragma clang loop unroll(full)
  for (uint h = 0; h < HPG; ++h) { m[h] = -INFINITY; l[h] = 0.0f; for (uint i = 0; i < 8u; ++i) o[h][i] = 0.0f; }
  const uint g = lane / 8u;                           // this lane's 64-dim group
  const uint slot = lane / 4u;                        // the token of a batch whose score this lane ends with
  const bool up16 = (lane & 16u) != 0u, up8 = (lane & 8u) != 0u, up4 = (lane & 4u) != 0u;
  // Token t of a plane is at offset + t * row stride; the offset holds the head and this lane's word / group.
  // The offsets walk the sub-chunk: they start at token s0 and advance one row per token.
  const ulong kpr = (ulong)kp_strides[2], vpr = (ulong)vp_strides[2], ksr = (ulong)ks_strides[2];
  const ulong kbr = (ulong)kb_strides[2], vsr = (ulong)vs_strides[2], vbr = (ulong)vb_strides[2];
  ulong kpt = (ulong)hk * (ulong)kp_strides[1] + (ulong)lane * (ulong)kp_strides[3] + (ulong)s0 * kpr;
  ulong vpt = (ulong)hk * (ulong)vp_strides[1] + (ulong)lane * (ulong)vp_strides[3] + (ulong)s0 * vpr;
  ulong kst = (ulong)hk * (ulong)ks_strides[1] + (ulong)g * (ulong)ks_strides[3] + (ulong)s0 * ksr;
  ulong kbt = (ulong)hk * (ulong)kb_strides[1] + (ulong)g * (ulong)kb_strides[3] + (ulong)s0 * kbr;
  ulong vst = (ulong)hk * (ulong)vs_strides[1] + (ulong)g * (ulong)vs_strides[3] + (ulong)s0 * vsr;
  ulong vbt = (ulong)hk * (ulong)vb_strides[1] + (ulong)g * (ulong)vb_strides[3] + (ulong)s0 * vbr;
  for (uint t = s0; t < s1; t += (uint)BATCH) {
    // The batch's loads, all issued before any is used. The offsets stop at the sub-chunk's last token: a slot
    // past it re-reads that token (in bounds) and its score is masked below.
    uint kword[BATCH], vword[BATCH];
    float kscale[BATCH], kbias[BATCH], vscale[BATCH], vbias[BATCH];
    #pragma clang loop unroll(full)
    for (uint j = 0; j < (uint)BATCH; ++j) {
      kword[j] = kp[kpt];
      vword[j] = vp[vpt];
      kscale[j] = float(ks[kst]); kbias[j] = float(kb[kbt]);
      vscale[j] = float(vs[vst]); vbias[j] = float(vb[vbt]);
      if (t + j + 1u < s1) { kpt += kpr; vpt += vpr; kst += ksr; kbt += kbr; vst += vsr; vbt += vbr; }
    }
    // This lane's 8-term partial dot of every token with every head.
    float part[HPG][BATCH];
    #pragma clang loop unroll(full)
    for (uint j = 0; j < (uint)BATCH; ++j) {
      float kr[8];
      #pragma clang loop unroll(full)
      for (uint i = 0; i < 8u; ++i) kr[i] = metal::fma(kscale[j], float((kword[j] >> (4u * i)) & 15u), kbias[j]);
      #pragma clang loop unroll(full)
      for (uint h = 0; h < HPG; ++h) {
        float acc = 0.0f;
        #pragma clang loop unroll(full)
        for (uint i = 0; i < 8u; ++i) acc = metal::fma(qv[h][i], kr[i], acc);
        part[h][j] = acc;
      }
    }
    float p[HPG];                                   // exp(score - max) of this lane's slot, per head
    #pragma clang loop unroll(full)
    for (uint h = 0; h < HPG; ++h) {
      // Transposed sum over the 32 lanes: at each xor step a lane keeps the half of its tokens on its side of the
      // step and sends the other half, so 8 scores cost 4 + 2 + 1 + 1 + 1 shuffles. Lane l ends with token l / 4.
      float r4[4], r2[2];
      #pragma clang loop unroll(full)
      for (uint i = 0; i < 4u; ++i) {
        const float keep = up16 ? part[h][i + 4u] : part[h][i], give = up16 ? part[h][i] : part[h][i + 4u];
        r4[i] = keep + metal::simd_shuffle_xor(give, 16u);
      }
      #pragma clang loop unroll(full)
      for (uint i = 0; i < 2u; ++i) {
        const float keep = up8 ? r4[i + 2u] : r4[i], give = up8 ? r4[i] : r4[i + 2u];
        r2[i] = keep + metal::simd_shuffle_xor(give, 8u);
      }
      const float keep = up4 ? r2[1] : r2[0], give = up4 ? r2[0] : r2[1];
      float score = keep + metal::simd_shuffle_xor(give, 4u);
      score += metal::simd_shuffle_xor(score, 2u);
      score += metal::simd_shuffle_xor(score, 1u);
      score = t + slot < s1 ? score : -INFINITY;      // a ragged last batch: slots past the sub-chunk
      // One online-softmax update per batch: the batch max over the 8 slots (each held by 4 lanes).
      float bmax = score;
      bmax = metal::max(bmax, metal::simd_shuffle_xor(bmax, 4u));
      bmax = metal::max(bmax, metal::simd_shuffle_xor(bmax, 8u));
      bmax = metal::max(bmax, metal::simd_shuffle_xor(bmax, 16u));
      const float mn = metal::max(m[h], bmax);
      const float base = mn == -INFINITY ? 0.0f : mn;   // nothing live yet: exp(-inf - 0) = 0, never -inf - -inf
      const float factor = metal::exp(m[h] - base);
      p[h] = metal::exp(score - base);
      m[h] = mn;
      l[h] = metal::fma(l[h], factor, p[h]);
      #pragma clang loop unroll(full)
      for (uint i = 0; i < 8u; ++i) o[h][i] *= factor;
    }
    // V: token j's weight is the p of the lanes holding slot j (lane 4j).
    #pragma clang loop unroll(full)
    for (uint j = 0; j < (uint)BATCH; ++j) {
      float vr[8];
      #pragma clang loop unroll(full)
      for (uint i = 0; i < 8u; ++i) vr[i] = metal::fma(vscale[j], float((vword[j] >> (4u * i)) & 15u), vbias[j]);
      #pragma clang loop unroll(full)
      for (uint h = 0; h < HPG; ++h) {
        const float w = metal::simd_shuffle(p[h], 4u * j);
        #pragma clang loop unroll(full)
        for (uint i = 0; i < 8u; ++i) o[h][i] = metal::fma(w, vr[i], o[h][i]);
      }
    }
  }
  // The running sums of the 8 slots.
  #pragma clang loop unroll(full)
  for (uint h = 0; h < HPG; ++h) {
    l[h] += metal::simd_shuffle_xor(l[h], 4u);
    l[h] += metal::simd_shuffle_xor(l[h], 8u);
    l[h] += metal::simd_shuffle_xor(l[h], 16u);
  }
  // Combine the SUB token sub-chunks of each head in threadgroup memory.
  threadgroup float osh[SUB * REP * D];
  threadgroup float msh[SUB * REP], lsh[SUB * REP];
  #pragma clang loop unroll(full)
  for (uint h = 0; h < HPG; ++h) {
    const uint head = hg * HPG + h, at = sc * (uint)REP + head;
    for (uint i = 0; i < 8u; ++i) osh[at * (uint)D + lane * 8u + i] = o[h][i];
    if (lane == 0u) { msh[at] = m[h]; lsh[at] = l[h]; }
  }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  for (uint e = thread_position_in_threadgroup.x; e < (uint)(REP * D); e += threads_per_threadgroup.x) {
    const uint h = e / (uint)D, d = e % (uint)D;
    float gmax = -INFINITY;
    for (uint s = 0; s < (uint)SUB; ++s) gmax = metal::max(gmax, msh[s * (uint)REP + h]);
    float acc = 0.0f, den = 0.0f;
    for (uint s = 0; s < (uint)SUB; ++s) {
      const float ms = msh[s * (uint)REP + h];
      if (ms == -INFINITY) continue;
      const float w = metal::exp(ms - gmax);
      acc += w * osh[(s * (uint)REP + h) * (uint)D + d];
      den += w * lsh[s * (uint)REP + h];
    }
    const ulong base = ((ulong)block * (uint)KVH + hk) * (uint)REP + h;
    opart[base * (uint)D + d] = acc;
    if (d == 0u) { mpart[base] = gmax; lpart[base] = den; }
  }
"""

MERGE_SOURCE = """
  // One threadgroup per query head; its MERGE_WARPS SIMD groups take the blocks in turn (warp w: blocks w,
  // w + MERGE_WARPS, ...), lane l the dims l + 32 i (each load of a row is one coalesced 128-byte line).
  const uint lane = thread_index_in_simdgroup, sg = simdgroup_index_in_threadgroup;
  const uint tid = thread_position_in_threadgroup.x, qv = threadgroup_position_in_grid.x;
  constexpr uint QH = KVH * REP, WARPS = MERGE_WARPS;
  const uint BLOCKS = mpart_shape[0];
  threadgroup float wmax[WARPS], wden[WARPS];
  threadgroup float wnum[WARPS * D];
  // The largest block max.
  float mmax = -INFINITY;
  for (uint s = tid; s < BLOCKS; s += WARPS * 32u) mmax = metal::max(mmax, mpart[(ulong)s * QH + qv]);
  mmax = metal::simd_max(mmax);
  if (lane == 0u) wmax[sg] = mmax;
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  mmax = -INFINITY;
  for (uint w = 0; w < WARPS; ++w) mmax = metal::max(mmax, wmax[w]);
  // Each SIMD group's blocks, rescaled to that max (a block with max -inf holds no token: weight 0). A block's
  // loads are all issued before its weight is formed, so they wait on memory together.
  float num[D / 32], den = 0.0f;
  #pragma clang loop unroll(full)
  for (uint i = 0; i < (uint)D / 32u; ++i) num[i] = 0.0f;
  for (uint s = sg; s < BLOCKS; s += WARPS) {
    const ulong b = (ulong)s * QH + qv;
    float x[D / 32];
    #pragma clang loop unroll(full)
    for (uint i = 0; i < (uint)D / 32u; ++i) x[i] = opart[b * (uint)D + lane + 32u * i];
    const float ms = mpart[b], ls = lpart[b];
    const float w = ms == -INFINITY ? 0.0f : metal::exp(ms - mmax);
    #pragma clang loop unroll(full)
    for (uint i = 0; i < (uint)D / 32u; ++i) num[i] = metal::fma(w, x[i], num[i]);
    den = metal::fma(w, ls, den);
  }
  #pragma clang loop unroll(full)
  for (uint i = 0; i < (uint)D / 32u; ++i) wnum[sg * (uint)D + lane + 32u * i] = num[i];
  if (lane == 0u) wden[sg] = den;
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  // The SIMD groups' sums, then the division; one thread per dim.
  for (uint d = tid; d < (uint)D; d += WARPS * 32u) {
    float total = 0.0f, denominator = 0.0f;
    for (uint w = 0; w < WARPS; ++w) { total += wnum[w * (uint)D + d]; denominator += wden[w]; }
    out[(ulong)qv * (uint)D + d] = T(total / denominator);
  }
"""

PARTIAL = KernelSpec("kvq4_decode_partial", ("q", "kp", "ks", "kb", "vp", "vs", "vb"), ("opart", "mpart", "lpart"),
                     PARTIAL_SOURCE, ensure_row_contiguous=False)
MERGE = KernelSpec("kvq4_decode_merge", ("opart", "mpart", "lpart"), ("out",), MERGE_SOURCE)


# The merge's per-SIMD-group sums (wnum, wmax, wden, float32): 16.1 KiB, within every arm's limit for any REP.
MERGE_THREADGROUP_BYTES = 4 * (MERGE_WARPS * HEAD_DIM + 2 * MERGE_WARPS)


def device_cores() -> int:
    """Compute units the default split fills on this machine (``DEVICE_CORES``)."""
    return DEVICE_CORES["metal"] if metal_available() else DEVICE_CORES["cuda"]


def default_block(n: int, kvh: int, cores: int | None = None) -> int:
    """Tokens per threadgroup when the caller passes no ``block``: enough threadgroups to fill the device.

    Aim at ``WAVES * cores`` threadgroups over the ``kvh`` KV heads, so a KV head gets
    ceil(WAVES * cores / kvh) blocks of ceil(n / that) tokens; round up to whole batches of every sub-chunk
    (a multiple of SUB * BATCH = 32) and clamp to [MIN_BLOCK, KV4_DECODE_BLOCK] = [64, 512]. On an H200 (132
    SMs): 8 KV heads at N 32k get 256 (1024 threadgroups), at N 128k 512 (2048); 1 KV head at N 32k 64 (512).
    ``cores`` defaults to ``device_cores()``; the graph arm uses the same rule, so both arms agree on a machine.
    """
    n, kvh = check_int("n", n, minimum=1), check_int("kvh", kvh, minimum=1)
    cores = device_cores() if cores is None else check_int("cores", cores, minimum=1)
    per_head = -(-WAVES * cores // kvh)
    tokens, whole_batches = -(-n // per_head), SUB * BATCH
    block = -(-tokens // whole_batches) * whole_batches
    return min(KV4_DECODE_BLOCK, max(MIN_BLOCK, block))


def threadgroup_bytes(rep: int) -> int:
    """Threadgroup memory of the partial kernel for GQA factor ``rep``: osh, msh and lsh (float32)."""
    return 4 * (SUB * rep * HEAD_DIM + 2 * SUB * rep)


def max_gqa_factor(arm: str) -> int | None:
    """The largest even GQA factor whose combine buffers fit ``arm``'s threadgroup memory (None: no bound)."""
    limit = THREADGROUP_MEMORY.get(arm)
    if limit is None:
        return None
    rep = 2
    while threadgroup_bytes(rep + 2) <= limit:
        rep += 2
    return rep


# --- validation -------------------------------------------------------------


def _planes(name: str, planes) -> QuantizedKV:
    if isinstance(planes, QuantizedKV):
        return planes
    if isinstance(planes, (tuple, list)) and len(planes) == 3:
        return QuantizedKV(*planes)
    raise TypeError(f"{name} must be a QuantizedKV or a (packed, scales, biases) tuple, got {type(planes).__name__}")


def kvq4_decode_eligible(q, keys, group_size: int, bits: int) -> bool:
    """The seed's ``kvq4DecodeEligible``: one query row, head dim 256, a 4-bit group-64 cache, an even GQA factor."""
    try:
        packed = _planes("keys", keys).packed
    except TypeError:
        return False
    if not isinstance(q, mx.array) or q.ndim != 4 or not isinstance(packed, mx.array) or packed.ndim != 4:
        return False
    b, h, L, d = q.shape
    kvh = packed.shape[1]
    return (b == 1 and L == 1 and d == HEAD_DIM and bits == BITS and group_size == GROUP_SIZE and kvh > 0
            and h % kvh == 0 and (h // kvh) % 2 == 0)


def _check_planes(name: str, planes: QuantizedKV, dtype: mx.Dtype) -> tuple[int, int]:
    """(KVH, N) of a valid plane set, else ValueError / TypeError naming ``name``."""
    if isinstance(planes.bits, bool) or planes.bits != BITS:
        raise ValueError(f"{name}.bits must be {BITS} (the kernel unpacks 4-bit codes), got {planes.bits!r}")
    if isinstance(planes.group_size, bool) or planes.group_size != GROUP_SIZE:
        raise ValueError(f"{name}.group_size must be {GROUP_SIZE}, got {planes.group_size!r}")
    for field in ("packed", "scales", "biases"):
        if not isinstance(getattr(planes, field), mx.array):
            raise TypeError(f"{name}.{field} must be an mx.array, got {type(getattr(planes, field)).__name__}")
    packed, scales, biases = planes.packed, planes.scales, planes.biases
    if packed.dtype != mx.uint32:
        raise ValueError(f"{name}.packed must be uint32, got {packed.dtype}")
    if packed.ndim != 4 or packed.shape[0] != 1 or packed.shape[3] != WORDS:
        raise ValueError(f"{name}.packed must have shape [1, KVH, N, {WORDS}] (head dim {HEAD_DIM} at {BITS} bits), "
                         f"got {list(packed.shape)}")
    _, kvh, n, _ = packed.shape
    for field, plane in (("scales", scales), ("biases", biases)):
        if tuple(plane.shape) != (1, kvh, n, GROUPS):
            raise ValueError(f"{name}.{field} must have shape [1, {kvh}, {n}, {GROUPS}] (groups of {GROUP_SIZE}), "
                             f"got {list(plane.shape)}")
        if plane.dtype != dtype:
            raise ValueError(f"{name}.{field} has dtype {plane.dtype} but q has {dtype}")
    if n < 1:
        raise ValueError(f"{name} holds no cached position (N = 0)")
    return kvh, n



def _validate(q, keys, values, scale, block) -> tuple[QuantizedKV, QuantizedKV, float, int]:
    """Checked planes, scale and block (``block=None``: ``default_block`` of the cache)."""
    if not isinstance(q, mx.array):
        raise TypeError(f"q must be an mx.array, got {type(q).__name__}")
    if q.ndim != 4 or q.shape[0] != 1 or q.shape[2] != 1:
        raise ValueError(f"q must have shape [1, H, 1, {HEAD_DIM}] (one query row), got {list(q.shape)}")
    if q.shape[3] != HEAD_DIM:
        raise ValueError(f"q has head dim D={q.shape[3]}; the kernel is written for D={HEAD_DIM}")
    if q.dtype not in DTYPES:
        raise ValueError(f"q must be one of {DTYPES}, got {q.dtype}")
    keys, values = _planes("keys", keys), _planes("values", values)
    kvh, n = _check_planes("keys", keys, q.dtype)
    if _check_planes("values", values, q.dtype) != (kvh, n):
        raise ValueError(f"values have [KVH, N] = {list(values.packed.shape[1:3])} but keys have {[kvh, n]}")
    h = q.shape[1]
    if h % kvh:
        raise ValueError(f"q has H={h} heads, not a multiple of the cache's KVH={kvh}")
    if (h // kvh) % 2:
        raise ValueError(f"q has H={h} heads over KVH={kvh}: the GQA factor {h // kvh} must be even "
                         "(the kernel splits a KV head's queries into 2 head groups)")
    block = default_block(n, kvh) if block is None else check_int("block", block, minimum=1)
    return keys, values, check_scale(scale), block


def _check_fits(arm: str, rep: int) -> None:
    limit = THREADGROUP_MEMORY.get(arm)
    if limit is not None and threadgroup_bytes(rep) > limit:
        raise ValueError(f"q's GQA factor {rep} needs {threadgroup_bytes(rep)} bytes of threadgroup memory; "
                         f"the {arm} arm has {limit} (GQA <= {max_gqa_factor(arm)}): use arm='graph'")


# --- the kernels -------------------------------------------------------------


def partial_launch(qs: mx.array, keys: QuantizedKV, values: QuantizedKV, block: int) -> Launch:
    """The partial pass exactly as the seed issues it (``qs``: the pre-scaled, contiguous query)."""
    h = qs.shape[1]
    kvh, n = keys.packed.shape[1], keys.packed.shape[2]
    rep, blocks = h // kvh, -(-n // block)
    return Launch(PARTIAL, (qs, keys.packed, keys.scales, keys.biases, values.packed, values.scales, values.biases),
                  (("T", qs.dtype), ("D", HEAD_DIM), ("KVH", kvh), ("REP", rep), ("BLOCK", block), ("SUB", SUB),
                   ("BATCH", BATCH)),
                  grid=(SIMD * 2 * SUB * blocks, kvh, 1), threadgroup=(SIMD * 2 * SUB, 1, 1),
                  output_shapes=((blocks, kvh, rep, HEAD_DIM), (blocks, kvh, rep), (blocks, kvh, rep)),
                  output_dtypes=(mx.float32, mx.float32, mx.float32))


def merge_launch(opart: mx.array, mpart: mx.array, lpart: mx.array, dtype: mx.Dtype) -> Launch:
    """The merge: one threadgroup of MERGE_WARPS SIMD groups per query head, over the blocks' partials."""
    _, kvh, rep, d = opart.shape
    threads = SIMD * MERGE_WARPS
    return Launch(MERGE, (opart, mpart, lpart),
                  (("T", dtype), ("D", d), ("KVH", kvh), ("REP", rep), ("MERGE_WARPS", MERGE_WARPS)),
                  grid=(threads * kvh * rep, 1, 1), threadgroup=(threads, 1, 1),
                  output_shapes=((1, kvh * rep, 1, d),), output_dtypes=(dtype,))


def kvq4_decode(q: mx.array, keys, values, *, scale: float, block: int | None = None,
                arm: str | None = None) -> mx.array:
    """softmax(scale * q . K^T) V for one query row over a 4-bit group-64 cache (module docstring)."""
    keys, values, scale, block = _validate(q, keys, values, scale, block)
    arm = resolve_arm(arm)
    _check_fits(arm, q.shape[1] // keys.packed.shape[1])
    qs = mx.contiguous(q * scale)  # softmax scale folded into q, in T (the seed's mulScalar)
    if arm == "graph":
        return _graph(qs, keys, values, block)
    opart, mpart, lpart = partial_launch(qs, keys, values, block).run(arm)
    (out,) = merge_launch(opart, mpart, lpart, q.dtype).run(arm)
    return out


# --- the graph arm -----------------------------------------------------------


def _dequantize(planes: QuantizedKV, tokens: mx.array) -> mx.array:
    """Rows ``tokens`` of every KV head as float32 [KVH, T, 32 lanes, 8]: ``scale * code + bias`` per dim."""
    words = mx.take(planes.packed[0], tokens, axis=1)  # [KVH, T, 32]
    shifts = mx.arange(8, dtype=mx.uint32) * 4
    codes = ((words[..., None] >> shifts) & 15).astype(mx.float32)  # [KVH, T, 32, 8]: dim 8 * lane + i
    lane_group = mx.arange(SIMD) // (GROUP_SIZE // 8)  # lane -> its 64-dim group
    scales = mx.take(mx.take(planes.scales[0], tokens, axis=1), lane_group, axis=2).astype(mx.float32)
    biases = mx.take(mx.take(planes.biases[0], tokens, axis=1), lane_group, axis=2).astype(mx.float32)
    return scales[..., None] * codes + biases[..., None]


def _combine(m: mx.array, o: mx.array, l: mx.array, axis: int) -> tuple[mx.array, mx.array, mx.array]:
    """Softmax partials (max m, values o with one more trailing axis, sum l) combined along ``axis`` of m:
    rescaled to the largest max; a partial with max -inf (no token) is skipped (weight 0)."""
    top = m.max(axis=axis, keepdims=True)
    w = mx.where(m == -mx.inf, 0.0, mx.exp(m - top))
    return top.squeeze(axis), (w[..., None] * o).sum(axis=axis), (w * l).sum(axis=axis)


def _graph(qs: mx.array, keys: QuantizedKV, values: QuantizedKV, block: int) -> mx.array:
    """The partial + merge kernels in MLX ops (the module docstring says where they differ)."""
    h = qs.shape[1]
    kvh, n = keys.packed.shape[1], keys.packed.shape[2]
    rep, blocks, sub = h // kvh, -(-n // block), -(-block // SUB)
    batches = -(-min(sub, n) // BATCH)  # batch steps of the longest sub-chunk
    width = batches * BATCH

    # Sub-chunk (b, sc) holds tokens [start, end); its position i is token start + i, live below end. A dead
    # position reads the sub-chunk's last token, as the kernel does (end - 1 is a cached token even when the
    # sub-chunk is empty) and is masked out of the softmax.
    first = mx.arange(blocks).reshape(blocks, 1) * block
    start = first + mx.arange(SUB).reshape(1, SUB) * sub  # [blocks, SUB]
    block_end = mx.minimum(first + block, n)
    end = mx.minimum(block_end, start + sub)
    token = start[..., None] + mx.arange(width)  # [blocks, SUB, width]
    live = (token < end[..., None]).reshape(blocks, SUB, batches, BATCH)
    gathered = mx.minimum(token, end[..., None] - 1).reshape(-1)
    k = _dequantize(keys, gathered)  # [KVH, T, 32, 8]
    v = _dequantize(values, gathered).reshape(kvh, blocks, SUB, batches, BATCH, HEAD_DIM)

    # Scores: each lane's 8-term dot product, then the sum over the 32 lanes (the kernel's transposed lane sum).
    # Elementwise products and sums, not a matmul: MLX's CUDA backend runs float32 matmuls in TF32 (10-bit mantissa).
    q = qs.astype(mx.float32).reshape(kvh, rep, 1, SIMD, 8)
    lanes = (q * k[:, None]).sum(axis=-1)  # [KVH, REP, T, 32]
    scores = lanes.sum(axis=-1).reshape(kvh, rep, blocks, SUB, batches, BATCH)

    # Online softmax per sub-chunk, one batch of BATCH positions of every sub-chunk per step: one max and one
    # rescale per batch; the running sum l is kept per batch slot (the kernel's lanes) and summed at the end.
    m = mx.full((kvh, rep, blocks, SUB), -mx.inf, dtype=mx.float32)
    l = mx.zeros((kvh, rep, blocks, SUB, BATCH), dtype=mx.float32)
    o = mx.zeros((kvh, rep, blocks, SUB, HEAD_DIM), dtype=mx.float32)
    for b in range(batches):
        score = mx.where(live[:, :, b], scores[..., b, :], -mx.inf)  # [KVH, REP, blocks, SUB, BATCH]
        mn = mx.maximum(m, score.max(axis=-1))
        base = mx.where(mn == -mx.inf, 0.0, mn)  # a batch with nothing live yet: no -inf - -inf
        factor, p = mx.exp(m - base), mx.exp(score - base[..., None])
        m = mn
        l = l * factor[..., None] + p
        o = o * factor[..., None] + (p[..., None] * v[:, None, :, :, b]).sum(axis=-2)
    l = l.sum(axis=-1)

    m, o, l = _combine(m, o, l, axis=3)  # the 4 sub-chunks of a block
    _, num, den = _combine(m, o, l, axis=2)  # the blocks (merge kernel)
    out = (num / den[..., None]).astype(qs.dtype)  # [KVH, REP, D]
    return out.reshape(1, h, 1, HEAD_DIM)
