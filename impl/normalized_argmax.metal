
  const uint tid = thread_position_in_threadgroup.x;
  const uint lane = tid % 32, simd = tid / 32;
  const uint row = threadgroup_position_in_grid.x;
  const auto x = logits + ulong(row) * V;
  const uint chunks = (uint(V) + 3u) / 4u;
  const bool vectors = uint(V) % 4u == 0 && vector_aligned(x);
SCAN
  float mine = float(T(top - shift));  // this thread's best score: its largest logit's
  mine = mine > -INFINITY ? mine : -INFINITY;  // NaN (a non-finite lse) counts as -inf
  float best = simd_max(mine);
  threadgroup float bests[32];
  threadgroup uint ids[32];
  if (lane == 0) bests[simd] = best;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  best = simd_max(lane < THREADS / 32 ? bests[lane] : -INFINITY);
  uint id = 0xffffffffu;
  if (best > -INFINITY && mine == best) {
    id = topId;
    if (float(T(before - shift)) == best) {  // an earlier id of this thread rounds to best too: find the first
      for (uint k = tid; 4u * k < topId && id == topId; k += THREADS) {
        const Chunk c = load_chunk<T>(x, k, V, vectors);
        for (uint e = 0; e < 4u; ++e) {
          if (id == topId && 4u * k + e < topId && float(T(c.v[e] - shift)) == best) id = 4u * k + e;
        }
      }
    }
  }
  id = simd_min(id);
  if (lane == 0) ids[simd] = id;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd == 0) {
    id = simd_min(lane < THREADS / 32 ? ids[lane] : 0xffffffffu);
    if (lane == 0) out[row] = id == 0xffffffffu ? 0u : id;
  }
