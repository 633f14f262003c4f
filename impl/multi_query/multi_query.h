
#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif
#ifndef THREADGROUP_MEM
#define THREADGROUP_MEM threadgroup  // Metal's threadgroup address space (the CUDA prelude: empty)
#endif
#ifndef UNROLL_FULL
#define UNROLL_FULL _Pragma("clang loop unroll(full)")  // the CUDA prelude: _Pragma("unroll")
#endif
#ifndef ROLE_BARRIER
// The two-stage partial's barrier (CUDA's named barrier: the CUDA prelude). Metal has every thread of a threadgroup
// meet at the same barrier call, so it never runs the two-stage loops (pipeline_stages gives it one stage).
#define ROLE_BARRIER(threads) threadgroup_barrier(metal::mem_flags::mem_threadgroup)
#endif

// Whether a K / V view starts where 4-wide vector loads may read it (4 elements' bytes). On CUDA the address says:
// a row-contiguous view may start anywhere (flat[2:].reshape(...), as_strided with an odd offset), MLX passes it
// without a copy, and a misaligned vector load faults, so such a view is read by elements there. Metal relies on no
// pointer-to-integer cast (normalized_argmax.h does the same), and MLX exposes no view offset to check before a
// launch: there a view starts 4-element aligned by contract (the package's docstring), as every slice of a cache
// along heads or tokens does.
#if defined(__CUDACC__)
template <typename T>
METAL_FUNC bool starts_vector_aligned(const T* p) {
  return reinterpret_cast<unsigned long long>(p) % (4ull * sizeof(T)) == 0ull;
}
#else
template <typename P>
METAL_FUNC bool starts_vector_aligned(P) {  // P: a device or a constant pointer (Metal passes a tiny input in constant)
  return true;
}
#endif

// Dims [d, d + 4) of one K/V row as half: one 4-wide vector load (the row allows it), or 4 loads `step` apart.
template <typename T>
METAL_FUNC half4 load4_vector(const DEVICE_MEM T* src, ulong at) {
  const metal::vec<T, 4> raw = *(const DEVICE_MEM metal::vec<T, 4>*)(src + at);  // one load, by value
  return half4(float4(raw));
}

#if defined(__CUDACC__)
// CUDA, bfloat16 rows: the 4-vector as one 8-byte load of two words, each half widened by a shift or a mask (a
// bfloat16 is the top half of its float32; nvcc had converted element by element: two PRMTs and four IMADs per
// 4-vector in the staging, measured with ncu on the H200). Metal converts natively.
template <>
METAL_FUNC half4 load4_vector<__nv_bfloat16>(const __nv_bfloat16* src, ulong at) {
  const uint2 w = *(const uint2*)(src + at);
  return half4(make_float4(bf16_lo_as_float(w.x), bf16_hi_as_float(w.x),
                           bf16_lo_as_float(w.y), bf16_hi_as_float(w.y)));
}
#endif

#if defined(__CUDACC__)
// The ring partial's conversion (CUDA only, like the ring): the 16-byte chunk of T at src as half at dst (16 /
// sizeof(T) elements; dst 16- or, for float32, 8-byte aligned), zeros when !live. Whole 32-bit words: a bfloat16
// word's two elements widen by a shift and a mask and round to nearest even as one pair, a float16 chunk is copied.
// The same numbers as load4_vector's half4(float4): ncu on the H200 had that conversion, element by element through
// half4, at ~4 instructions per element and 39% of the ring partial's instructions at 32/8/L8/D128 (byte permutes
// assembling half4s, in ncu's per-instruction SASS counts of the ring partial).
METAL_FUNC uint half2_bits(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits: the element first in memory
  return *(const uint*)&h;
}
template <typename T>
METAL_FUNC void chunk_to_half(const T* src, half* dst, bool live);
template <>
METAL_FUNC void chunk_to_half<__nv_bfloat16>(const __nv_bfloat16* src, half* dst, bool live) {
  const uint4 w = *(const uint4*)src;
  const uint4 h = make_uint4(half2_bits(bf16_lo_as_float(w.x), bf16_hi_as_float(w.x)),
                             half2_bits(bf16_lo_as_float(w.y), bf16_hi_as_float(w.y)),
                             half2_bits(bf16_lo_as_float(w.z), bf16_hi_as_float(w.z)),
                             half2_bits(bf16_lo_as_float(w.w), bf16_hi_as_float(w.w)));
  *(uint4*)dst = live ? h : make_uint4(0u, 0u, 0u, 0u);
}
template <>
METAL_FUNC void chunk_to_half<__half>(const __half* src, half* dst, bool live) {
  *(uint4*)dst = live ? *(const uint4*)src : make_uint4(0u, 0u, 0u, 0u);
}
template <>
METAL_FUNC void chunk_to_half<float>(const float* src, half* dst, bool live) {
  const float4 f = *(const float4*)src;
  const uint2 h = make_uint2(half2_bits(f.x, f.y), half2_bits(f.z, f.w));
  *(uint2*)dst = live ? h : make_uint2(0u, 0u);
}
#endif

template <typename T>
METAL_FUNC half4 load4_strided(const DEVICE_MEM T* src, ulong at, ulong step) {
  half4 h;
  for (uint e = 0; e < 4u; ++e) h[e] = half(float(src[at + (ulong)e * step]));
  return h;
}
