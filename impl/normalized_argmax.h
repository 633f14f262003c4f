
#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif

// Whether a row starting at p may be read as 4-lane vectors (aligned to 4 elements' bytes).
#if defined(__CUDACC__)
template <typename T>
METAL_FUNC bool vector_aligned(const T* p) {
  return reinterpret_cast<unsigned long long>(p) % (4ull * sizeof(T)) == 0ull;
}
#else
template <typename T>
METAL_FUNC bool vector_aligned(const DEVICE_MEM T*) {
  return false;  // no pointer-to-integer cast relied on in Metal: read elements
}
#endif

struct Chunk {
  float v[4];
};

// Columns [4k, 4k + 4) of a row as float; -inf past the row's end V (they never win).
template <typename T>
METAL_FUNC Chunk load_chunk(const DEVICE_MEM T* x, uint k, uint V, bool vectors) {
  Chunk c;
  if (vectors && k < V / 4u) {
    const metal::vec<T, 4> raw = ((const DEVICE_MEM metal::vec<T, 4>*)x)[k];  // one load, by value
    const float4 f = float4(raw);
    c.v[0] = f.x; c.v[1] = f.y; c.v[2] = f.z; c.v[3] = f.w;
  } else {
    for (uint e = 0; e < 4u; ++e) {
      const uint i = 4u * k + e;
      c.v[e] = i < V ? float(x[i]) : -INFINITY;
    }
  }
  return c;
}