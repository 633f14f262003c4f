"""Kernel time of pure K / V reads (no attention arithmetic) in the matrix partial's access pattern and in a
contiguous one, beside the paged kernels and MLX SDPA on the same K / V, interleaved in one process (issue 32: is
the 32/8/D128/N128k gap the partial's access pattern or its work between loads?).
    python3 readbench.py CALLS OUT.json"""
import json
import sys

import mlx.core as mx

from perf import cases, kernel_time as kt
from perf.shapes import DecodeShape

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 12
HQ, HK, D, N, BS = 32, 8, 128, 131072, 16
PARTS = 64  # the partial's grid at this shape: 64 partitions x 8 KV heads, 128 threads
SPAN = N // PARTS

# The partial's pattern: lane (fr = lane / 4, seg = lane % 4) reads token t0 + fr's K and V segment seg (64 bytes, four
# 16-byte loads each), steps of 8 tokens SG = 4 SIMD groups apart, the block-table entry one step ahead. TT tokens
# tiles per step (TT 2: two tokens per lane, twice the bytes in flight). STREAM: __ldcs (the kept body) or plain.
PAGED_READ = """
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
"""
# Contiguous: the same threadgroups and ranges over dense [Hkv, N, D] K / V, but each load instruction of a SIMD group
# reads 512 contiguous bytes (lane i: 16 bytes at i * 16 + j * 512 of the group's 2 KB of 8 rows).
DENSE_READ = """
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
"""
paged_kernel = mx.fast.cuda_kernel("read_paged_pattern", ["keys", "values", "table"], ["out"], PAGED_READ,
                                    header="typedef unsigned int uint;\n")
dense_kernel = mx.fast.cuda_kernel("read_dense_coalesced", ["keys", "values"], ["out"], DENSE_READ,
                                    header="typedef unsigned int uint;\n")

group = cases.paged_group(DecodeShape(HQ, HK, 1, D, N), ["cuda"], copies=calls)
sets = group.inputs()
print("input sets:", len(sets), flush=True)
grid, tg, outs = (128 * PARTS, HK, 1), (128, 1, 1), [(PARTS * HK * 128,)]


def reads(kind, stream=True, tt=1):
    def one(x):
        if kind == "dense":
            return lambda: dense_kernel(inputs=[x["k"], x["v"]], template=[("NT", N), ("D", D), ("SPAN", SPAN)],
                                        grid=grid, threadgroup=tg, output_shapes=outs, output_dtypes=[mx.uint32])[0]
        dense = kind == "dense-pattern"
        keys, values = (x["k"], x["v"]) if dense else (x["storage"].keys, x["storage"].values)
        return lambda: paged_kernel(inputs=[keys, values, x["table"].padded],
                                    template=[("NT", N), ("D", D), ("SPAN", SPAN), ("HK", HK), ("BS", BS), ("TT", tt),
                                              ("STREAM", stream), ("DENSE", dense)],
                                    grid=grid, threadgroup=tg, output_shapes=outs, output_dtypes=[mx.uint32])[0]
    from perf.harness import taking_turns
    return taking_turns([one(x) for x in sets])


variants = {"read: partial's pattern, pool, __ldcs": reads("pool"),
            "read: partial's pattern, pool, plain loads": reads("pool", stream=False),
            "read: partial's pattern, pool, TT 2": reads("pool", tt=2),
            "read: partial's pattern, dense K/V": reads("dense-pattern"),
            "read: dense K/V, 512-byte coalesced loads": reads("dense")}
for case in group.cases:
    if case.kernel in kt.SMOKE_KERNELS:
        variants[case.id] = case.build()
avail = kt.availability()
out = {}
for rnd in range(2):
    for name, launch in variants.items():
        try:
            r = kt.measure(launch, case_id=name, runtime="mlx", calls=calls, timer=avail.timer)
        except Exception as exc:
            print(name, "ERROR", type(exc).__name__, str(exc)[:800], flush=True)
            continue
        split = {k[:60]: round(v * 1e6, 2) for k, v in r.kernel_medians_s().items()}
        out.setdefault(name, []).append({"median_us": r.median_s * 1e6, "iqr_us": r.iqr_s * 1e6, "split_us": split})
        print(f"{name:55s} {r.median_s * 1e6:7.1f} us  {2 * HK * N * D * 2 / r.median_s / 1e12:5.2f} TB/s  {split}",
              flush=True)
group.release()
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/readbench.json", "w"), indent=1)
