  // The combine's buffer takes the ring's memory once every SIMD group has read its last slot: each waited for
  // every copy it issued (issue copies nothing past the end), so no copy is still in flight.
  static_assert(R * DV * 4 <= RING * 2 * 8 * DK * 2, "the combine's buffer fits in the ring");
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float* const osh = (float*)kv_memory;
