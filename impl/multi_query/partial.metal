
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
  // any copy went out: measured with ncu on the H200.)
  if (tile) {
    const float qscale = float(scale[0]);                // the softmax scale, in T
    UNROLL_FULL
    for (uint t = 0; t < (uint)TILES; ++t) {
      const uint row = (sg * (uint)TILES + t) * 8u + fm;  // this lane's fragment row
      const bool rowOk = row < (uint)NQ;
      const uint rr = rowOk ? row / (uint)L : 0u, qi = rowOk ? row % (uint)L : 0u;
      // q may be any view (a decode step's q is often [1, L, H, D] transposed): read through its strides, so the
      // call needs no copy of q (and no graph node for one: measured, ~2 us of the H200 host's time per call).
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
  const bool kvec = ds == 1 && hs % 4 == 0 && rs % 4 == 0 && starts_vector_aligned(k);
  const bool vvec = vds == 1 && vhs % 4 == 0 && vrs % 4 == 0 && starts_vector_aligned(v);
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
  // ``pack_parts``). MLX's host pays ~1.5-3 us per call for each output of a custom kernel (measured on the H200).
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
