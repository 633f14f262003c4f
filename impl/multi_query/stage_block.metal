
        // A thread issues all its K and V loads of the block, then its stores (the loads in flight together); a
        // key past the split loads a live row (key k1 - 1) and stages zeros. (Fetching block i + 1 into registers
        // while block i is computed, by every thread, was measured slower on the H200: module docstring.)
        const uint kb = k0 + it * (uint)BK;  // the block staged
        half4 kr[ITEMS], vr[ITEMS];
        if (kvec && vvec) {
          UNROLL_FULL
          for (uint b = 0; b < (uint)ITEMS; ++b) {
            const ulong key = metal::min(kb + j0 + b * PASS, k1 - 1u);
            kr[b] = load4_vector(kp, key * rs);
            vr[b] = load4_vector(vp, key * vrs);
          }
        } else {
          UNROLL_FULL
          for (uint b = 0; b < (uint)ITEMS; ++b) {
            const ulong key = metal::min(kb + j0 + b * PASS, k1 - 1u);
            kr[b] = load4_strided(kp, key * rs, ds);
            vr[b] = load4_strided(vp, key * vrs, vds);
          }
        }
        const uint at = (it % (uint)STAGES) * (uint)(BK * KS) + j0 * (uint)KS + d0;
        UNROLL_FULL
        for (uint b = 0; b < (uint)ITEMS; ++b) {
          const uint j = j0 + b * PASS;
          if (BK % PASS == 0 || j < (uint)BK) {
            const bool live = kb + j < k1;
            *(THREADGROUP_MEM half4*)(kt + at + b * PASS * (uint)KS) = live ? kr[b] : half4(half(0.0f));
            *(THREADGROUP_MEM half4*)(vt + at + b * PASS * (uint)KS) = live ? vr[b] : half4(half(0.0f));
          }
        }
