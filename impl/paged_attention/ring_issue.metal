    // The copies of step + RING - 1 go into the slot the previous step was read from: every lane read it before the
    // SIMD-group barriers of that step's products. Issued once the score product has this step's K words, so the
    // reads above do not wait behind them, and the step's V reads are already in registers (issued after the reads,
    // with K's words still live, the partial took 141 registers against 125: nvcc 13, sm_90).
    issue(t0 + (RING - 1) * (SG * TB));
