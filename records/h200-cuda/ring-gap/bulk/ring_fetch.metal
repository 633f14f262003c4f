    // This step's issue is of step + RING - 1, into the slot the previous step was read from: every lane read it
    // before the SIMD-group barriers of that step's products.
    issue(t0 + (RING - 1) * (SG * TB));
    {
      const uint n = (t0 - base) / (SG * TB), slot = n % RING;
      bulk_barrier_wait(bars + 8 * slot, (n / RING) % 2);  // this step's rows have landed, for this lane to read
      const uint at = ring_base + slot * (2 * PLANE * 16);
      // Rows past the end hold whatever follows in their block: K's scores are masked below, and V is read from the
      // last live row (its weight is 0, but 0 * NaN is not 0).
      const uint v_at = PLANE + min(fr, stop - 1 - t0) * PITCH + seg * SEG;
      for (uint j = 0; j < SEG; ++j) {
        const uint turn = j + g < SEG ? 0u : SEG * 16;
        const uint4 x = ring_load16(at + (read_at + g + j) * 16 - turn);
        const uint4 y = ring_load16(at + (v_at + g + j) * 16 - turn);
        kw[0][4 * j] = x.x; kw[0][4 * j + 1] = x.y; kw[0][4 * j + 2] = x.z; kw[0][4 * j + 3] = x.w;
        vw[0][4 * j] = y.x; vw[0][4 * j + 1] = y.y; vw[0][4 * j + 2] = y.z; vw[0][4 * j + 3] = y.w;
      }
    }
