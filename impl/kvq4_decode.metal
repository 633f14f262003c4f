
  const uint lane = thread_index_in_simdgroup;
  const uint sg = simdgroup_index_in_threadgroup;
  const uint hk = threadgroup_position_in_grid.y, block = threadgroup_position_in_grid.x;
  const uint hg = sg % 2u, sc = sg / 2u;              // head group, token sub-chunk
  constexpr uint HPG = REP / 2;                       // heads per group
  const uint N = kp_shape[2];                         // cached positions: an argument, not a specialization
  const uint t0 = block * (uint)BLOCK, tEnd = metal::min(N, t0 + (uint)BLOCK);
  const uint sub = ((uint)BLOCK + (uint)SUB - 1u) / (uint)SUB;
  const uint s0 = t0 + sc * sub, s1 = metal::min(tEnd, s0 + sub);
  // Queries (pre-scaled), 8 dims per lane.
  float qv[HPG][8];
  #pragma clang loop unroll(full)
  for (uint j = 0; j < HPG; ++j)
    #pragma clang loop unroll(full)
    for (uint i = 0; i < 8u; ++i) qv[j][i] = float(q[(hk * (uint)REP + hg * HPG + j) * (uint)D + lane * 8u + i]);
  float m[HPG], l[HPG], o[HPG][8];
  #pragma clang loop unroll(full)
  for (uint j = 0; j < HPG; ++j) { m[j] = -INFINITY; l[j] = 0.0f; for (uint i = 0; i < 8u; ++i) o[j][i] = 0.0f; }
  const uint g = lane / 8u;                           // this lane's 64-dim group
  // Token t of a plane is at offset + t * row stride; the offset holds the head and this lane's word / group.
  const ulong kpo = (ulong)hk * (ulong)kp_strides[1] + (ulong)lane * (ulong)kp_strides[3], kpr = (ulong)kp_strides[2];
  const ulong vpo = (ulong)hk * (ulong)vp_strides[1] + (ulong)lane * (ulong)vp_strides[3], vpr = (ulong)vp_strides[2];
  const ulong kso = (ulong)hk * (ulong)ks_strides[1] + (ulong)g * (ulong)ks_strides[3], ksr = (ulong)ks_strides[2];
  const ulong kbo = (ulong)hk * (ulong)kb_strides[1] + (ulong)g * (ulong)kb_strides[3], kbr = (ulong)kb_strides[2];
  const ulong vso = (ulong)hk * (ulong)vs_strides[1] + (ulong)g * (ulong)vs_strides[3], vsr = (ulong)vs_strides[2];
  const ulong vbo = (ulong)hk * (ulong)vb_strides[1] + (ulong)g * (ulong)vb_strides[3], vbr = (ulong)vb_strides[2];
  for (uint t = s0; t < s1; ++t) {
    const uint kword = kp[kpo + (ulong)t * kpr];
    const uint vword = vp[vpo + (ulong)t * vpr];
    const float kscale = float(ks[kso + (ulong)t * ksr]), kbias = float(kb[kbo + (ulong)t * kbr]);
    const float vscale = float(vs[vso + (ulong)t * vsr]), vbias = float(vb[vbo + (ulong)t * vbr]);
    float kr[8], vr[8];
    #pragma clang loop unroll(full)
    for (uint i = 0; i < 8u; ++i) {
      kr[i] = metal::fma(kscale, float((kword >> (4u * i)) & 15u), kbias);
      vr[i] = metal::fma(vscale, float((vword >> (4u * i)) & 15u), vbias);
    }
    #pragma clang loop unroll(full)
    for (uint j = 0; j < HPG; ++j) {
      float score = 0.0f;
      #pragma clang loop unroll(full)
      for (uint i = 0; i < 8u; ++i) score = metal::fma(qv[j][i], kr[i], score);
      score = metal::simd_sum(score);
      const float mn = metal::max(m[j], score);
      const float factor = metal::exp(m[j] - mn), e = metal::exp(score - mn);
      m[j] = mn;
      l[j] = l[j] * factor + e;
      #pragma clang loop unroll(full)
      for (uint i = 0; i < 8u; ++i) o[j][i] = metal::fma(o[j][i], factor, e * vr[i]);
    }
  }
  // Combine the SUB token sub-chunks of each head in threadgroup memory.
  threadgroup float osh[SUB * REP * D];
  threadgroup float msh[SUB * REP], lsh[SUB * REP];
  #pragma clang loop unroll(full)
  for (uint j = 0; j < HPG; ++j) {
    const uint h = hg * HPG + j, slot = sc * (uint)REP + h;
    for (uint i = 0; i < 8u; ++i) osh[slot * (uint)D + lane * 8u + i] = o[j][i];
    if (lane == 0u) { msh[slot] = m[j]; lsh[slot] = l[j]; }
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
    // One output in multi-query's PARTS layout (impl.multi_query.pack_parts: O, then m, then l), which its merge reads.
    const ulong base = ((ulong)block * (uint)KVH + hk) * (uint)REP + h;
    const ulong cells = (ulong)threadgroups_per_grid.x * (uint)KVH * (uint)REP;
    part[base * (uint)D + d] = acc;
    if (d == 0u) { part[cells * (uint)D + base] = gmax; part[cells * (uint)(D + 1) + base] = den; }
  }
