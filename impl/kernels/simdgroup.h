// simdgroup.h: the Metal spellings of the simdgroup-matrix names the matrix bodies use beyond Metal's own.
//
// A kernel header that uses simdgroup matrices starts with this file (its Python puts it first: ``SIMDGROUP_HEADER``
// in impl/kernels/compile.py). Each name is defined only where the CUDA prelude (metal_simdgroup.cuh) has not
// defined it first: there the layout is the tensor cores' and the helpers are single mma / ldmatrix instructions;
// here they are Metal's layout and plain Metal products and loads.
#ifndef SG_FRAGMENT_LAYOUT
#define SG_FRAGMENT_LAYOUT
// Metal's simdgroup-matrix layout: lane l holds row sg_fragment_row(l), columns sg_fragment_col(l) and
// that + 1; the lanes of one row are l ^ 1, l ^ 8 and l ^ 9. (The CUDA prelude defines its own.)
METAL_FUNC uint sg_fragment_row(uint l) { return ((l / 4u) & 4u) + ((l / 2u) % 4u); }
METAL_FUNC uint sg_fragment_col(uint l) { return ((l / 4u) & 2u) * 2u + (l % 2u) * 2u; }
#define SG_ROW_LANES_XOR1 1u
#define SG_ROW_LANES_XOR2 8u
#endif
#ifndef SG_LOAD_X4
#define SG_LOAD_X4
// m0..m3 = the four 8x8 matrices side by side at src (columns 0-7, 8-15, 16-23, 24-31): four simdgroup loads here;
// the CUDA prelude defines it as one ldmatrix.x4 (metal_simdgroup.cuh).
#define simdgroup_load_x4(m0, m1, m2, m3, src, stride, transpose)   do {     metal::simdgroup_load(m0, src, stride, ulong2(0, 0), transpose);     metal::simdgroup_load(m1, src, stride, ulong2(8, 0), transpose);     metal::simdgroup_load(m2, src, stride, ulong2(16, 0), transpose);     metal::simdgroup_load(m3, src, stride, ulong2(24, 0), transpose);   } while (0)
#endif
#ifndef SG_MULTIPLY_ACCUMULATE_ROWS16
#define SG_MULTIPLY_ACCUMULATE_ROWS16
// d0 += a0 · b and d1 += a1 · b: two 8-row tiles times one 8x8 matrix. Here two simdgroup products; the CUDA
// prelude defines it as one 16-row tensor-core product (metal_simdgroup.cuh).
#define simdgroup_multiply_accumulate_rows16(d0, d1, a0, a1, b)   do {     metal::simdgroup_multiply_accumulate(d0, a0, b, d0);     metal::simdgroup_multiply_accumulate(d1, a1, b, d1);   } while (0)
#endif
#ifndef SG_MULTIPLY_ACCUMULATE_ROWS16_K16
#define SG_MULTIPLY_ACCUMULATE_ROWS16_K16
// d0 += a0 · b0 + a2 · b1 and d1 += a1 · b0 + a3 · b1: two tiles times a 16-deep product, b0's step then b1's. Here
// four simdgroup products; the CUDA prelude defines it as one 16x8x16 tensor-core product (metal_simdgroup.cuh).
#define simdgroup_multiply_accumulate_rows16_k16(d0, d1, a0, a1, a2, a3, b0, b1)   do {     simdgroup_multiply_accumulate_rows16(d0, d1, a0, a1, b0);     simdgroup_multiply_accumulate_rows16(d0, d1, a2, a3, b1);   } while (0)
#endif
#ifndef SG_MULTIPLY_ACCUMULATE_K16
#define SG_MULTIPLY_ACCUMULATE_K16
// d += a0 · b0 + a1 · b1: one 8-row tile times a 16-deep product, b0's step then b1's. Here two simdgroup products;
// the CUDA prelude defines it as one 16x8x16 tensor-core product whose rows 8..15 are zero (metal_simdgroup.cuh).
#define simdgroup_multiply_accumulate_k16(d, a0, a1, b0, b1)   do {     metal::simdgroup_multiply_accumulate(d, a0, b0, d);     metal::simdgroup_multiply_accumulate(d, a1, b1, d);   } while (0)
#endif
