
  // One threadgroup per output row: 32 dims x SL slices of the partitions, then a reduction across the slices.
  const uint d = thread_position_in_grid.x, slice = thread_position_in_threadgroup.y;
  const uint x = thread_position_in_threadgroup.x, row = threadgroup_position_in_grid.y;
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;  // partitions written (the buffer may hold more)
  constexpr uint W = DV + 2;  // a PARTS row: DV values, its partition's max, its sum (the partial's one output)
  const uint dim = min(d, uint(DV) - 1);  // a lane past DV reads a live dim and stores nothing
  // One online pass: a slice reads B partitions' rows together (template B, launch.merge_batch), partitions SL
  // apart, then rescales its state to their max and adds them. Every load is unconditional, at an index clamped to
  // the last partition (a partition past the count weighs 0 through its -inf max): a load behind its own guard
  // waits for the one before it (a loop over a run-time count, unrolled, still branches before each load). H200
  // kernel time at 8/1/D128/N32k, 256 partitions: 3.6 us, against 5.9 for two passes of guarded loads.
  float maximum = -INFINITY, sum = 0.0f, value = 0.0f;
  for (uint first = slice; first < count; first += B * SL) {
    float top[B], total[B], v[B];
    for (uint k = 0; k < B; ++k) {
      const uint part = first + k * SL;
      const uint base = (row * count + min(part, count - 1)) * W;
      const float m = parts[base + DV];
      top[k] = part < count ? m : -INFINITY;
      total[k] = parts[base + DV + 1];
      v[k] = parts[base + dim];
    }
    float next = maximum;
    for (uint k = 0; k < B; ++k) next = max(next, top[k]);
    // Weights relative to the new max, or to 0 while no partition so far sees a token of this row (all -inf:
    // exp(-inf - 0) = 0 where -inf - -inf would be NaN). No branch: the sums' loads above stay in flight with the max's.
    const float shift = next == -INFINITY ? 0.0f : next;
    const float factor = exp(maximum - shift);
    sum *= factor;
    value *= factor;
    for (uint k = 0; k < B; ++k) {
      const float weight = exp(top[k] - shift);
      sum = fma(total[k], weight, sum);
      value = fma(v[k], weight, value);
    }
    maximum = next;
  }
  // Across the slices: every slice rescales its own state to the row's max (one exp per thread, all slices at once),
  // then one SIMD group adds them. With the rescale in that last loop (32 exps in one SIMD group, one after another)
  // the merge took 4.1 against 3.2 us at 32 partitions, 4.4 against 3.6 at 256 (H200 kernel time).
  threadgroup float tops[SL], totals[SL];
  threadgroup float values[SL][32];
  if (x == 0) tops[slice] = maximum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float top = -INFINITY;
  for (uint s = 0; s < SL; ++s) top = max(top, tops[s]);
  const float weight = maximum == -INFINITY ? 0.0f : exp(maximum - top);  // a slice that saw nothing adds 0
  values[slice][x] = value * weight;
  if (x == 0) totals[slice] = sum * weight;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (slice == 0 && d < DV) {
    float o = 0.0f, t = 0.0f;
    for (uint s = 0; s < SL; ++s) { o += values[s][x]; t += totals[s]; }
    out[row * DV + d] = OutT(o / t);
  }
