// metal_compat.cuh: the Metal names mlxgate's kernel bodies use, defined for CUDA.
//
// Each kernel body in impl/ is written ONCE, in the part of the Metal Shading
// Language that mx.fast.metal_kernel accepts. The cuda arm hands the SAME body
// string to mx.fast.cuda_kernel with this file as the start of its `header`.
// MLX (0.32.4) compiles, with NVRTC, one translation unit per kernel:
//
//   #include "mlx/backend/cuda/device/utils.cuh"  // cuda_bf16.h, cuda_fp16.h, cuda/std/{array,limits,tuple}
//   #include <cooperative_groups.h>
//   #define inf cuda::std::numeric_limits<float>::infinity()
//   <header: this file, then the kernel's own header>
//   namespace mlx::core::cu {
//   __global__ void custom_kernel_<name><template hash>(
//       const T0* in0, [const __grid_constant__ Shape in0_shape, ...] ..., T* out0, ...) {
//     constexpr int N = 4;  using OutT = __nv_bfloat16;  // template arguments
//     <body>
//   }}
//
// Facts of mx.fast.cuda_kernel (MLX 0.32.4) this file is built on: the grid
// counts threads, as in metal_kernel (blocks = ceil(grid / threadgroup)); no
// Metal builtins are injected; `uint` is not defined; functions in the header
// need __device__ (METAL_FUNC below; metal_stdlib defines it for Metal).
//
// Semantic differences a body must respect (all bodies in impl/ do):
// * A SIMD group is a warp of 32 lanes. The simd_* functions use full-warp
//   masks, so they must be reached by all 32 lanes of the warp (warp-uniform
//   control flow). Metal tolerates inactive lanes; CUDA would be undefined.
// * CUDA launches whole blocks: threads past the grid's edge exist and must be
//   bounds-checked by the body (Metal does not dispatch them).
// * threadgroup_barrier(any flags) is __syncthreads(): a full barrier that also
//   orders shared and global memory (at least as strong as any Metal flag).
// * Unqualified exp/min/max/isnan resolve to CUDA's device math functions for
//   float and unsigned int (no fast math: NVRTC's defaults, -fmad=true).
#ifndef MLXGATE_METAL_COMPAT_CUH
#define MLXGATE_METAL_COMPAT_CUH

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned long ulong;

#ifdef METAL_FUNC
#undef METAL_FUNC
#endif
#define METAL_FUNC __device__ __forceinline__

// Address spaces and barriers.
#define threadgroup __shared__
#define threadgroup_barrier(flags) __syncthreads()
// A loop over a run-time count, unrolled by 8 (remainder handled): fewer loop branches. It does not put the
// iterations' loads in flight together: each unrolled iteration keeps its guard, so nvcc's PTX still branches
// before every load (perf/RESULTS.md, the paged merge: a batch of loads at clamped indices with no branch is what
// overlaps them). The Metal prelude spells it `clang loop unroll_count(8)`.
#define UNROLL_BY_8 _Pragma("unroll 8")
#define simdgroup_barrier(flags) __syncwarp()

#ifndef INFINITY
#define INFINITY (cuda::std::numeric_limits<float>::infinity())
#endif

namespace metal_compat {

METAL_FUNC uint3 position_in_grid() {
  return make_uint3(blockIdx.x * blockDim.x + threadIdx.x, blockIdx.y * blockDim.y + threadIdx.y,
                    blockIdx.z * blockDim.z + threadIdx.z);
}

METAL_FUNC uint index_in_threadgroup() {
  return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}

}  // namespace metal_compat

// Thread-position attributes: Metal's kernel parameters, CUDA's built-in variables.
#define thread_position_in_threadgroup threadIdx
#define threadgroup_position_in_grid blockIdx
#define threads_per_threadgroup blockDim
#define threadgroups_per_grid gridDim
#define thread_position_in_grid (::metal_compat::position_in_grid())
#define thread_index_in_threadgroup (::metal_compat::index_in_threadgroup())
#define thread_index_in_simdgroup (::metal_compat::index_in_threadgroup() % 32u)
#define simdgroup_index_in_threadgroup (::metal_compat::index_in_threadgroup() / 32u)
#define threads_per_simdgroup 32u

// isnan(float): CUDA's device math library declares it under nvcc; a fallback for
// a compiler that does not. A non-template exact match always wins over this template.
#ifndef isnan
template <typename T>
METAL_FUNC bool isnan(T x) { return x != x; }
#endif

// SIMD-group functions as warp shuffles (full mask: see the note above).
template <typename T>
METAL_FUNC T simd_sum(T x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <typename T>
METAL_FUNC T simd_max(T x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = max(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

template <typename T>
METAL_FUNC T simd_min(T x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = min(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Metal: lane i reads lane i + delta; the top delta lanes keep their own value. Same in CUDA.
template <typename T>
METAL_FUNC T simd_shuffle_down(T x, uint delta) { return __shfl_down_sync(0xffffffffu, x, delta); }

template <typename T>
METAL_FUNC T simd_shuffle_up(T x, uint delta) { return __shfl_up_sync(0xffffffffu, x, delta); }

template <typename T>
METAL_FUNC T simd_shuffle_xor(T x, uint mask) { return __shfl_xor_sync(0xffffffffu, x, mask); }

template <typename T>
METAL_FUNC T simd_shuffle(T x, uint lane) { return __shfl_sync(0xffffffffu, x, lane); }

// 16-bit floats held in 32-bit words (rows read as words: one load for two or more elements). A bfloat16 is the
// top half of its float32, so the one in a word's low half is a shift away and the one in its high half a mask;
// half_bits_as_float converts the half whose bits are x's low 16. The Metal prelude spells the same three.
METAL_FUNC float bf16_lo_as_float(uint w) { return __uint_as_float(w << 16); }
METAL_FUNC float bf16_hi_as_float(uint w) { return __uint_as_float(w & 0xffff0000u); }
METAL_FUNC float half_bits_as_float(uint x) { return __half2float(__ushort_as_half((unsigned short)x)); }

// True when x is true on every lane (a warp vote).
METAL_FUNC bool simd_all(bool x) { return __all_sync(0xffffffffu, x); }

// metal:: spellings of what the bodies may call qualified.
namespace metal {
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };
METAL_FUNC float exp(float x) { return ::expf(x); }
METAL_FUNC float log(float x) { return ::logf(x); }
METAL_FUNC float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
METAL_FUNC float max(float a, float b) { return ::fmaxf(a, b); }
METAL_FUNC float min(float a, float b) { return ::fminf(a, b); }
METAL_FUNC uint max(uint a, uint b) { return a > b ? a : b; }
METAL_FUNC uint min(uint a, uint b) { return a < b ? a : b; }
METAL_FUNC bool isnan(float x) { return (__float_as_uint(x) & 0x7fffffffu) > 0x7f800000u; }
using ::simd_all;
using ::simd_max;
using ::simd_min;
using ::simd_shuffle;
using ::simd_shuffle_down;
using ::simd_shuffle_up;
using ::simd_shuffle_xor;
using ::simd_sum;
}  // namespace metal
using metal::mem_flags;

#endif  // MLXGATE_METAL_COMPAT_CUH
