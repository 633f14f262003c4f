"""One call of the paged kernels (matrix partial + merge) and one of MLX SDPA over the same K/V laid out contiguously,
between cudaProfilerStart / Stop, for ncu (issue 32's 32/8/D128 gap: where the partial's time goes against cuDNN's).
    ncu --profile-from-start off --clock-control none --set full -o rep python3 ncu_profile.py [Hq Hkv D N]"""
import sys

import mlx.core as mx
import torch

from perf import cases
from perf.shapes import DecodeShape

dims = tuple(int(x) for x in sys.argv[1:5]) if len(sys.argv) > 4 else (32, 8, 128, 131072)
hq, hk, d, n = dims
group = cases.paged_group(DecodeShape(hq, hk, 1, d, n), ["cuda"], copies=2)
calls = {case.kernel: case.build() for case in group.cases if case.kernel in ("paged_attention", "sdpa")}
print({k: c for k, c in zip(calls, [case.id for case in group.cases if case.kernel in calls])}, flush=True)


def once(fn):
    y = fn()
    mx.eval(y)
    mx.synchronize()


for _ in range(3):  # JIT, CUDA graphs: outside the profiled range
    for fn in calls.values():
        once(fn)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for fn in calls.values():
    once(fn)
torch.cuda.profiler.stop()
group.release()
print("profiled", list(calls), flush=True)
