"""Kernel time of the matrix partial's K / V dim layouts on the H200 (issue 32's 32/8 gap): 'run' (before: a lane's
words one contiguous 64-byte run, a load instruction of a row's four lanes four 16-byte pieces 64 bytes apart) and
'interleaved' (now: dim_of, each load instruction of a row's four lanes one contiguous 64-byte run), and it with a
plain load instead of __ldcs.
python3 layout_sweep.py CALLS OUT.json"""
import json, subprocess, sys, time
import mlx.core as mx
import numpy as np
import impl.paged_attention as paged
from impl.paged_attention import launch
from impl.kernels.compile import KernelSpec, SIMDGROUP_HEADER
from perf import kernel_time as kt
from perf.cases import paged_group
from perf.shapes import DecodeShape

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 12
git = lambda p: subprocess.run(["git", "show", f"HEAD:{p}"], capture_output=True, text=True, check=True).stdout
OLD_HEADER, OLD_BODY = git("impl/paged_attention/paged_attention.h"), git("impl/paged_attention/partial_matrix.metal")
assert OLD_BODY != launch.MATRIX_PARTIAL_SOURCE
spec = lambda body, header: KernelSpec("paged_attention_matrix_partial", ("q", "keys", "values", "table", "geometry"),
                                       ("parts",), body, header=SIMDGROUP_HEADER + header)
LDCS = "#define STREAM_LOAD(VecT, p) __ldcs((const VecT*)(p))"
assert launch.HEADER.count(LDCS) == 1
VARIANTS = {"run": spec(OLD_BODY, OLD_HEADER), "interleaved": launch.MATRIX_PARTIAL,
            "interleaved-plain": spec(launch.MATRIX_PARTIAL_SOURCE,
                                      launch.HEADER.replace(LDCS, "#define STREAM_LOAD(VecT, p) (*((const VecT*)(p)))"))}
order = list(VARIANTS) + [v + "-b" for v in VARIANTS]
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768), (16, 8, 1, 256, 131072),
          (32, 8, 1, 128, 4096), (8, 8, 1, 96, 8192), (8, 8, 1, 80, 8192)]
avail = kt.availability()
out = {}
t_start = time.time()


def use(name):
    launch.MATRIX_PARTIAL = VARIANTS[name.removesuffix("-b")]
    paged.set_matrix_partial(True, 1)
    paged._compiled_pair.cache_clear()


for dims in SHAPES:
    group = paged_group(DecodeShape(*dims), ["cuda"], copies=calls)
    try:
        for case in group.cases:
            if case.kernel not in kt.SMOKE_KERNELS:
                continue
            if case.kernel == "paged_attention":  # the two layouts agree on the same inputs
                res = {}
                for name in ("run", "interleaved"):
                    use(name)
                    y = case.build()()
                    y = y[0] if isinstance(y, (tuple, list)) else y
                    res[name] = np.array(y.astype(mx.float32))
                diff = float(np.max(np.abs(res["run"] - res["interleaved"])))
                print(dims, "max |run - interleaved| =", diff, "max |y| =", float(np.max(np.abs(res["run"]))),
                      flush=True)
                out[f"{dims}|agree"] = diff
            todo = order if case.kernel == "paged_attention" else ["sdpa", "sdpa-b"]
            for name in todo:
                if case.kernel == "paged_attention":
                    use(name)
                try:
                    r = kt.measure(case.build(), case_id=case.id, runtime=case.runtime, calls=calls, timer=avail.timer)
                except Exception as exc:
                    print(dims, name, "ERROR", type(exc).__name__, str(exc)[:600], flush=True)
                    continue
                med = {k[:40]: v * 1e6 for k, v in r.kernel_medians_s().items()}
                out[f"{case.id}|{name}"] = {"median_us": r.median_s * 1e6, "iqr_us": r.iqr_s * 1e6,
                                            "gbps": r.gbps(case.bytes), "split_us": med}
                parts = " ".join(f"{k[-18:]}={v:.1f}" for k, v in med.items())
                print(f"{dims} {name:14s} {r.median_s*1e6:7.1f} us {r.gbps(case.bytes):5.0f} GB/s {parts[:90]} "
                      f"t={time.time()-t_start:.0f}", flush=True)
    finally:
        group.release()
launch.MATRIX_PARTIAL = VARIANTS["interleaved"]
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/layout.json", "w"), indent=1)
