  float top = -INFINITY, before = -INFINITY;  // the largest logit; the largest before its first id
  uint topId = 0xffffffffu;
  const auto larger = [](float a, float b) { return a < b ? b : a; };  // cooperative_groups::greater
  const uint rounds = (chunks + THREADS - 1u) / THREADS;  // MLX's ceil(V / (4 * BLOCK)): every thread runs them all
  float maxval = __int_as_float(0xff7fffff), normalizer = 0.0f;
  for (uint r0 = 0; r0 < rounds; r0 += UNROLL) {
    Chunk c[UNROLL];
    for (uint u = 0; u < UNROLL; ++u) c[u] = load_chunk<T>(x, (r0 + u) * THREADS + tid, V, vectors);
    for (uint u = 0; u < UNROLL && r0 + u < rounds; ++u) {
      const float prevmax = maxval;
      maxval = larger(maxval, larger(larger(larger(c[u].v[0], c[u].v[1]), c[u].v[2]), c[u].v[3]));
      normalizer = normalizer * __expf(prevmax - maxval);
      for (uint e = 0; e < 4u; ++e) normalizer = normalizer + __expf(c[u].v[e] - maxval);
      for (uint e = 0; e < 4u; ++e) {
        if (c[u].v[e] > top) { before = top; top = c[u].v[e]; topId = 4u * ((r0 + u) * THREADS + tid) + e; }
      }
    }
  }
  float prevmax = maxval;
  for (int m = 16; m > 0; m >>= 1) maxval = larger(maxval, __shfl_xor_sync(0xffffffffu, maxval, m));
  normalizer = normalizer * __expf(prevmax - maxval);
  for (int m = 16; m > 0; m >>= 1) normalizer = normalizer + __shfl_xor_sync(0xffffffffu, normalizer, m);
  threadgroup float warp_max[32], warp_normalizer[32];
  prevmax = maxval;
  if (lane == 0) warp_max[simd] = maxval;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  maxval = lane < THREADS / 32 ? warp_max[lane] : __int_as_float(0xff7fffff);
  for (int m = 16; m > 0; m >>= 1) maxval = larger(maxval, __shfl_xor_sync(0xffffffffu, maxval, m));
  normalizer = normalizer * __expf(prevmax - maxval);
  if (lane == 0) warp_normalizer[simd] = normalizer;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  normalizer = lane < THREADS / 32 ? warp_normalizer[lane] : 0.0f;
  for (int m = 16; m > 0; m >>= 1) normalizer = normalizer + __shfl_xor_sync(0xffffffffu, normalizer, m);
  const T rounded = T(isinf(maxval) ? maxval : logf(normalizer) + maxval);
  STORE_LSE
  const float shift = float(rounded);
