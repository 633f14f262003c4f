"""Kernel time of the paged decode at several threadgroup targets (launch.TARGET_THREADGROUPS: the partition count
per launch follows it), beside MLX SDPA on contiguous K/V, on the H200 (issue 32's 32/8/D128 gap: 512 threadgroups
of 4 per SM fill 512 of the H200's 528 slots in one wave; more, shorter partitions balance the SMs' share).
python3 target_sweep.py CALLS OUT.json"""
import json, sys, time
import mlx.core as mx
import numpy as np
import impl.paged_attention as paged
from impl.paged_attention import launch
from perf import cases, kernel_time as kt
from perf.shapes import DecodeShape

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 12
KEPT = launch.TARGET_THREADGROUPS
TARGETS = (512, 1024, 2048, 4096, 256, 512)  # the kept target first and last: the spread of one kernel's figure
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768), (32, 8, 1, 128, 4096),
          (16, 8, 1, 256, 131072)]
avail = kt.availability()
out, t_start = {}, time.time()


def use(target):
    launch.TARGET_THREADGROUPS = target
    paged._RECENT.clear()  # validated calls -> their compiled pair: the plan of the previous target
    paged._plan.cache_clear()
    paged._compiled_pair.cache_clear()


def result(case):
    y = case.build()()
    y = y[0] if isinstance(y, (tuple, list)) else y
    return np.array(y.astype(mx.float32))


for dims in SHAPES:
    group = cases.paged_group(DecodeShape(*dims), ["cuda"], copies=calls)
    tag = str(dims)
    try:
        for case in group.cases:
            if case.kernel not in kt.SMOKE_KERNELS:
                continue
            if case.kernel == "paged_attention":
                use(KEPT)
                ref = result(case)
                for target in sorted(set(TARGETS)):
                    use(target)
                    diff = float(np.max(np.abs(result(case) - ref)))  # another partition: another summation order
                    out[f"{tag}|T{target}|max_abs_diff"] = diff
                print(tag, "max |y(T) - y(kept)|:", {k.split("|")[1]: v for k, v in out.items()
                                                     if k.startswith(tag) and k.endswith("diff")}, flush=True)
            todo = TARGETS if case.kernel == "paged_attention" else ("sdpa", "sdpa")
            for name in todo:
                if case.kernel == "paged_attention":
                    use(name)
                label = f"T{name}" if case.kernel == "paged_attention" else name
                try:
                    r = kt.measure(case.build(), case_id=case.id, runtime=case.runtime, calls=calls, timer=avail.timer)
                except Exception as exc:
                    print(tag, label, "ERROR", type(exc).__name__, str(exc)[:600], flush=True)
                    continue
                med = {k[:48]: v * 1e6 for k, v in r.kernel_medians_s().items()}
                out.setdefault(f"{tag}|{label}", []).append({"median_us": r.median_s * 1e6, "iqr_us": r.iqr_s * 1e6,
                                                             "gbps": r.gbps(case.bytes), "split_us": med})
                parts = " ".join(f"{k[-22:]}={v:.1f}" for k, v in med.items())
                print(f"{tag} {label:5s} {r.median_s*1e6:7.1f} us {r.gbps(case.bytes):5.0f} GB/s {parts[:110]} "
                      f"t={time.time()-t_start:.0f}", flush=True)
    finally:
        group.release()
use(KEPT)
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/targets.json", "w"), indent=1)
