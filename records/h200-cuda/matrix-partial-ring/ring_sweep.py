"""Kernel time of the matrix partial's ring fetch (launch.MATRIX_RING slots, cp.async on CUDA) against register
loads (ring 0), at threadgroup targets 512 and 384, beside MLX SDPA on contiguous K/V; outputs compared bit for bit
with ring 0's (the same words reach the same products).
    python3 ring_sweep.py CALLS OUT.json"""
import json
import sys
import time

import mlx.core as mx
import numpy as np

import impl.paged_attention as paged
from impl.paged_attention import launch
from perf import cases, kernel_time as kt
from perf.shapes import DecodeShape

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 12
# (slots, threadgroup target, the register fetch launched with 48 KB of unused dynamic shared memory: does a
# partial's shared-memory carveout slow the merge after it?)
VARIANTS = [(0, 512, False), (3, 512, False), (2, 512, False), (3, 384, False), (0, 512, True),
            (0, 512, False), (3, 512, False), (2, 512, False), (3, 384, False), (0, 512, True)]
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768), (32, 8, 1, 128, 4096),
          (16, 8, 1, 64, 32768)]
avail = kt.availability()
out, t_start = {}, time.time()


_shape = paged._partial_shape


def use(ring, target, carveout=False):
    paged._partial_shape = (lambda *a: _shape(*a)._replace(shared_memory=48 * 1024)) if carveout else _shape
    paged.set_matrix_ring(ring)
    paged.set_threadgroup_target(target)


def result(case):
    y = case.build()()
    return np.array((y[0] if isinstance(y, (tuple, list)) else y).astype(mx.float32))


for dims in SHAPES:
    group = cases.paged_group(DecodeShape(*dims), ["cuda"], copies=calls)
    tag = str(dims)
    try:
        for case in group.cases:
            if case.kernel not in kt.SMOKE_KERNELS:
                continue
            if case.kernel == "paged_attention":
                use(0, 512)
                ref = result(case)
                for ring in (2, 3, 4):
                    use(ring, 512)
                    y = result(case)
                    same = bool(np.array_equal(ref, y))
                    print(tag, f"ring {ring} bit-identical to ring 0: {same}",
                          "" if same else f"max |diff| {np.nanmax(np.abs(ref - y))}", flush=True)
                    out[f"{tag}|ring{ring}|identical"] = same
            todo = VARIANTS if case.kernel == "paged_attention" else [("sdpa", 0, False), ("sdpa", 0, False)]
            for ring, target, carveout in todo:
                if case.kernel == "paged_attention":
                    use(ring, target, carveout)
                label = (f"ring{ring}/tg{target}{'+48KB' if carveout else ''}" if case.kernel == "paged_attention"
                         else "sdpa")
                try:
                    r = kt.measure(case.build(), case_id=case.id, runtime=case.runtime, calls=calls,
                                   timer=avail.timer)
                except Exception as exc:
                    print(tag, label, "ERROR", type(exc).__name__, str(exc)[:900], flush=True)
                    continue
                med = {k[:60]: round(v * 1e6, 2) for k, v in r.kernel_medians_s().items()}
                out.setdefault(f"{tag}|{label}", []).append({"median_us": r.median_s * 1e6, "iqr_us": r.iqr_s * 1e6,
                                                             "gbps": r.gbps(case.bytes), "split_us": med})
                parts = " ".join(f"{k[-26:]}={v:.1f}" for k, v in med.items())
                print(f"{tag} {label:12s} {r.median_s * 1e6:7.1f} us {r.gbps(case.bytes):5.0f} GB/s {parts[:120]} "
                      f"t={time.time() - t_start:.0f}", flush=True)
    finally:
        group.release()
use(0, 512)
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/ring.json", "w"), indent=1)
