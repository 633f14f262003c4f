  // The combine's buffer takes the ring's memory once every SIMD group has read its last slot (R <= 8 rows of DV
  // floats per SIMD group against RING >= 2 slots of 16 rows of DK 16-bit elements).
  static_assert(R * DV * 4 <= RING * 2 * 8 * DK * 2, "the combine's buffer fits in the ring");
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float* const osh = (float*)kv_memory;
