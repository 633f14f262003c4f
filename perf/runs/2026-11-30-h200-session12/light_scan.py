"""Session 12: the row kernel's scan over raw logits ("light"), for the T5 probe.

The row's best rounded score S is its largest logit's (rounding logit - lse to T is monotone), so the scan keeps
per thread only its largest logit, that logit's first id, and the largest logit before that id ("before"). Then:
S = the block's max of T(top - lse); a thread whose top scores S answers topId, unless its `before` scores S too
(an earlier id of the thread rounds to S: it re-reads its chunks before topId for the first one). The block takes
the lowest id; a row with no score above -inf answers 0.
"""

LIGHT_SCAN = """  float top = -INFINITY, before = -INFINITY;  // largest logit; largest before its first id
  uint topId = 0xffffffffu;
  for (uint first = tid; first < chunks; first += UNROLL * THREADS) {
    Chunk c[UNROLL];
    for (uint u = 0; u < UNROLL; ++u) c[u] = load_chunk<T>(x, first + u * THREADS, V, vectors);
    for (uint u = 0; u < UNROLL; ++u) {
      for (uint e = 0; e < 4u; ++e) {
        if (c[u].v[e] > top) { before = top; top = c[u].v[e]; topId = 4u * (first + u * THREADS) + e; }
      }
    }
  }
  float mine = float(T(top - shift));
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
"""
