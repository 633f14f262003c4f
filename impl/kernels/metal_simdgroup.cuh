// metal_simdgroup.cuh: the rest of the Metal the decode kernels use, for CUDA.
//
// Included after metal_compat.cuh (impl/kernels/compile.py: CUDA_PRELUDE is the
// two files, in that order). metal_compat.cuh covers scalar Metal (uint,
// thread positions, simd_* reductions and shuffles, threadgroup arrays,
// barriers, metal:: math); this file adds what impl/kvq4_decode.py,
// impl/multi_query/ and impl/paged_attention/ need beyond it:
//
// * `DEVICE_MEM` / `THREADGROUP_MEM`: Metal's `device` / `threadgroup` address
//   spaces for a pointer type a body must spell (a cast to a vector pointer); a
//   kernel header defines them as `device` / `threadgroup` unless they are
//   defined, and here they are defined empty: CUDA pointers are generic.
//   (`device` itself cannot be a macro: CUDA's `__device__` expands to
//   `__attribute__((device))` at every later use; `threadgroup` is the
//   declaration specifier `__shared__`, which a cast cannot carry.) Other
//   pointers are never spelled out: `auto` and template deduction carry the
//   address space.
// * Threadgroup arrays are 16-byte aligned, as Metal aligns threadgroup
//   allocations (CUDA aligns a `__shared__` array to its element only): a body
//   may store a half4 into a half array at a multiple of 4 elements, and the
//   simdgroup loads below read 16-bit pairs as one 32-bit word.
// * `ROLE_BARRIER(threads)`: a barrier SIMD groups may reach from different call
//   sites (below).
// * `UNROLL_FULL`: `_Pragma("unroll")`, the CUDA spelling of the seed's
//   `#pragma clang loop unroll(full)` (a kernel header defines the Metal one).
//   nvcc and NVRTC ignore the clang spelling (warning 20199-D, "unrecognized
//   #pragma in device code", suppressed below, for the bodies that still write
//   it) and unroll by their own heuristics: measured with nvcc 13.0 -Xptxas -v
//   (sm_90), kvq4 decode is fully unrolled that way, multi-query's
//   D/8-fragment loops were not (its fragment arrays lived in local memory:
//   a stack frame of 1.25-1.5 * D bytes); multi-query writes UNROLL_FULL.
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
//   flag) and `simdgroup_multiply_accumulate`; and the fragment layout
//   (`SG_FRAGMENT_LAYOUT`, below) the bodies address thread_elements() by.
// * `simdgroup_load_x4(m0, m1, m2, m3, src, elements_per_row, transpose)`: four
//   side-by-side 8x8 loads, one `ldmatrix.x4` on the tensor-core path (below).
// * `async_copy16` / `async_copy_commit` / `async_copy_wait<N>`: cp.async, CUDA only (the end of this file):
//   for CUDA-only variants (`KernelSpec.arms`), never a Metal body.
// * `simdgroup_multiply_accumulate_k16(d, a0, a1, b0, b1)`: d += a0 * b0 + a1 * b1,
//   one m16n8k16 (below); the Metal spelling is impl/kernels/simdgroup.h's.
// * `simdgroup_multiply_accumulate_rows16(d0, d1, a0, a1, b)`: d0 += a0 * b and
//   d1 += a1 * b, two 8-row tiles times one matrix. Not a Metal function: a
//   kernel header that uses it defines it as those two Metal products unless
//   `SG_MULTIPLY_ACCUMULATE_ROWS16` is defined; here it is one tensor-core mma
//   whose 16 rows are the two tiles (below), so no half of the m16 tile idles.
//
// Simdgroup matrices on a warp. An 8x8 matrix is spread over the 32 lanes of a
// SIMD group, two elements per lane: lane l holds row fm = sg_fragment_row(l),
// columns fn = sg_fragment_col(l) and fn + 1 (fn even), and the four lanes of
// one row are l ^ SG_ROW_LANES_XOR1 / l ^ SG_ROW_LANES_XOR2 / both. Which lane
// holds what is the implementation's choice: Metal does not document its
// layout, so a body that reads thread_elements() asks for it through these
// names (a kernel header defines them as Metal's layout; the CUDA prelude,
// here, defines them first, as the layout its multiply uses):
//
//   Metal:            fm = ((l / 4) & 4) + ((l / 2) % 4), fn = ((l / 4) & 2) * 2 + (l % 2) * 2; row lanes xor 1, 8
//   CUDA (default):   fm = l / 4,                          fn = (l % 4) * 2;                      row lanes xor 1, 2
//
// The CUDA layout is the tensor cores' (PTX mma.m16n8k8: the A fragment's
// and the accumulator's rows 0..7), so simdgroup_multiply_accumulate(D, A, B, C)
// is one `mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32` (or `.bf16`) per
// call when A and B are both half (or both bfloat): A's pair is the A
// fragment's first register (rows 8..15 zero), C's pair the accumulator's
// c0, c1 (c2 = c3 = 0, d2, d3 dropped), and B enters as the transpose of its
// layout (the B fragment holds B[2t][g], B[2t + 1][g], lane l = 4g + t).
// So a 16-bit matrix may hold its transpose ("transposed storage", a flag the
// compiler folds): a transposed simdgroup_load of 16-bit elements keeps the
// stored matrix's row pair (one 32-bit load, already the B fragment), a plain
// one the matrix's own row pair (already an A fragment); the multiply
// transposes whichever operand is the wrong way round with one
// `movmatrix.sync.aligned.m8n8.trans.b16`, and thread_elements() of a matrix
// in transposed storage transposes it back first. The tensor cores multiply
// the 16-bit inputs exactly and accumulate in float32 (the order of the float
// additions inside one 8x8x8 product is the hardware's, as on Apple's matrix
// unit: a rounding difference the attention gates bound, never an exact
// contract). Other operand types (float, mixed half x bfloat) take the
// emulation: warp shuffles of each lane's row pair of A and column pairs of B
// (two 16-bit elements per 32-bit shuffle), acc = fma(a, b, acc) from C over
// k = 0..7 in order.
//
// MLXGATE_SIMDGROUP_EMULATE (define it before this file) selects the previous
// implementation: Metal's lane layout and the shuffle emulation for every
// type, no tensor cores, plain loads (no transposed storage). It stays
// compiled by impl/kernels/test_cuda_compile_decode.py, as the fallback if a
// GPU disagrees with the tensor-core path.
//
// simdgroup_multiply_accumulate_rows16 on the tensor cores: A's rows 0..7 are
// a0 (register a0 of the mma's A fragment), rows 8..15 a1 (register a1: same
// lane layout, rows g + 8), and the accumulator's c0, c1 / c2, c3 are d0's /
// d1's pairs. Each row of the product is its own dot products, so the result
// is exactly the two separate mma's (the same rows 0..7 products, whatever
// the other half of A holds); with the emulation (or other operand types) it
// is the two simdgroup_multiply_accumulate calls.
//
// Every lane of the warp must reach simdgroup_multiply_accumulate, and
// thread_elements() of a matrix loaded transposed (warp-uniform control flow,
// as for the simd_* functions of metal_compat.cuh); the bodies call them
// under simdgroup-uniform conditions only. simdgroup_load of 16-bit elements
// into a 16-bit matrix reads a lane's pair as one 32-bit word: the source
// (src + origin) must be 4-byte aligned and elements_per_row even (a
// threadgroup array at an even offset is).
#ifndef MLXGATE_METAL_SIMDGROUP_CUH
#define MLXGATE_METAL_SIMDGROUP_CUH

#ifndef MLXGATE_METAL_COMPAT_CUH
#error "metal_simdgroup.cuh extends metal_compat.cuh: include that first"
#endif

#pragma nv_diag_suppress 20199

#define DEVICE_MEM
#define THREADGROUP_MEM
// A barrier that SIMD groups of different roles may reach from different places in a body (multi-query's two-stage
// loops): PTX's named barrier 1 counting `threads` arrivals, which may come from distinct barrier instructions.
// (__syncthreads, barrier 0, promises that only when every thread reaches the same one.) The kernel header's Metal
// spelling is threadgroup_barrier, and Metal never takes that path (impl.multi_query.pipeline_stages).
#define ROLE_BARRIER(threads) asm volatile("bar.sync 1, %0;" ::"r"((unsigned)(threads)) : "memory")
#define UNROLL_FULL _Pragma("unroll")
#define ulong2(x, y) make_ulong2((x), (y))

#undef threadgroup
#define threadgroup __shared__ __align__(16)

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

}  // namespace metal

// --- the fragment layout ---------------------------------------------------------

namespace metal_simdgroup {

#ifdef MLXGATE_SIMDGROUP_EMULATE
constexpr bool TENSOR_CORES = false;
// Metal's layout: with l's bits b4..b0, fm = b1 + 2*b2 + 4*b4, fn = 2*b0 + 4*b3.
METAL_FUNC uint row_of(uint l) { return ((l / 4u) & 4u) + ((l / 2u) % 4u); }
METAL_FUNC uint col_of(uint l) { return ((l / 4u) & 2u) * 2u + (l % 2u) * 2u; }
// The lane holding elements (r, c) and (r, c + 1), c even: the inverse of row_of / col_of.
METAL_FUNC uint lane_of(uint r, uint c) {
  return ((c >> 1) & 1u) | ((r & 1u) << 1) | (((r >> 1) & 1u) << 2) | ((c >> 2) << 3) | ((r >> 2) << 4);
}
#define SG_ROW_LANES_XOR1 1u
#define SG_ROW_LANES_XOR2 8u
#else
constexpr bool TENSOR_CORES = true;
// The mma fragment layout: lane l = 4 * g + t holds row g, columns 2t and 2t + 1.
METAL_FUNC uint row_of(uint l) { return l >> 2; }
METAL_FUNC uint col_of(uint l) { return (l & 3u) * 2u; }
METAL_FUNC uint lane_of(uint r, uint c) { return r * 4u + (c >> 1); }
#define SG_ROW_LANES_XOR1 1u
#define SG_ROW_LANES_XOR2 2u
#endif

METAL_FUNC uint lane() { return ::metal_compat::index_in_threadgroup() % 32u; }

}  // namespace metal_simdgroup

#define SG_FRAGMENT_LAYOUT
METAL_FUNC uint sg_fragment_row(uint lane) { return ::metal_simdgroup::row_of(lane); }
METAL_FUNC uint sg_fragment_col(uint lane) { return ::metal_simdgroup::col_of(lane); }

// --- simdgroup matrices ----------------------------------------------------------

namespace metal_simdgroup {

template <typename T>
constexpr bool is16 = sizeof(T) == 2;
template <typename A, typename B>
constexpr bool same = false;
template <typename A>
constexpr bool same<A, A> = true;
template <typename T>
constexpr bool tensor_type = same<T, __half> || same<T, __nv_bfloat16>;

template <typename T>
METAL_FUNC uint32_t bits2(const T (&e)[2]) {  // a 16-bit pair as one word, e[0] in the low half
  unsigned short lo, hi;
  memcpy(&lo, &e[0], 2);
  memcpy(&hi, &e[1], 2);
  return uint32_t(lo) | (uint32_t(hi) << 16);
}

template <typename T>
METAL_FUNC void unbits2(T (&e)[2], uint32_t w) {
  const unsigned short lo = (unsigned short)(w & 0xffffu), hi = (unsigned short)(w >> 16);
  memcpy(&e[0], &lo, 2);
  memcpy(&e[1], &hi, 2);
}

// The 8x8 transpose of a 16-bit matrix held in the mma layout, one instruction (sm_75+).
METAL_FUNC uint32_t transpose16(uint32_t w) {
  uint32_t r;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(w));
  return r;
}

}  // namespace metal_simdgroup

namespace metal {

template <typename T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(Cols == 8 && Rows == 8, "the CUDA prelude implements 8x8 simdgroup matrices only");
  // This lane's elements (fm, fn), (fm, fn + 1); in transposed storage (16-bit T, tensor-core path only)
  // those of the transpose. Mutable: thread_elements() resolves the storage on a const matrix too.
  mutable T e[2];
  mutable bool transposed = false;
  __device__ __forceinline__ void settle() const {
    if constexpr (::metal_simdgroup::is16<T>) {
      if (transposed) ::metal_simdgroup::unbits2(e, ::metal_simdgroup::transpose16(::metal_simdgroup::bits2(e)));
    }
    transposed = false;
  }
  __device__ __forceinline__ T* thread_elements() { settle(); return e; }
  __device__ __forceinline__ const T* thread_elements() const { settle(); return e; }
};

typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<__nv_bfloat16, 8, 8> simdgroup_bfloat8x8;

}  // namespace metal

namespace metal_simdgroup {

// The tensor cores' fragments of a 16-bit matrix: A, its own row pairs; B, its transpose's row pairs (one movmatrix
// where the matrix is held the other way round).
template <typename T>
METAL_FUNC uint32_t a_fragment(const metal::simdgroup_matrix<T, 8, 8>& m) {
  return m.transposed ? transpose16(bits2(m.e)) : bits2(m.e);
}
template <typename T>
METAL_FUNC uint32_t b_fragment(const metal::simdgroup_matrix<T, 8, 8>& m) {
  return m.transposed ? bits2(m.e) : transpose16(bits2(m.e));
}

// A 16 x 8 accumulator back into two 8x8 matrices: c0, c1 are d0's pair, c2, c3 d1's (plain storage).
template <typename T>
METAL_FUNC void store_rows16(metal::simdgroup_matrix<T, 8, 8>& d0, metal::simdgroup_matrix<T, 8, 8>& d1, float c0,
                             float c1, float c2, float c3) {
  d0.e[0] = T(c0);
  d0.e[1] = T(c1);
  d1.e[0] = T(c2);
  d1.e[1] = T(c3);
  d0.transposed = d1.transposed = false;
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

// D = A * B + C by shuffles, in the layout above: for k = 0, 2, 4, 6 a lane fetches A[fm][k], A[fm][k+1]
// from the lane holding that pair of its row and B[k][fn..fn+1], B[k+1][fn..fn+1] from the lanes holding
// those pairs of its columns, then acc = fma(a, b, acc) from C, k = 0..7 in order.
template <typename TA, typename TB>
METAL_FUNC void emulated_mma(float& acc0, float& acc1, const TA (&a)[2], const TB (&b)[2]) {
  const uint l = lane();
  const uint r = row_of(l), col = col_of(l);
#pragma unroll
  for (uint k = 0; k < 8u; k += 2u) {
    float a0, a1, b00, b01, b10, b11;  // A[r][k], A[r][k+1]; B[k][col], B[k][col+1]; B[k+1][...]
    pair_shuffle<TA>::get(a, lane_of(r, k), a0, a1);
    pair_shuffle<TB>::get(b, lane_of(k, col), b00, b01);
    pair_shuffle<TB>::get(b, lane_of(k + 1u, col), b10, b11);
    acc0 = ::fmaf(a0, b00, acc0);
    acc0 = ::fmaf(a1, b10, acc0);
    acc1 = ::fmaf(a0, b01, acc1);
    acc1 = ::fmaf(a1, b11, acc1);
  }
}

// D = A * B + C, A and C 16 x 8 as two 8-row halves (the file comment): c0, c1 rows g, c2, c3 rows g + 8.
template <typename T>
METAL_FUNC void tensor_mma_rows16(float& c0, float& c1, float& c2, float& c3, uint32_t a0, uint32_t a1, uint32_t b) {
  static_assert(tensor_type<T>, "tensor_mma_rows16 multiplies half or bfloat inputs");
  if constexpr (same<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(b));
  } else {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(b));
  }
}


// D = A * B + C on the tensor cores: a, b the A and B fragments (16-bit pairs), c0, c1 this lane's
// accumulator pair; rows 8..15 of A and C are zero, their results dropped.
template <typename T>
METAL_FUNC void tensor_mma(float& c0, float& c1, uint32_t a, uint32_t b) {
  float c2 = 0.0f, c3 = 0.0f;
  tensor_mma_rows16<T>(c0, c1, c2, c3, a, 0u, b);
}

}  // namespace metal_simdgroup

namespace metal {

template <typename T, int Cols, int Rows>
METAL_FUNC simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  m.e[0] = value;
  m.e[1] = value;
  m.transposed = false;
  return m;
}

// Metal: simdgroup_load(d, src, elements_per_row, matrix_origin, transpose_matrix).
// The stored matrix's element (r, c) is src[(origin.y + r) * elements_per_row + origin.x + c];
// d is that matrix, or its transpose when `transpose`.
template <typename T, typename U>
METAL_FUNC void simdgroup_load(simdgroup_matrix<T, 8, 8>& d, const U* src, ulong elements_per_row = 8,
                               ulong2 matrix_origin = ulong2(0, 0), bool transpose_matrix = false) {
  using namespace ::metal_simdgroup;
  const uint l = lane();
  const ulong r = row_of(l), c = col_of(l);
  const U* base = src + matrix_origin.y * elements_per_row + matrix_origin.x;
  // The stored matrix's row pair (r, c), (r, c + 1) is d's own pair (plain), or that of d's transpose:
  // transposed storage where the tensor-core path has it.
  const bool stored_pair = !transpose_matrix || (TENSOR_CORES && is16<T>);
  if (stored_pair) {
    const U* p = base + r * elements_per_row + c;
    if constexpr (is16<T> && same<T, U>) {
      unbits2(d.e, *reinterpret_cast<const uint32_t*>(p));  // one 32-bit word (alignment: file comment)
    } else {
      d.e[0] = T(p[0]);
      d.e[1] = T(p[1]);
    }
    d.transposed = transpose_matrix;
  } else {  // d[r][c] = stored[c][r]
    d.e[0] = T(base[c * elements_per_row + r]);
    d.e[1] = T(base[(c + 1) * elements_per_row + r]);
    d.transposed = false;
  }
}

// D = A * B + C (D may be A, B or C): float accumulation, see the file comment.
template <typename TD, typename TA, typename TB, typename TC>
METAL_FUNC void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TA, 8, 8>& a,
                                              const simdgroup_matrix<TB, 8, 8>& b,
                                              const simdgroup_matrix<TC, 8, 8>& c) {
  using namespace ::metal_simdgroup;
  float acc0 = float(c.thread_elements()[0]), acc1 = float(c.thread_elements()[1]);
  if constexpr (TENSOR_CORES && same<TA, TB> && tensor_type<TA>) {
    tensor_mma<TA>(acc0, acc1, a_fragment(a), b_fragment(b));
  } else {
    a.settle();
    b.settle();
    emulated_mma(acc0, acc1, a.e, b.e);
  }
  d.e[0] = TD(acc0);
  d.e[1] = TD(acc1);
  d.transposed = false;
}

}  // namespace metal


#define SG_LOAD_X4
// m0..m3 = the four 8x8 matrices side by side at src (columns 0-7, 8-15, 16-23, 24-31 of 8 rows), each as
// simdgroup_load(m_i, src + 8i, elements_per_row, 0, transpose) would load it. Not a Metal function: a kernel header
// that uses it defines it as those four loads unless SG_LOAD_X4 is defined. Here, for 16-bit matrices of a 16-bit
// source on the tensor-core path, one `ldmatrix.x4` (lane l gives the address of row l % 8 of matrix l / 8): without
// .trans each lane receives its stored row pair (a transposed load's storage), with .trans its pair of the stored
// matrix's transpose (a plain load, held in transposed storage: already the B fragment, no movmatrix). The source
// must be in threadgroup memory, 16-byte aligned, and elements_per_row * 2 bytes a multiple of 16.
template <typename T, typename U>
METAL_FUNC void simdgroup_load_x4(metal::simdgroup_matrix<T, 8, 8>& m0, metal::simdgroup_matrix<T, 8, 8>& m1,
                                  metal::simdgroup_matrix<T, 8, 8>& m2, metal::simdgroup_matrix<T, 8, 8>& m3,
                                  const U* src, ulong elements_per_row, bool transpose_matrix) {
  using namespace ::metal_simdgroup;
  if constexpr (TENSOR_CORES && is16<T> && same<T, U>) {
    const uint l = lane();
    const unsigned row = (unsigned)__cvta_generic_to_shared(src + (l % 8u) * elements_per_row + (l / 8u) * 8u);
    uint32_t w[4];
    if (transpose_matrix)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(row));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(row));
    unbits2(m0.e, w[0]);
    unbits2(m1.e, w[1]);
    unbits2(m2.e, w[2]);
    unbits2(m3.e, w[3]);
    m0.transposed = m1.transposed = m2.transposed = m3.transposed = true;
  } else {
    metal::simdgroup_load(m0, src, elements_per_row, ulong2(0, 0), transpose_matrix);
    metal::simdgroup_load(m1, src, elements_per_row, ulong2(8, 0), transpose_matrix);
    metal::simdgroup_load(m2, src, elements_per_row, ulong2(16, 0), transpose_matrix);
    metal::simdgroup_load(m3, src, elements_per_row, ulong2(24, 0), transpose_matrix);
  }
}

#define SG_MULTIPLY_ACCUMULATE_ROWS16
// d0 += a0 * b, d1 += a1 * b (file comment); d0 / d1 must not alias a0, a1 or b.
template <typename TD, typename TA, typename TB>
METAL_FUNC void simdgroup_multiply_accumulate_rows16(metal::simdgroup_matrix<TD, 8, 8>& d0,
                                                     metal::simdgroup_matrix<TD, 8, 8>& d1,
                                                     const metal::simdgroup_matrix<TA, 8, 8>& a0,
                                                     const metal::simdgroup_matrix<TA, 8, 8>& a1,
                                                     const metal::simdgroup_matrix<TB, 8, 8>& b) {
  using namespace ::metal_simdgroup;
  if constexpr (TENSOR_CORES && same<TA, TB> && tensor_type<TA>) {
    float c0 = float(d0.thread_elements()[0]), c1 = float(d0.thread_elements()[1]);
    float c2 = float(d1.thread_elements()[0]), c3 = float(d1.thread_elements()[1]);
    tensor_mma_rows16<TA>(c0, c1, c2, c3, a_fragment(a0), a_fragment(a1), b_fragment(b));
    store_rows16(d0, d1, c0, c1, c2, c3);
  } else {
    metal::simdgroup_multiply_accumulate(d0, a0, b, d0);
    metal::simdgroup_multiply_accumulate(d1, a1, b, d1);
  }
}

namespace metal_simdgroup {

// D = A * B + C with A 16 x 16 (registers a0..a3: rows g / g + 8 of columns 2t.. and 2t + 8..), B 16 x 8 (b0, b1:
// rows 2t.. and 2t + 8.. of column g), C and D 16 x 8 as in tensor_mma_rows16.
template <typename T>
METAL_FUNC void tensor_mma_rows16_k16(float& c0, float& c1, float& c2, float& c3, uint32_t a0, uint32_t a1,
                                      uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  static_assert(tensor_type<T>, "tensor_mma_rows16_k16 multiplies half or bfloat inputs");
  if constexpr (same<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

}  // namespace metal_simdgroup

#define SG_MULTIPLY_ACCUMULATE_ROWS16_K16
// d0 += a0 * b0 + a2 * b1 and d1 += a1 * b0 + a3 * b1: two 8-row tiles times a 16-deep product (two 8x8 steps of
// the contraction). Not a Metal function: a kernel header that uses it defines it as the two
// simdgroup_multiply_accumulate_rows16 calls, b0's then b1's, unless SG_MULTIPLY_ACCUMULATE_ROWS16_K16 is defined.
// Here one tensor-core `mma.m16n8k16` on 16-bit operands: half the mma instructions of two rows16 calls, and the
// hardware adds the 16 products of a row before the accumulator (the order inside a product is the hardware's, as
// for m16n8k8: a rounding difference the gates bound). Otherwise (the emulation, other types) the two calls.
template <typename TD, typename TA, typename TB>
METAL_FUNC void simdgroup_multiply_accumulate_rows16_k16(
    metal::simdgroup_matrix<TD, 8, 8>& d0, metal::simdgroup_matrix<TD, 8, 8>& d1,
    const metal::simdgroup_matrix<TA, 8, 8>& a0, const metal::simdgroup_matrix<TA, 8, 8>& a1,
    const metal::simdgroup_matrix<TA, 8, 8>& a2, const metal::simdgroup_matrix<TA, 8, 8>& a3,
    const metal::simdgroup_matrix<TB, 8, 8>& b0, const metal::simdgroup_matrix<TB, 8, 8>& b1) {
  using namespace ::metal_simdgroup;
  if constexpr (TENSOR_CORES && same<TA, TB> && tensor_type<TA>) {
    float c0 = float(d0.thread_elements()[0]), c1 = float(d0.thread_elements()[1]);
    float c2 = float(d1.thread_elements()[0]), c3 = float(d1.thread_elements()[1]);
    tensor_mma_rows16_k16<TA>(c0, c1, c2, c3, a_fragment(a0), a_fragment(a1), a_fragment(a2), a_fragment(a3),
                              b_fragment(b0), b_fragment(b1));
    store_rows16(d0, d1, c0, c1, c2, c3);
  } else {
    simdgroup_multiply_accumulate_rows16(d0, d1, a0, a1, b0);
    simdgroup_multiply_accumulate_rows16(d0, d1, a2, a3, b1);
  }
}

#define SG_MULTIPLY_ACCUMULATE_K16
// d += a0 * b0 + a1 * b1: one 8-row tile times a 16-deep product (two 8x8 steps of the contraction). Not a Metal
// function: a kernel header that uses it defines it as the two simdgroup_multiply_accumulate calls, b0's then b1's,
// unless SG_MULTIPLY_ACCUMULATE_K16 is defined (impl/kernels/simdgroup.h). Here one tensor-core `mma.m16n8k16` on
// 16-bit operands whose rows 8..15 are zero (their results dropped): half the mma instructions of two m16n8k8 steps.
// Otherwise (the emulation, other types) the two calls.
template <typename TD, typename TA, typename TB>
METAL_FUNC void simdgroup_multiply_accumulate_k16(metal::simdgroup_matrix<TD, 8, 8>& d,
                                                  const metal::simdgroup_matrix<TA, 8, 8>& a0,
                                                  const metal::simdgroup_matrix<TA, 8, 8>& a1,
                                                  const metal::simdgroup_matrix<TB, 8, 8>& b0,
                                                  const metal::simdgroup_matrix<TB, 8, 8>& b1) {
  using namespace ::metal_simdgroup;
  if constexpr (TENSOR_CORES && same<TA, TB> && tensor_type<TA>) {
    float c0 = float(d.thread_elements()[0]), c1 = float(d.thread_elements()[1]), c2 = 0.0f, c3 = 0.0f;
    tensor_mma_rows16_k16<TA>(c0, c1, c2, c3, a_fragment(a0), 0u, a_fragment(a1), 0u, b_fragment(b0),
                              b_fragment(b1));
    d.e[0] = TD(c0);
    d.e[1] = TD(c1);
    d.transposed = false;
  } else {
    metal::simdgroup_multiply_accumulate(d, a0, b0, d);
    metal::simdgroup_multiply_accumulate(d, a1, b1, d);
  }
}

// --- asynchronous copies (CUDA only) -----------------------------------------------
//
// Not Metal: the CUDA-only variants that use them (impl.multi_query's ring partial, KernelSpec.arms = ("cuda",))
// never compile for Metal. `cp.async` (sm_80+) copies global memory into shared memory without a register: the
// copy stays in flight while the thread goes on, so a thread can keep several blocks of K / V outstanding, which
// register staging cannot (its loads hold registers until they land, and a barrier waits for them).
//
// async_copy16(dst, src): 16 bytes, both 16-byte aligned; `.cg` caches in L2 only (the K / V stream is read once).
// async_copy_commit(): closes the group of this thread's copies issued since the last commit (an empty group too).
// async_copy_wait<PENDING>(): waits until at most PENDING of this thread's committed groups are still in flight;
// the completed copies are then visible to this thread (only: a thread reads back what it copied itself, or a
// barrier must follow).
METAL_FUNC void async_copy16(void* dst, const void* src) {
  const unsigned shared = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared), "l"(src) : "memory");
}
METAL_FUNC void async_copy_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int PENDING>
METAL_FUNC void async_copy_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
}

#endif  // MLXGATE_METAL_SIMDGROUP_CUH
