"""Kernel time per kernel of paged decode on the H200: the two-pass merge (guarded loads) against the one-pass
batched merges (records/h200-cuda/merge/README.md). python3 records/h200-cuda/merge/sweep.py CALLS OUT.json [short]"""
import json, statistics, sys, time
from pathlib import Path
import impl.paged_attention as paged
from impl.paged_attention import launch
from impl.kernels.compile import KernelSpec
from perf import kernel_time as kt
from perf.cases import paged_group
from perf.shapes import DecodeShape

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 12
here = Path(__file__).parent
# old: the two-pass merge; new: one pass, its slices' rescale in the last loop; split: the merge as it stands
FILES = {"old": here / "merge-two-pass.metal", "new": here / "merge-batched-last-loop-rescale.metal",
         "split": here / "../../../impl/paged_attention/merge.metal"}
SPECS = {name: KernelSpec("paged_attention_merge", ("parts", "geometry"), ("out",), path.read_text())
         for name, path in FILES.items()}
SHAPES = [(8, 1, 1, 128, 32768), (32, 8, 1, 128, 4096), (32, 8, 1, 128, 32768)] if "short" in sys.argv else [
    (8, 1, 1, 128, 32768), (32, 8, 1, 128, 4096), (32, 8, 1, 128, 32768), (32, 8, 1, 128, 131072),
    (8, 1, 1, 128, 131072), (16, 8, 1, 256, 131072)]
variants = [("old", "old", True, 1), ("new", "new", True, 1), ("split", "split", True, 1),
            ("old-b", "old", True, 1), ("new-b", "new", True, 1), ("split-b", "split", True, 1)]
captured = []


class Rec:
    def __init__(self):
        self.p = kt.cupti_trace()

    def __enter__(self):
        self.p.__enter__()
        return self

    def __exit__(self, *a):
        r = self.p.__exit__(*a)
        captured.append(kt.device_events(self.p.events()))
        return r

    def events(self):
        return self.p.events()


avail = kt.availability()
out = {}
t_start = time.time()
for dims in SHAPES:
    group = paged_group(DecodeShape(*dims), ["cuda"], copies=calls)
    try:
        for case in group.cases:
            if case.kernel not in kt.SMOKE_KERNELS:
                continue
            todo = variants if case.kernel == "paged_attention" else [("sdpa", "new", True, 1)]
            if dims[3] == 256 and case.kernel == "paged_attention":
                todo = [v for v in todo if v[3] == 1]
            for name, merge, enabled, tt in todo:
                launch.MERGE = SPECS[merge]
                paged.set_matrix_partial(enabled, tt); paged._compiled_pair.cache_clear()
                captured.clear()
                try:
                    r = kt.measure(case.build(), case_id=case.id, runtime=case.runtime, calls=calls, timer=avail.timer,
                                   trace=Rec)
                except Exception as exc:
                    print(case.id, name, "ERROR", type(exc).__name__, str(exc)[:300], flush=True)
                    continue
                split = {}
                for call in captured:
                    for e in call:
                        key = "merge" if "merge" in e.name else "partial" if "partial" in e.name else e.name[:24]
                        split.setdefault(key, []).append(e.seconds * 1e6)
                med = {k: statistics.median(v) for k, v in split.items()}
                out[f"{case.id}|{name}"] = {"median_us": r.median_s * 1e6, "iqr_us": r.iqr_s * 1e6,
                                            "gbps": r.gbps(case.bytes), "split_us": med}
                parts = " ".join(f"{k}={v:.1f}" for k, v in med.items())
                print(f"{dims} {case.kernel[:5]} {name:9s} {r.median_s*1e6:7.1f} us {r.gbps(case.bytes):5.0f} GB/s "
                      f"{parts[:70]} t={time.time()-t_start:.0f}", flush=True)
    finally:
        group.release()
launch.MERGE = SPECS["new"]
paged.set_matrix_partial(True, 1)
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/sweep.json", "w"), indent=1)
