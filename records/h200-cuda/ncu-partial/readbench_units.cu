#include <cuda_bf16.h>
typedef unsigned int uint;
template <int NT, int D, int SPAN, int HK, int BS, int TT, bool STREAM, bool DENSE>
__global__ void paged(const __nv_bfloat16* keys, const __nv_bfloat16* values, const int* table, uint* out) {
  const uint lane = threadIdx.x % 32, sg = threadIdx.x / 32, fr = lane / 4, seg = lane % 4;
  const uint part = blockIdx.x, hk = blockIdx.y;
  const uint first = part * SPAN, stop = min(uint(NT), first + SPAN);
  uint acc = 0;
  uint block[TT];
  for (uint h = 0; h < TT; ++h) block[h] = table[min(first + sg * 8 * TT + 8 * h + fr, stop - 1) / BS];
  for (uint t0 = first + sg * 8 * TT; t0 < stop; t0 += 32 * TT) {
    uint4 kx[TT][4], vx[TT][4];
    for (uint h = 0; h < TT; ++h) {
      const uint t = min(t0 + 8 * h + fr, stop - 1);
      const size_t row = DENSE ? (size_t(hk) * NT + t) : ((size_t(block[h]) * HK + hk) * BS + t % BS);
      const uint4* kp = (const uint4*)(keys + row * D + seg * 32);
      const uint4* vp = (const uint4*)(values + row * D + seg * 32);
      for (uint i = 0; i < 4; ++i) { kx[h][i] = STREAM ? __ldcs(kp + i) : kp[i]; vx[h][i] = STREAM ? __ldcs(vp + i) : vp[i]; }
    }
    const uint t1 = t0 + 32 * TT;
    if (t1 < stop)
      for (uint h = 0; h < TT; ++h) block[h] = table[min(t1 + 8 * h + fr, stop - 1) / BS];
    for (uint h = 0; h < TT; ++h)
      for (uint i = 0; i < 4; ++i) acc ^= kx[h][i].x ^ kx[h][i].y ^ kx[h][i].z ^ kx[h][i].w ^ vx[h][i].x ^ vx[h][i].y ^ vx[h][i].z ^ vx[h][i].w;
  }
  out[(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}
template <int NT, int D, int SPAN>
__global__ void dense(const __nv_bfloat16* keys, const __nv_bfloat16* values, uint* out) {
  const uint lane = threadIdx.x % 32, sg = threadIdx.x / 32;
  const uint part = blockIdx.x, hk = blockIdx.y;
  const uint first = part * SPAN, stop = min(uint(NT), first + SPAN);
  uint acc = 0;
  for (uint t0 = first + sg * 8; t0 < stop; t0 += 32) {
    const uint4* kp = (const uint4*)(keys + (size_t(hk) * NT + t0) * D) + lane;
    const uint4* vp = (const uint4*)(values + (size_t(hk) * NT + t0) * D) + lane;
    uint4 kx[4], vx[4];
    for (uint i = 0; i < 4; ++i) { kx[i] = __ldcs(kp + 32 * i); vx[i] = __ldcs(vp + 32 * i); }
    for (uint i = 0; i < 4; ++i) acc ^= kx[i].x ^ kx[i].y ^ kx[i].z ^ kx[i].w ^ vx[i].x ^ vx[i].y ^ vx[i].z ^ vx[i].w;
  }
  out[(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}
template __global__ void paged<131072,128,2048,8,16,1,true,false>(const __nv_bfloat16*, const __nv_bfloat16*, const int*, uint*);
template __global__ void paged<131072,128,2048,8,16,2,false,true>(const __nv_bfloat16*, const __nv_bfloat16*, const int*, uint*);
template __global__ void dense<131072,128,2048>(const __nv_bfloat16*, const __nv_bfloat16*, uint*);
