
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
template <typename P>
METAL_FUNC bool vector_aligned(P) {  // P: a device or a constant pointer (a small input's row: load_chunk below)
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

#if !defined(__CUDACC__)
// Metal passes an input of fewer than 8 elements (logits [1, 5], [2, 3], ...) in its constant address space, and
// no device pointer may be made of a constant one, not even by the cast above on a path never taken: such a row
// takes this overload, which reads the same columns element by element (vectors is false on Metal anyway:
// vector_aligned). The overload above stays as it was: sharing its element loop through a helper changed nvcc's
// code for the fused variant's vector path (3.9 KiB more SASS at V = 151936), and the loop's text is what
// mutants/catalog.py's argmax_row_end_one_short edits (it must occur once, so this one is spelled otherwise).
// CUDA has no address spaces (DEVICE_MEM is empty there): the overload above serves every row, and this one would
// collide with it.
template <typename T>
METAL_FUNC Chunk load_chunk(const constant T* x, uint k, uint V, bool) {
  Chunk c;
  for (uint e = 0; e < 4u; ++e) {
    const uint i = 4u * k + e;
    c.v[e] = i >= V ? -INFINITY : float(x[i]);
  }
  return c;
}
#endif