
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
