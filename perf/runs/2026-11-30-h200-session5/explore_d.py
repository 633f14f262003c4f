"""Session 5, call C2: multi-query's partial as committed (one tile per SIMD group at NQ <= 32, key-fragment loops
reordered so consecutive tensor-core products are independent, the sliced merge) against two variants of its
body, each checked bit-identical to it first: ORDER_BEFORE (this session's start: every product of a row of S, and
every key fragment of an O fragment, waiting on the previous one) and PLANES_IN_TURN (K staged, then V: half the
staging registers, 123 against 144 at 32/8/L8/D128, so 4 threadgroups per SM instead of 3). Also tiles per SIMD
group at NQ = 64, and the splits. ms per call: eval8 (perf's protocol) and pipelined (perf.harness.Pipelined)."""
import dataclasses
import math
import time

import mlx.core as mx

import impl.multi_query as mq
from perf.harness import batched, time_call

ORDER_BEFORE = """
  const uint lane = thread_index_in_simdgroup;
  const uint sg = simdgroup_index_in_threadgroup;
  const uint tid = thread_position_in_threadgroup.x;
  const uint hk = threadgroup_position_in_grid.y;
  const uint split = threadgroup_position_in_grid.x;
  // Run-time cache length and split count: one compiled instance serves every N.
  const uint n = (uint)k_shape[2], splits = threadgroups_per_grid.x;
  const uint fm = sg_fragment_row(lane), fn = sg_fragment_col(lane);
  // One block of K and one of V as half, rows KS >= D apart (the padding spreads a fragment's rows over banks).
  threadgroup half kt[BK * KS];
  threadgroup half vt[BK * KS];
  // Query tiles: TILES 8-row tiles per SIMD group, tile t holding rows (sg * TILES + t) * 8 .. + 7 of the head
  // group's rep·L vectors; every K / V fragment loaded serves all of them.
  const bool tile = sg * (uint)TILES * 8u < (uint)NQ;  // simdgroups past the tiles only stage K/V
  const float qscale = float(scale[0]);                // the softmax scale, in T
  metal::simdgroup_half8x8 qf[TILES][D / 8];
  metal::simdgroup_float8x8 o[TILES][D / 8];
  float m[TILES], l[TILES];
  uint limit[TILES];                                   // keys <= limit[t] are visible to this lane's row of tile t
  bool rowOks[TILES];
  UNROLL_FULL
  for (uint t = 0; t < (uint)TILES; ++t) {
    const uint row = (sg * (uint)TILES + t) * 8u + fm;  // this lane's fragment row
    const bool rowOk = row < (uint)NQ;
    const uint rr = rowOk ? row / (uint)L : 0u, qi = rowOk ? row % (uint)L : 0u;
    const auto qp = q + ((ulong)(hk * (uint)REP + rr) * (uint)L + qi) * (uint)D;
    // Q * scale rounded to T (the seed's mulScalar in T), then to half.
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f) {
      qf[t][f].thread_elements()[0] = rowOk ? half(T(float(qp[8u * f + fn]) * qscale)) : half(0.0f);
      qf[t][f].thread_elements()[1] = rowOk ? half(T(float(qp[8u * f + fn + 1u]) * qscale)) : half(0.0f);
    }
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f) o[t][f] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    m[t] = -INFINITY;
    l[t] = 0.0f;
    limit[t] = n - (uint)L + qi;
    rowOks[t] = rowOk;
  }
  // Key range of this split.
  const uint per = (n + splits - 1u) / splits;
  const uint k0 = split * per, k1 = metal::min(n, k0 + per);
  const ulong hs = (ulong)k_strides[1], rs = (ulong)k_strides[2], ds = (ulong)k_strides[3];
  const ulong vhs = (ulong)v_strides[1], vrs = (ulong)v_strides[2], vds = (ulong)v_strides[3];
  const bool kvec = ds == 1 && hs % 4 == 0 && rs % 4 == 0;
  const bool vvec = vds == 1 && vhs % 4 == 0 && vrs % 4 == 0;
  for (uint kb = k0; kb < k1; kb += (uint)BK) {
    // Stage the K and V blocks [BK, D] as half, 4 dims per item: all of a thread's loads, then its stores (so the
    // loads are in flight together). A key past the split loads a live row (key k1 - 1) and stages zeros.
    // (Fetching block i + 1 into registers while block i is computed was measured slower on the H200: module
    // docstring.)
    half4 kr[ITEMS], vr[ITEMS];
    if (kvec && vvec) {
      UNROLL_FULL
      for (uint b = 0; b < (uint)ITEMS; ++b) {
        const uint i = metal::min(b * (uint)THREADS + tid, (uint)(BK * D / 4) - 1u);
        const ulong key = metal::min(kb + (4u * i) / (uint)D, k1 - 1u), d = (4u * i) % (uint)D;
        kr[b] = load4_vector(k, (ulong)hk * hs + key * rs + d);
        vr[b] = load4_vector(v, (ulong)hk * vhs + key * vrs + d);
      }
    } else {
      UNROLL_FULL
      for (uint b = 0; b < (uint)ITEMS; ++b) {
        const uint i = metal::min(b * (uint)THREADS + tid, (uint)(BK * D / 4) - 1u);
        const ulong key = metal::min(kb + (4u * i) / (uint)D, k1 - 1u), d = (4u * i) % (uint)D;
        kr[b] = load4_strided(k, (ulong)hk * hs + key * rs + d * ds, ds);
        vr[b] = load4_strided(v, (ulong)hk * vhs + key * vrs + d * vds, vds);
      }
    }
    UNROLL_FULL
    for (uint b = 0; b < (uint)ITEMS; ++b) {
      const uint i = b * (uint)THREADS + tid, j = (4u * i) / (uint)D, d = (4u * i) % (uint)D;
      if (i < (uint)(BK * D / 4)) {
        const bool live = kb + j < k1;
        *(THREADGROUP_MEM half4*)(kt + j * (uint)KS + d) = live ? kr[b] : half4(half(0.0f));
        *(THREADGROUP_MEM half4*)(vt + j * (uint)KS + d) = live ? vr[b] : half4(half(0.0f));
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (tile) {
    // S = Q · Kᵀ for BK keys: BK/8 fragments of [8 rows × 8 keys] per tile. The key fragments c are the inner
    // loop: consecutive products go to different accumulators, so none waits for the one before (with f inner,
    // every product waited on the previous one's result; the sums over f keep their order either way).
    metal::simdgroup_float8x8 s[TILES][BK / 8];
    metal::simdgroup_half8x8 p[TILES][BK / 8];
    UNROLL_FULL
    for (uint c = 0; c < (uint)BK / 8u; ++c)
      UNROLL_FULL
      for (uint t = 0; t < (uint)TILES; ++t) s[t][c] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    UNROLL_FULL
    for (uint c = 0; c < (uint)BK / 8u; ++c)
      UNROLL_FULL
      for (uint f = 0; f < (uint)D / 8u; ++f) {
        metal::simdgroup_half8x8 kf;
        metal::simdgroup_load(kf, kt + (8u * c) * (uint)KS + 8u * f, (ulong)KS, ulong2(0, 0), true);
        if (TILES == 2)
          simdgroup_multiply_accumulate_rows16(s[0][c], s[TILES - 1][c], qf[0][f], qf[TILES - 1][f], kf);
        else
          metal::simdgroup_multiply_accumulate(s[0][c], qf[0][f], kf, s[0][c]);
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
      UNROLL_FULL
      for (uint f = 0; f < (uint)D / 8u; ++f) {
        o[t][f].thread_elements()[0] *= corr;
        o[t][f].thread_elements()[1] *= corr;
      }
    }
    // O += P · V, the D/8 accumulators f inner (independent products in a row, as for S; each O fragment still
    // sums its key fragments c in order).
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f)
      UNROLL_FULL
      for (uint c = 0; c < (uint)BK / 8u; ++c) {
        metal::simdgroup_half8x8 vf;
        metal::simdgroup_load(vf, vt + (8u * c) * (uint)KS + 8u * f, (ulong)KS);
        if (TILES == 2)
          simdgroup_multiply_accumulate_rows16(o[0][f], o[TILES - 1][f], p[0][c], p[TILES - 1][c], vf);
        else
          metal::simdgroup_multiply_accumulate(o[0][f], p[0][c], vf, o[0][f]);
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  // Partial results: unnormalized O, running max and sum per row.
  if (!tile) return;
  UNROLL_FULL
  for (uint t = 0; t < (uint)TILES; ++t) {
    const uint row = (sg * (uint)TILES + t) * 8u + fm;
    if (!rowOks[t]) continue;
    const ulong base = ((ulong)split * (uint)KVH + hk) * (uint)NQ + row;
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f) {
      opart[base * (uint)D + 8u * f + fn] = o[t][f].thread_elements()[0];
      opart[base * (uint)D + 8u * f + fn + 1u] = o[t][f].thread_elements()[1];
    }
    if (fn == 0u) { mpart[base] = m[t]; lpart[base] = l[t]; }
  }
"""
PLANES_IN_TURN = """
  const uint lane = thread_index_in_simdgroup;
  const uint sg = simdgroup_index_in_threadgroup;
  const uint tid = thread_position_in_threadgroup.x;
  const uint hk = threadgroup_position_in_grid.y;
  const uint split = threadgroup_position_in_grid.x;
  // Run-time cache length and split count: one compiled instance serves every N.
  const uint n = (uint)k_shape[2], splits = threadgroups_per_grid.x;
  const uint fm = sg_fragment_row(lane), fn = sg_fragment_col(lane);
  // One block of K and one of V as half, rows KS >= D apart (the padding spreads a fragment's rows over banks).
  threadgroup half kt[BK * KS];
  threadgroup half vt[BK * KS];
  // Query tiles: TILES 8-row tiles per SIMD group, tile t holding rows (sg * TILES + t) * 8 .. + 7 of the head
  // group's rep·L vectors; every K / V fragment loaded serves all of them.
  const bool tile = sg * (uint)TILES * 8u < (uint)NQ;  // simdgroups past the tiles only stage K/V
  const float qscale = float(scale[0]);                // the softmax scale, in T
  metal::simdgroup_half8x8 qf[TILES][D / 8];
  metal::simdgroup_float8x8 o[TILES][D / 8];
  float m[TILES], l[TILES];
  uint limit[TILES];                                   // keys <= limit[t] are visible to this lane's row of tile t
  bool rowOks[TILES];
  UNROLL_FULL
  for (uint t = 0; t < (uint)TILES; ++t) {
    const uint row = (sg * (uint)TILES + t) * 8u + fm;  // this lane's fragment row
    const bool rowOk = row < (uint)NQ;
    const uint rr = rowOk ? row / (uint)L : 0u, qi = rowOk ? row % (uint)L : 0u;
    const auto qp = q + ((ulong)(hk * (uint)REP + rr) * (uint)L + qi) * (uint)D;
    // Q * scale rounded to T (the seed's mulScalar in T), then to half.
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f) {
      qf[t][f].thread_elements()[0] = rowOk ? half(T(float(qp[8u * f + fn]) * qscale)) : half(0.0f);
      qf[t][f].thread_elements()[1] = rowOk ? half(T(float(qp[8u * f + fn + 1u]) * qscale)) : half(0.0f);
    }
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f) o[t][f] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    m[t] = -INFINITY;
    l[t] = 0.0f;
    limit[t] = n - (uint)L + qi;
    rowOks[t] = rowOk;
  }
  // Key range of this split.
  const uint per = (n + splits - 1u) / splits;
  const uint k0 = split * per, k1 = metal::min(n, k0 + per);
  const ulong hs = (ulong)k_strides[1], rs = (ulong)k_strides[2], ds = (ulong)k_strides[3];
  const ulong vhs = (ulong)v_strides[1], vrs = (ulong)v_strides[2], vds = (ulong)v_strides[3];
  const bool kvec = ds == 1 && hs % 4 == 0 && rs % 4 == 0;
  const bool vvec = vds == 1 && vhs % 4 == 0 && vrs % 4 == 0;
  for (uint kb = k0; kb < k1; kb += (uint)BK) {
    // Stage the K and V blocks [BK, D] as half, 4 dims per item: all of a thread's loads, then its stores (so the
    // loads are in flight together). A key past the split loads a live row (key k1 - 1) and stages zeros.
    // (Fetching block i + 1 into registers while block i is computed was measured slower on the H200: module
    // docstring.)
    for (uint plane = 0; plane < 2u; ++plane) {
      const DEVICE_MEM T* src = plane == 0u ? k : v;
      const ulong phs = plane == 0u ? hs : vhs, prs = plane == 0u ? rs : vrs, pds = plane == 0u ? ds : vds;
      THREADGROUP_MEM half* dst = plane == 0u ? kt : vt;
      half4 r[ITEMS];
      if (kvec && vvec) {
        UNROLL_FULL
        for (uint b = 0; b < (uint)ITEMS; ++b) {
          const uint i = metal::min(b * (uint)THREADS + tid, (uint)(BK * D / 4) - 1u);
          const ulong key = metal::min(kb + (4u * i) / (uint)D, k1 - 1u), d = (4u * i) % (uint)D;
          r[b] = load4_vector(src, (ulong)hk * phs + key * prs + d);
        }
      } else {
        UNROLL_FULL
        for (uint b = 0; b < (uint)ITEMS; ++b) {
          const uint i = metal::min(b * (uint)THREADS + tid, (uint)(BK * D / 4) - 1u);
          const ulong key = metal::min(kb + (4u * i) / (uint)D, k1 - 1u), d = (4u * i) % (uint)D;
          r[b] = load4_strided(src, (ulong)hk * phs + key * prs + d * pds, pds);
        }
      }
      UNROLL_FULL
      for (uint b = 0; b < (uint)ITEMS; ++b) {
        const uint i = b * (uint)THREADS + tid, j = (4u * i) / (uint)D, d = (4u * i) % (uint)D;
        if (i < (uint)(BK * D / 4)) *(THREADGROUP_MEM half4*)(dst + j * (uint)KS + d) = kb + j < k1 ? r[b] : half4(half(0.0f));
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (tile) {
    // S = Q · Kᵀ for BK keys: BK/8 fragments of [8 rows × 8 keys] per tile. The key fragments c are the inner
    // loop: consecutive products go to different accumulators, so none waits for the one before (with f inner,
    // every product waited on the previous one's result; the sums over f keep their order either way).
    metal::simdgroup_float8x8 s[TILES][BK / 8];
    metal::simdgroup_half8x8 p[TILES][BK / 8];
    UNROLL_FULL
    for (uint c = 0; c < (uint)BK / 8u; ++c)
      UNROLL_FULL
      for (uint t = 0; t < (uint)TILES; ++t) s[t][c] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f)
      UNROLL_FULL
      for (uint c = 0; c < (uint)BK / 8u; ++c) {
        metal::simdgroup_half8x8 kf;
        metal::simdgroup_load(kf, kt + (8u * c) * (uint)KS + 8u * f, (ulong)KS, ulong2(0, 0), true);
        if (TILES == 2)
          simdgroup_multiply_accumulate_rows16(s[0][c], s[TILES - 1][c], qf[0][f], qf[TILES - 1][f], kf);
        else
          metal::simdgroup_multiply_accumulate(s[0][c], qf[0][f], kf, s[0][c]);
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
      UNROLL_FULL
      for (uint f = 0; f < (uint)D / 8u; ++f) {
        o[t][f].thread_elements()[0] *= corr;
        o[t][f].thread_elements()[1] *= corr;
      }
    }
    // O += P · V, the D/8 accumulators f inner (independent products in a row, as for S; each O fragment still
    // sums its key fragments c in order).
    UNROLL_FULL
    for (uint c = 0; c < (uint)BK / 8u; ++c)
      UNROLL_FULL
      for (uint f = 0; f < (uint)D / 8u; ++f) {
        metal::simdgroup_half8x8 vf;
        metal::simdgroup_load(vf, vt + (8u * c) * (uint)KS + 8u * f, (ulong)KS);
        if (TILES == 2)
          simdgroup_multiply_accumulate_rows16(o[0][f], o[TILES - 1][f], p[0][c], p[TILES - 1][c], vf);
        else
          metal::simdgroup_multiply_accumulate(o[0][f], p[0][c], vf, o[0][f]);
      }
    }
    threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  }
  // Partial results: unnormalized O, running max and sum per row.
  if (!tile) return;
  UNROLL_FULL
  for (uint t = 0; t < (uint)TILES; ++t) {
    const uint row = (sg * (uint)TILES + t) * 8u + fm;
    if (!rowOks[t]) continue;
    const ulong base = ((ulong)split * (uint)KVH + hk) * (uint)NQ + row;
    UNROLL_FULL
    for (uint f = 0; f < (uint)D / 8u; ++f) {
      opart[base * (uint)D + 8u * f + fn] = o[t][f].thread_elements()[0];
      opart[base * (uint)D + 8u * f + fn + 1u] = o[t][f].thread_elements()[1];
    }
    if (fn == 0u) { mpart[base] = m[t]; lpart[base] = l[t]; }
  }
"""
TREE = mq.PARTIAL


def ms(call, batch=8, rounds=15):
    r = sorted(x / batch for x in time_call(batched(call, "mlx", batch), rounds=rounds, warmup=2))
    return r[len(r) // 2] * 1e3


def pipelined(call, batch=8, rounds=40):
    for _ in range(3):
        mx.eval([call() for _ in range(batch)])
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        outs = [call() for _ in range(batch)]
        mx.async_eval(outs)
        if previous is not None:
            mx.eval(previous)
        previous = outs
    mx.eval(previous)
    return (time.perf_counter() - start) / (rounds * batch) * 1e3


def body(name):
    mq.PARTIAL = TREE if name == "tree" else dataclasses.replace(
        TREE, name=f"multi_query_partial_{name}", source={"order_before": ORDER_BEFORE, "planes_in_turn": PLANES_IN_TURN}[name])
    mq._compiled_call.cache_clear()


for hq, hkv, L, d, n in ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768), (64, 8, 8, 128, 32768)):
    mx.random.seed(0)
    q, k, v = ((0.5 * mx.random.normal(s)).astype(mx.bfloat16) for s in ((1, hq, L, d), (1, hkv, n, d), (1, hkv, n, d)))
    mx.eval(q, k, v)
    scale = 1.0 / math.sqrt(d)
    name = f"{hq}/{hkv}/L{L}/D{d}/N{n} bf16"
    rows = lambda: [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - L + i + 1],
                                                         v[:, :, :n - L + i + 1], scale=scale) for i in range(L)]
    rows_ms = ms(rows)
    print(f"{name}: sdpa_rows (8 single-row MLX SDPA calls) eval8 {rows_ms:.4f} ms, pipelined {pipelined(rows):.4f}",
          flush=True)
    default = mq.default_splits(n, hkv)
    body("tree")
    want = mq.multi_query_causal(q, k, v, scale=scale, arm="cuda")
    for variant in ("tree", "order_before", "planes_in_turn", "tree"):
        body(variant)
        out = mq.multi_query_causal(q, k, v, scale=scale, arm="cuda")
        same = bool(mx.array_equal(out, want).item())
        for splits in (default, 49):
            call = lambda: mq.multi_query_causal(q, k, v, scale=scale, splits=splits, arm="cuda")
            t = ms(call)
            extra = f", pipelined {pipelined(call):.4f}" if splits == default else ""
            print(f"  {variant:15s} splits={splits:3d}: eval8 {t:.4f} ms ({2 * k.nbytes / t / 1e9:.2f} TB/s), "
                  f"sdpa_rows / this {rows_ms / t:.2f}x{extra}; bit-identical to the tree: {same}", flush=True)
    body("tree")
    if hq == 64:
        for tiles in (1, 2):
            mq.TILES_PER_SIMDGROUP = tiles
            mq._compiled_call.cache_clear()
            call = lambda: mq.multi_query_causal(q, k, v, scale=scale, arm="cuda")
            t = ms(call)
            print(f"  TILES_PER_SIMDGROUP={tiles} (NQ 64): eval8 {t:.4f} ms, sdpa_rows / this {rows_ms / t:.2f}x, "
                  f"pipelined {pipelined(call):.4f}", flush=True)
        mq.TILES_PER_SIMDGROUP = 2
        mq._compiled_call.cache_clear()
    s_t = mx.array([scale], dtype=q.dtype)
    part = mq.partial_launch(q, k, v, s_t, default)
    op, mp, lp = part.run("cuda")
    mx.eval(op, mp, lp)
    print(f"  breakdown: partial alone {ms(lambda: part.run('cuda')[0]):.4f} ms; merge alone "
          f"{ms(lambda: mq.merge_launch(op, mp, lp, q.dtype, hq, L).run('cuda')[0]):.4f}; call at N=64 "
          f"{ms(lambda: mq.multi_query_causal(q, k[:, :, :64], v[:, :, :64], scale=scale, arm='cuda')):.4f}", flush=True)
