
  // One threadgroup per output row: 32 dims x SL slices of the partitions, then a reduction.
  const uint d = thread_position_in_grid.x, slice = thread_position_in_threadgroup.y;
  const uint x = thread_position_in_threadgroup.x, row = threadgroup_position_in_grid.y;
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;  // partitions written (the buffer may hold more)
  constexpr uint W = DV + 2;  // a PARTS row: DV values, its partition's max, its sum (the partial's one output)
  threadgroup float tops[SL];
  threadgroup float values[SL][32], totals[SL];
  float maximum = -INFINITY;
  // Both loops unrolled by 8, so a slice issues 8 partitions' loads together (the merge took 9 us for 128
  // partitions at 32/8/D128 and 25 us for kvq4's 512 on the H200 before; unrolled: within noise at D128, 3.5%
  // faster per call at D256/N128k).
  UNROLL_BY_8
  for (uint part = slice; part < count; part += SL) maximum = max(maximum, parts[(row * count + part) * W + DV]);
  if (x == 0) tops[slice] = maximum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = 0; s < SL; ++s) maximum = max(maximum, tops[s]);
  float sum = 0, value = 0;
  UNROLL_BY_8
  for (uint part = slice; part < count; part += SL) {
    uint base = (row * count + part) * W;
    float weight = exp(parts[base + DV] - maximum);
    sum = fma(parts[base + DV + 1], weight, sum);
    value = fma(d < DV ? parts[base + d] : 0.0f, weight, value);
  }
  values[slice][x] = value;
  if (x == 0) totals[slice] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (slice == 0 && d < DV) {
    float v = 0, t = 0;
    for (uint s = 0; s < SL; ++s) { v += values[s][x]; t += totals[s]; }
    out[row * DV + d] = OutT(v / t);
  }
