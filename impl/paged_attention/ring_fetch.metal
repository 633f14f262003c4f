    // The step's reads come before its copies for step + RING - 1 (ring_issue.metal, after the score product), so
    // they do not queue behind 8 copy instructions in the memory-instruction pipe that holds the partial; the groups
    // pending here are those of the RING - 2 steps after this one.
    async_copy_wait<RING - 2>();                    // this lane's copies of this step have landed
    simdgroup_barrier(mem_flags::mem_threadgroup);  // and every lane's
    {
      const uint slot = ring_base + ((t0 / (SG * TB)) % RING) * (2 * PLANE * 16);
      // Rows past the end hold whatever follows in their block: K's scores are masked below, and V is read from the
      // last live row (its weight is 0, but 0 * NaN is not 0).
      const uint vr = min(fr, stop - 1 - t0), v_at = vr * RC + seg * SEG, v_flip = (flip & 2u) ^ (vr & 1u);
      for (uint j = 0; j < SEG; ++j) {
        const uint4 x = ring_load16(slot + (read_at + (j ^ flip)) * 16);
        const uint4 y = ring_load16(slot + (PLANE + v_at + (j ^ v_flip)) * 16);
        kw[0][4 * j] = x.x; kw[0][4 * j + 1] = x.y; kw[0][4 * j + 2] = x.z; kw[0][4 * j + 3] = x.w;
        vw[0][4 * j] = y.x; vw[0][4 * j + 1] = y.y; vw[0][4 * j + 2] = y.z; vw[0][4 * j + 3] = y.w;
      }
    }
