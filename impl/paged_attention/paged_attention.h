// paged_attention.h: the paged partials' helpers. Guarded: the matrix partial's header is simdgroup.h + this file,
// and a translation unit that holds both partials (the nvcc batch test) includes it twice.
#ifndef MLXGATE_PAGED_ATTENTION_H
#define MLXGATE_PAGED_ATTENTION_H

#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif

// V = 8 or 4 consecutive elements of a plain row as float (the body's vector loads; the caller's
// pointer is aligned to V elements: rows of a multiple of V elements, each lane starting at a
// multiple of V). The 16-bit dtypes read them as one 16-byte (8-byte) load of 32-bit words and
// widen each word's pair, element 2i the low half of word i: nvcc compiled the 4 x bfloat16 struct
// load of metal::vec<T, 4> as four 2-byte loads. Float32 reads one 4-vector (V = 8: never given).
struct Wide8 {
  float v[8];
};
struct Wide4 {
  float v[4];
};

template <typename T>
METAL_FUNC Wide8 load8(const DEVICE_MEM T* p) {
  Wide8 r;
  for (uint e = 0; e < 8; ++e) r.v[e] = float(p[e]);
  return r;
}

template <typename T>
METAL_FUNC Wide4 load4(const DEVICE_MEM T* p) {
  const float4 x = float4(*(const DEVICE_MEM metal::vec<T, 4>*)p);
  return Wide4{{x.x, x.y, x.z, x.w}};
}

#if defined(__CUDACC__)
#define PAGED_BF16 __nv_bfloat16
#define PAGED_F16 __half
#else
#define PAGED_BF16 bfloat16_t
#define PAGED_F16 half
#endif

template <>
METAL_FUNC Wide8 load8<PAGED_BF16>(const DEVICE_MEM PAGED_BF16* p) {
  const uint4 x = *(const DEVICE_MEM uint4*)p;
  const uint w[4] = {x.x, x.y, x.z, x.w};
  Wide8 r;
  for (uint i = 0; i < 4; ++i) {  // a bfloat16 is the top half of its float32
    r.v[2 * i] = bf16_lo_as_float(w[i]);
    r.v[2 * i + 1] = bf16_hi_as_float(w[i]);
  }
  return r;
}

template <>
METAL_FUNC Wide4 load4<PAGED_BF16>(const DEVICE_MEM PAGED_BF16* p) {
  const uint2 x = *(const DEVICE_MEM uint2*)p;
  return Wide4{{bf16_lo_as_float(x.x), bf16_hi_as_float(x.x),
                bf16_lo_as_float(x.y), bf16_hi_as_float(x.y)}};
}

template <>
METAL_FUNC Wide4 load4<PAGED_F16>(const DEVICE_MEM PAGED_F16* p) {
  const uint2 x = *(const DEVICE_MEM uint2*)p;
  return Wide4{{half_bits_as_float(x.x & 0xffffu), half_bits_as_float(x.x >> 16),
                half_bits_as_float(x.y & 0xffffu), half_bits_as_float(x.y >> 16)}};
}

template <>
METAL_FUNC Wide8 load8<PAGED_F16>(const DEVICE_MEM PAGED_F16* p) {
  const uint4 x = *(const DEVICE_MEM uint4*)p;
  const uint w[4] = {x.x, x.y, x.z, x.w};
  Wide8 r;
  for (uint i = 0; i < 4; ++i) {
    r.v[2 * i] = half_bits_as_float(w[i] & 0xffffu);
    r.v[2 * i + 1] = half_bits_as_float(w[i] >> 16);
  }
  return r;
}

#if !defined(__CUDACC__)
// Metal passes an input of fewer than 8 elements (a pool of one block of one KV head with a few dims: K or V
// [1, 1, 1, 4]) in the constant address space. The overloads above take device pointers, and no device pointer may
// be made of a constant one (not even by their casts, on a path never taken: the body's load block names load8 and
// load4 whatever its lane count), so such a plane's rows take these, which read elements. CUDA has no address spaces
// (DEVICE_MEM is empty there): the overloads above serve every plane, and these would collide with them.
template <typename T>
METAL_FUNC Wide8 load8(const constant T* p) {
  Wide8 r;
  for (uint e = 0; e < 8; ++e) r.v[e] = float(p[e]);
  return r;
}

template <typename T>
METAL_FUNC Wide4 load4(const constant T* p) {
  return Wide4{{float(p[0]), float(p[1]), float(p[2]), float(p[3])}};
}
#endif

// --- the matrix partial's helpers (partial_matrix.metal) -------------------------------------------------------

#if defined(__CUDACC__)
#define PAGED_THREAD_MEM  // CUDA has no address spaces
#else
#define PAGED_THREAD_MEM thread
#endif

// A K / V load. Each row is read once per call, by one SIMD group: on CUDA an evict-first load (ld.global.cs,
// __ldcs), so the rows streaming through do not push out of L1 / L2 what is reused (q, the block table). H200
// kernel time of the matrix partial's variants (records/h200-cuda/matrix-partial-loads/): 32/8/D128/N32k 40.5-40.7
// against 42.6-43.3 us for plain loads, N128k 135.6-136.0 against 137.6-138.2, 8/1/N32k 16.5 against 16.4-17.1;
// ld.global.nc, an L2 256-byte prefetch hint, L1::no_allocate and a prefetch of the next step's rows into L2 gained
// nothing or lost (the prefetch 4-9%). Metal has no cache hint on a load: a plain one.
#if defined(__CUDACC__)
#define STREAM_LOAD(VecT, p) __ldcs((const VecT*)(p))
#else
#define STREAM_LOAD(VecT, p) (*((const DEVICE_MEM VecT*)(p)))
#endif

// W 32-bit words of a row segment (W even; the segment 16-byte aligned when W is a multiple of 4, else 8-byte):
// 16-byte loads where W allows, else 8-byte ones.
template <uint W>
METAL_FUNC void load_words(const DEVICE_MEM uint* p, PAGED_THREAD_MEM uint (&w)[W]) {
  if (W % 4 == 0) {
    for (uint i = 0; i < W; i += 4) {
      const uint4 x = STREAM_LOAD(uint4, p + i);
      w[i] = x.x; w[i + 1] = x.y; w[i + 2] = x.z; w[i + 3] = x.w;
    }
  } else {
    for (uint i = 0; i < W; i += 2) {
      const uint2 x = STREAM_LOAD(uint2, p + i);
      w[i] = x.x; w[i + 1] = x.y;
    }
  }
}

// The 16-bit element in the low (first in memory) or high half of a word, as T (bfloat16 or float16), bit for bit.
#if defined(__CUDACC__)
template <typename T>
METAL_FUNC T word_lo(uint w);
template <typename T>
METAL_FUNC T word_hi(uint w);
template <>
METAL_FUNC __nv_bfloat16 word_lo<__nv_bfloat16>(uint w) { return __ushort_as_bfloat16((unsigned short)(w & 0xffffu)); }
template <>
METAL_FUNC __nv_bfloat16 word_hi<__nv_bfloat16>(uint w) { return __ushort_as_bfloat16((unsigned short)(w >> 16)); }
template <>
METAL_FUNC __half word_lo<__half>(uint w) { return __ushort_as_half((unsigned short)(w & 0xffffu)); }
template <>
METAL_FUNC __half word_hi<__half>(uint w) { return __ushort_as_half((unsigned short)(w >> 16)); }
#else
template <typename T>
METAL_FUNC T word_lo(uint w) { return as_type<T>(ushort(w & 0xffffu)); }
template <typename T>
METAL_FUNC T word_hi(uint w) { return as_type<T>(ushort(w >> 16)); }
#endif

#endif  // MLXGATE_PAGED_ATTENTION_H
