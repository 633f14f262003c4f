// metal_simdgroup.cuh: the rest of the Metal the decode kernels use, for CUDA.
//
// Included after metal_compat.cuh (impl/kernels/compile.py: CUDA_PRELUDE is the
// two files, in that order). metal_compat.cuh covers scalar Metal (uint,
// thread positions, simd_* reductions and shuffles, threadgroup arrays,
// barriers, metal:: math); this file adds what impl/kvq4_decode.py and
// impl/multi_query.py need beyond it:
//
// * `DEVICE_MEM`: Metal's `device` address space for a pointer type the
//   bodies must spell (a cast to a vector pointer); a kernel header defines it
//   as `device` unless it is defined, and here it is defined empty: CUDA
//   pointers are generic. (`device` itself cannot be a macro: CUDA's
//   `__device__` expands to `__attribute__((device))` at every later use.)
//   Other pointers are never spelled out: `auto` and template deduction carry
//   the address space (a threadgroup pointer could not be spelled anyway:
//   `threadgroup` is `__shared__` for the arrays it declares, and
//   `__shared__ half* p = ...` is an error).
// * `#pragma clang loop unroll(full)` (the seed's spelling, kept): nvcc and
//   NVRTC ignore it with warning 20199-D ("unrecognized #pragma in device
//   code"), suppressed below, and unroll by their own heuristics. Measured
//   with nvcc 13.0 -Xptxas -v (sm_90): kvq4 decode is fully unrolled (no stack
//   frame); multi-query's D/8-fragment loops are not, so its `qf` and `o`
//   arrays live in local memory (a stack frame of 1.5 * D bytes, no spills).
//   Forcing the unroll (`_Pragma("unroll")`) keeps them in registers but costs
//   ~4 s of compilation per instantiation instead of ~0.3 s, and the seed
//   specializes multi-query on the cache length N: one compilation per N.
// * `ulong2(x, y)`: CUDA's ulong2 is an aggregate (no two-argument functional
//   cast in C++17), so the call spelling is a function-like macro over
//   make_ulong2; the type name itself is untouched.
// * `half4` (CUDA has none) with Metal's conversions: `half4(float4)` rounds
//   each lane to nearest even (as Metal's conversion does), `half4(half)`
//   splats, `[i]` indexes a lane.
// * `metal::vec<T, 4>`: a 4-lane vector of T (float, __half, __nv_bfloat16)
//   aligned to its size like Metal's, with `float4(v)` (an `operator float4`).
// * simdgroup matrices, 8x8 only (all the bodies use):
//   `metal::simdgroup_matrix<T, 8, 8>` (`simdgroup_half8x8`,
//   `simdgroup_float8x8`, `simdgroup_bfloat8x8`), `thread_elements()`,
//   `make_filled_simdgroup_matrix`, `simdgroup_load` (with Metal's transpose
//   flag) and `simdgroup_multiply_accumulate`.
//
// Simdgroup matrices on a warp. A Metal 8x8 matrix is spread over the 32 lanes
// of a SIMD group, two elements per lane; the layout is Metal's own (the seed,
// multi-query.ts, depends on it to address rows and columns from
// thread_elements()):
//
//   lane l holds row    fm = ((l / 4) & 4) + ((l / 2) % 4)
//            columns    fn = ((l / 4) & 2) * 2 + (l % 2) * 2   and fn + 1
//
// i.e. with l's bits b4..b0: fm = b1 + 2*b2 + 4*b4, fn = 2*b0 + 4*b3. The same
// layout is kept here, so the bodies' fm/fn arithmetic holds unchanged.
// simdgroup_load reads each lane's two elements straight from memory.
// simdgroup_multiply_accumulate(D, A, B, C) computes D = A*B + C with warp
// shuffles: for k = 0, 2, 4, 6 a lane fetches A[fm][k], A[fm][k+1] from the lane
// holding that pair of its row, and B[k][fn..fn+1], B[k+1][fn..fn+1] from the
// lanes holding those pairs of its columns (two elements per shuffle for half
// and bfloat, packed in 32 bits), then accumulates in float:
// acc = fma(a, b, acc), starting from C, over k = 0..7 in order. The
// products of half (or bfloat) inputs are exact in float; only the order of
// the float additions may differ from Apple's matrix unit (not documented):
// a rounding difference, which the attention gates bound, never an exact
// contract. Every lane of the warp must reach these calls (warp-uniform
// control flow, as for the simd_* functions of metal_compat.cuh); the bodies
// call them under simdgroup-uniform conditions only.
#ifndef MLXGATE_METAL_SIMDGROUP_CUH
#define MLXGATE_METAL_SIMDGROUP_CUH

#ifndef MLXGATE_METAL_COMPAT_CUH
#error "metal_simdgroup.cuh extends metal_compat.cuh: include that first"
#endif

#pragma nv_diag_suppress 20199

#define DEVICE_MEM
#define ulong2(x, y) make_ulong2((x), (y))

struct alignas(8) half4 {
  half v[4];
  half4() = default;
  __device__ __forceinline__ explicit half4(half x) : v{x, x, x, x} {}
  __device__ __forceinline__ explicit half4(float4 a)
      : v{__float2half_rn(a.x), __float2half_rn(a.y), __float2half_rn(a.z), __float2half_rn(a.w)} {}
  __device__ __forceinline__ half& operator[](uint i) { return v[i]; }
  __device__ __forceinline__ const half& operator[](uint i) const { return v[i]; }
};

namespace metal {

template <typename T, int N>
struct vec;

template <typename T>
struct alignas(4 * sizeof(T)) vec<T, 4> {
  T v[4];
  __device__ __forceinline__ operator float4() const {
    return make_float4(float(v[0]), float(v[1]), float(v[2]), float(v[3]));
  }
};

// --- simdgroup matrices -----------------------------------------------------

template <typename T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the CUDA prelude implements 8x8 simdgroup matrices only");
  T e[2];  // this lane's elements: (fm, fn) and (fm, fn + 1)
  __device__ __forceinline__ T* thread_elements() { return e; }
  __device__ __forceinline__ const T* thread_elements() const { return e; }
};

typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<__nv_bfloat16, 8, 8> simdgroup_bfloat8x8;

}  // namespace metal

namespace metal_simdgroup {

METAL_FUNC uint lane() { return ::metal_compat::index_in_threadgroup() % 32u; }
METAL_FUNC uint row_of(uint l) { return ((l / 4u) & 4u) + ((l / 2u) % 4u); }
METAL_FUNC uint col_of(uint l) { return ((l / 4u) & 2u) * 2u + (l % 2u) * 2u; }
// The lane holding elements (r, c) and (r, c + 1), c even: the inverse of row_of / col_of.
METAL_FUNC uint lane_of(uint r, uint c) {
  return ((c >> 1) & 1u) | ((r & 1u) << 1) | (((r >> 1) & 1u) << 2) | ((c >> 2) << 3) | ((r >> 2) << 4);
}

// A lane's element pair as lane `src` holds it (every lane must call: full mask).
template <typename T>
struct pair_shuffle {
  static __device__ __forceinline__ void get(const T (&e)[2], uint src, float& x, float& y) {
    x = float(__shfl_sync(0xffffffffu, e[0], src));
    y = float(__shfl_sync(0xffffffffu, e[1], src));
  }
};

template <>
struct pair_shuffle<__half> {
  static __device__ __forceinline__ void get(const __half (&e)[2], uint src, float& x, float& y) {
    const float2 f = __half22float2(__shfl_sync(0xffffffffu, __halves2half2(e[0], e[1]), src));
    x = f.x;
    y = f.y;
  }
};

template <>
struct pair_shuffle<__nv_bfloat16> {
  static __device__ __forceinline__ void get(const __nv_bfloat16 (&e)[2], uint src, float& x, float& y) {
    const float2 f = __bfloat1622float2(__shfl_sync(0xffffffffu, __halves2bfloat162(e[0], e[1]), src));
    x = f.x;
    y = f.y;
  }
};

}  // namespace metal_simdgroup

namespace metal {

template <typename T, int Cols, int Rows>
METAL_FUNC simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.e[0] = value;
  m.e[1] = value;
  return m;
}

// Metal: simdgroup_load(d, src, elements_per_row, matrix_origin, transpose_matrix).
// The stored matrix's element (r, c) is src[(origin.y + r) * elements_per_row + origin.x + c];
// d is that matrix, or its transpose when `transpose`.
template <typename T, typename U>
METAL_FUNC void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, const U* src, ulong elements_per_row = 8,
                               ulong2 matrix_origin = ulong2(0, 0), bool transpose_matrix = false) {
  const uint l = ::metal_simdgroup::lane();
  const ulong r = ::metal_simdgroup::row_of(l), c = ::metal_simdgroup::col_of(l);
  const U* base = src + matrix_origin.y * elements_per_row + matrix_origin.x;
  if (transpose_matrix) {  // d[r][c] = stored[c][r]
    d.e[0] = T(base[c * elements_per_row + r]);
    d.e[1] = T(base[(c + 1) * elements_per_row + r]);
  } else {
    d.e[0] = T(base[r * elements_per_row + c]);
    d.e[1] = T(base[r * elements_per_row + c + 1]);
  }
}

// D = A * B + C (D may be C): float accumulation, see the file comment.
template <typename TD, typename TA, typename TB, typename TC>
METAL_FUNC void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                              const simdgroup_matrix<TB, 8, 8>& b,
                                              const simdgroup_matrix<TC, 8, 8>& c) {
  const uint l = ::metal_simdgroup::lane();
  const uint r = ::metal_simdgroup::row_of(l), col = ::metal_simdgroup::col_of(l);
  float acc0 = float(c.e[0]), acc1 = float(c.e[1]);
#pragma unroll
  for (uint k = 0; k < 8u; k += 2u) {
    float a0, a1, b00, b01, b10, b11;  // A[r][k], A[r][k+1]; B[k][col], B[k][col+1]; B[k+1][...]
    ::metal_simdgroup::pair_shuffle<TA>::get(a.e, ::metal_simdgroup::lane_of(r, k), a0, a1);
    ::metal_simdgroup::pair_shuffle<TB>::get(b.e, ::metal_simdgroup::lane_of(k, col), b00, b01);
    ::metal_simdgroup::pair_shuffle<TB>::get(b.e, ::metal_simdgroup::lane_of(k + 1u, col), b10, b11);
    acc0 = ::fmaf(a0, b00, acc0);
    acc0 = ::fmaf(a1, b10, acc0);
    acc1 = ::fmaf(a0, b01, acc1);
    acc1 = ::fmaf(a1, b11, acc1);
  }
  d.e[0] = TD(acc0);
  d.e[1] = TD(acc1);
}

}  // namespace metal

#endif  // MLXGATE_METAL_SIMDGROUP_CUH
