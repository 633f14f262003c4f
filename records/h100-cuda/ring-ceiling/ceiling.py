"""Issue 32's last ~3 us at 32/8/D128/N128k: the pool's read ceiling in the ring's copy pattern, and the same bytes
read with a threadgroup over four KV heads at once, beside the paged kernels (with launch-geometry variants) and MLX
SDPA, interleaved in one process, CUPTI kernel time.
    python3 ceiling.py CALLS ROUNDS OUT.json [N ...]

With lengths N (default 131072 alone, every variant), only the pool read of the partial's grid, the paged kernels as
kept and MLX SDPA run, at each N: how the partial's time past its read grows with the length (a fixed start and end,
or a cost per step).

Pure reads (no attention arithmetic): each SIMD group copies 8 rows of K and of V per step by cp.async (16 bytes a
lane, each copy instruction 512 contiguous bytes: ring_prologue.metal's pattern), RING 3 slots of 4 KB per group,
waits for the step's copies, then reads one word per lane back. Shared memory 48 KB per threadgroup, as the ring
partial's: 4 threadgroups per SM.
* HPT 1 (the partial's grid): threadgroup (partition, KV head), its 4 SIMD groups one head's steps 32 tokens apart;
* HPT 4: threadgroup (partition, 4 KV heads), SIMD group s one head (4g + s), its steps 8 tokens apart, so at a
  block the threadgroup reads the 4 heads' adjacent 4 KB runs: 16 KB of the [block, head, row, dim] pool at once.
Each over the permuted pool the benchmark builds, over the same pool read in physical order (table = identity) and
over the dense [Hkv, N, D] K / V of MLX SDPA."""
import json
import sys
import time

import mlx.core as mx

import impl.paged_attention as paged
from impl.paged_attention import launch
from perf import cases, kernel_time as kt
from perf.harness import taking_turns
from perf.shapes import DecodeShape

calls, rounds, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
LENGTHS = [int(a) for a in sys.argv[4:]]
HQ, HK, D, BS, RING = 32, 8, 128, 16, 3
TGS = 512  # threadgroups, the partial's grid at this shape

READ = """
  const uint lane = threadIdx.x % 32, sg = threadIdx.x / 32;
  const uint hk = HPT == 1 ? blockIdx.y : blockIdx.y * 4 + sg;
  constexpr uint STEP = HPT == 1 ? 32 : 8;  // tokens between a SIMD group's steps
  const uint first = blockIdx.x * SPAN, stop = min(uint(NT), first + SPAN);
  const uint base = first + (HPT == 1 ? sg * 8 : 0);
  extern __shared__ __align__(16) unsigned char memory[];
  const uint ring = (uint)__cvta_generic_to_shared(memory) + sg * (RING * 4096) + lane * 16;
  uint block = IDENTITY ? base / BS : table[base / BS];
  auto issue = [&](uint a) {
    if (a < stop) {
      const uint at = ring + ((a / STEP) % RING) * 4096;
      const size_t row = DENSE ? size_t(hk) * NT + a : (size_t(block) * HK + hk) * BS + a % BS;
      const uint4* k = (const uint4*)(keys + row * D) + lane;
      const uint4* v = (const uint4*)(values + row * D) + lane;
      for (uint i = 0; i < 4; ++i) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(at + 512 * i), "l"(k + 32 * i) : "memory");
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(at + 2048 + 512 * i), "l"(v + 32 * i) : "memory");
      }
      if (a + STEP < stop) block = IDENTITY ? (a + STEP) / BS : table[(a + STEP) / BS];
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (uint s = 0; s + 1 < RING; ++s) issue(base + s * STEP);
  uint acc = 0;
  for (uint t0 = base; t0 < stop; t0 += STEP) {
    issue(t0 + (RING - 1) * STEP);
    asm volatile("cp.async.wait_group %0;" ::"n"(RING - 1) : "memory");
    __syncwarp();
    const uint at = ring + ((t0 / STEP) % RING) * 4096;
    uint x, y;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(x) : "r"(at));
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(y) : "r"(at + 2048));
    acc ^= x ^ y;
    __syncwarp();
  }
  out[(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
"""
SHARED = 4 * RING * 4096
read_kernel = mx.fast.cuda_kernel("read_ring_pattern", ["keys", "values", "table"], ["out"], READ,
                                  header="typedef unsigned int uint;\n", shared_memory=SHARED)


def reads(sets, hpt, source, N):
    groups = HK // hpt
    parts = TGS // groups
    span = N // parts

    def one(x):
        dense = source == "dense"
        keys, values = (x["k"], x["v"]) if dense else (x["storage"].keys, x["storage"].values)
        template = [("NT", N), ("D", D), ("SPAN", span), ("HK", HK), ("BS", BS), ("RING", RING), ("HPT", hpt),
                    ("DENSE", dense), ("IDENTITY", source == "identity")]
        return lambda: read_kernel(inputs=[keys, values, x["table"].padded], template=template,
                                   grid=(128 * parts, groups, 1), threadgroup=(128, 1, 1),
                                   output_shapes=[(TGS * 128,)], output_dtypes=[mx.uint32])[0]
    return taking_turns([one(x) for x in sets])


def geometry(target=512, quantum=64, slices=32):
    def apply():
        launch.PARTITION_QUANTUM = quantum
        launch.MERGE_SLICES = slices
        launch._partial_shape.cache_clear()
        paged.set_threadgroup_target(target)
    return apply


GEOMETRY = {"paged now (512 threadgroups, merge 32 slices)": geometry(),
            "paged, 528 threadgroups (8-token quantum)": geometry(528, 8),
            "paged, 384 threadgroups": geometry(384),
            "paged, merge 16 slices": geometry(slices=16)}

avail = kt.availability()
out, start = {}, time.time()


def measure(name, build, nbytes):
    try:
        r = kt.measure(build, case_id=name, runtime="mlx", calls=calls, timer=avail.timer)
    except Exception as exc:
        print(name, "ERROR", type(exc).__name__, str(exc)[:600], flush=True)
        return
    split = {k[:60]: round(v * 1e6, 2) for k, v in r.kernel_medians_s().items()}
    out.setdefault(name, []).append({"median_us": r.median_s * 1e6, "iqr_us": r.iqr_s * 1e6, "split_us": split})
    print(f"{name:52s} {r.median_s * 1e6:7.1f} us {nbytes / r.median_s / 1e12:5.2f} TB/s {split} "
          f"t={time.time() - start:.0f}", flush=True)


for N in LENGTHS or [131072]:
    group = cases.paged_group(DecodeShape(HQ, HK, 1, D, N), ["cuda"], copies=calls)
    sets = group.inputs()
    tag = "" if not LENGTHS else f" N={N}"
    variants = {f"read, ring pattern, HPT {hpt}, {source}{tag}": reads(sets, hpt, source, N)
                for hpt in (1, 4) for source in ("pool", "identity", "dense")
                if not LENGTHS or (hpt, source) == (1, "pool")}
    geometries = dict(list(GEOMETRY.items())[:1]) if LENGTHS else GEOMETRY
    direct = {c.kernel: c for c in group.cases}
    nbytes = 2 * HK * N * D * 2
    for rnd in range(rounds):
        for name, build in variants.items():
            measure(name, build, nbytes)
        for name, apply in geometries.items():
            apply()
            measure(name + tag, direct["paged_attention"].build(), nbytes)
        geometry()()
        measure("MLX SDPA, contiguous K/V" + tag, direct["sdpa"].build(), nbytes)
    group.release()
with open(out_path, "w") as f:
    json.dump(out, f, indent=1)
