  // The combine's buffer takes the ring's memory once every SIMD group has read its last slot (R <= 8 rows of DV
  // floats per SIMD group against RING >= 2 slots of 16 rows of DK 16-bit elements) and no copy of this thread is
  // still in flight: the loop leaves RING - 1 groups pending (its last wait RING - 2, then the last step's issue),
  // empty while every issued step is a read one (issue copies nothing past the end), and waiting for all of them
  // here keeps a copy nobody reads from landing in the combine's buffer whatever issue does.
  static_assert(R * DV * 4 <= RING * 2 * 8 * DK * 2, "the combine's buffer fits in the ring");
  async_copy_wait<0>();
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float* const osh = (float*)kv_memory;
