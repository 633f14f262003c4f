
  // One threadgroup per (query vector, 128 dims): lane x owns dims d .. d + 3 (one 16-byte load per split) and
  // SIMD group `slice` the splits slice, slice + 8, ... in ONE pass: a split's weight is taken against the
  // slice's running max and the slice's sums are rescaled when that max grows, so nothing waits for a max before
  // its loads go out (the two-pass merge, the max of every split first, then the sums, paid two dependent memory
  // round trips and a 32-dim threadgroup per 32 dims: measured on the H200, 30 against 24 us per call alone, 8
  // calls per eval). The slices then combine in threadgroup memory, each rescaled to
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
