  // The combine's buffer takes the ring's memory once every SIMD group has read its last slot.
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float* const osh = (float*)kv_memory;
