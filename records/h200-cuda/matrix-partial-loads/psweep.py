"""Kernel time of the matrix partial's load variants on the H200 (issue 32's 32/8 gap): cache hints on the K/V
loads, an L2 prefetch of the next step's rows, more threadgroups. python3 psweep.py CALLS OUT.json"""
import json, statistics, sys, time
import impl.paged_attention as paged
from impl.paged_attention import launch
from impl.kernels.compile import KernelSpec, SIMDGROUP_HEADER
from perf import kernel_time as kt
from perf.cases import paged_group
from perf.shapes import DecodeShape

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 12
LINE = "      const uint4 x = ((const DEVICE_MEM uint4*)p)[i / 4];"
assert launch.HEADER.count(LINE) == 1
LOADS = {
    "base": LINE,
    "ldcs": "      const uint4 x = __ldcs(((const uint4*)p) + i / 4);",
    "ldg": "      const uint4 x = __ldg(((const uint4*)p) + i / 4);",
    "l2_256": ("      uint4 x; asm volatile(\"ld.global.nc.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\" : \"=r\"(x.x), "
               "\"=r\"(x.y), \"=r\"(x.z), \"=r\"(x.w) : \"l\"(((const uint4*)p) + i / 4));"),
    "evf": ("      uint4 x; asm volatile(\"ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\" : \"=r\"(x.x), "
               "\"=r\"(x.y), \"=r\"(x.z), \"=r\"(x.w) : \"l\"(((const uint4*)p) + i / 4));"),
}
PF_DEF = '#define PREFETCH_L2(p) asm volatile("prefetch.global.L2 [%0];" :: "l"((const void*)(p)))\n'
ANCHOR = "    // O += P . V, a V tile per output tile j"
assert launch.MATRIX_PARTIAL_SOURCE.count(ANCHOR) == 1
PF_CODE = """    if (t1 < stop)
      for (uint h = 0; h < TT; ++h) {
        const uint t = min(t1 + 8 * h + fr, stop - 1);
        const uint row = (block[h] * HK + hk) * BS + t % BS;
        PREFETCH_L2(keys + row * DK + seg * 2 * SK);
        PREFETCH_L2(values + row * DV + seg * 2 * SV);
      }
"""


def spec(load="base", prefetch=False):
    header = SIMDGROUP_HEADER + (PF_DEF if prefetch else "") + launch.HEADER.replace(LINE, LOADS[load])
    body = launch.MATRIX_PARTIAL_SOURCE.replace(ANCHOR, PF_CODE + ANCHOR) if prefetch else launch.MATRIX_PARTIAL_SOURCE
    return KernelSpec("paged_attention_matrix_partial", ("q", "keys", "values", "table", "geometry"), ("parts",),
                      body, header=header)


ORIGINAL, TG = launch.MATRIX_PARTIAL, launch.TARGET_THREADGROUPS
VARIANTS = {"base": (spec(), TG), "ldcs": (spec("ldcs"), TG), "ldg": (spec("ldg"), TG),
            "l2_256": (spec("l2_256"), TG), "evf": (spec("evf"), TG), "pf": (spec(prefetch=True), TG),
            "pf_ldcs": (spec("ldcs", True), TG), "tg1024": (spec(), 1024), "tg256": (spec(), 256)}
order = list(VARIANTS) + [v + "-b" for v in VARIANTS]
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768)]
avail = kt.availability()
out = {}
t_start = time.time()
for dims in SHAPES:
    group = paged_group(DecodeShape(*dims), ["cuda"], copies=calls)
    try:
        for case in group.cases:
            if case.kernel not in kt.SMOKE_KERNELS:
                continue
            todo = order if case.kernel == "paged_attention" else ["sdpa", "sdpa-b"]
            for name in todo:
                if case.kernel == "paged_attention":
                    s, tg = VARIANTS[name.removesuffix("-b")]
                    launch.MATRIX_PARTIAL, launch.TARGET_THREADGROUPS = s, tg
                    paged.set_matrix_partial(True, 1); paged._compiled_pair.cache_clear()
                try:
                    r = kt.measure(case.build(), case_id=case.id, runtime=case.runtime, calls=calls, timer=avail.timer)
                except Exception as exc:
                    print(dims, name, "ERROR", type(exc).__name__, str(exc)[:600], flush=True)
                    continue
                med = {k[:40]: v * 1e6 for k, v in r.kernel_medians_s().items()}
                out[f"{case.id}|{name}"] = {"median_us": r.median_s * 1e6, "iqr_us": r.iqr_s * 1e6,
                                            "gbps": r.gbps(case.bytes), "split_us": med}
                parts = " ".join(f"{k[-18:]}={v:.1f}" for k, v in med.items())
                print(f"{dims} {name:9s} {r.median_s*1e6:7.1f} us {r.gbps(case.bytes):5.0f} GB/s {parts[:90]} "
                      f"t={time.time()-t_start:.0f}", flush=True)
    finally:
        group.release()
launch.MATRIX_PARTIAL, launch.TARGET_THREADGROUPS = ORIGINAL, TG
paged.set_matrix_partial(True, 1)
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/psweep.json", "w"), indent=1)
