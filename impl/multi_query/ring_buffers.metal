
  // The STAGES half buffers of the two-stage partial, then RING raw slots of one block of K and V as T.
  extern __shared__ __align__(16) unsigned char kv_memory[];
  half* const kt = (half*)kv_memory;
  half* const vt = kt + STAGES * BK * KS;
  T* const raw = (T*)(vt + STAGES * BK * KS);
