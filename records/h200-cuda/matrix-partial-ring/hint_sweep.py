"""The ring fetch's copies with an L2 evict-first policy (ring.h's ring_copy16_evict_first) against the plain `.cg`
copies and the register fetch, kernel time beside MLX SDPA (does the K / V stream evict the partials the merge reads
next?); outputs compared bit for bit with ring 0's.
    python3 hint_sweep.py CALLS OUT.json"""
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
# (slots, threadgroup target, evict-first copies)
VARIANTS = [(0, 512, False), (3, 512, False), (3, 512, True), (2, 512, True),
            (0, 512, False), (3, 512, False), (3, 512, True), (2, 512, True)]
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768), (16, 8, 1, 64, 32768)]
avail = kt.availability()
out, t_start = {}, time.time()


import dataclasses

PLAIN = launch.MATRIX_PARTIAL_RING
HINTED = dataclasses.replace(PLAIN, name=PLAIN.name + "_evict_first",
                             source=PLAIN.source.replace("ring_copy16(", "ring_copy16_evict_first("))


def use(ring, target, hinted=False):
    launch.MATRIX_PARTIAL_RING = HINTED if hinted else PLAIN
    launch._partial_shape.cache_clear()
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
                for ring in (2, 3):
                    use(ring, 512, True)
                    y = result(case)
                    same = bool(np.array_equal(ref, y))
                    print(tag, f"ring {ring} evict-first bit-identical to ring 0: {same}", flush=True)
                    out[f"{tag}|ring{ring}-evict-first|identical"] = same
            todo = VARIANTS if case.kernel == "paged_attention" else [("sdpa", 0, False), ("sdpa", 0, False)]
            for ring, target, hinted in todo:
                if case.kernel == "paged_attention":
                    use(ring, target, hinted)
                label = (f"ring{ring}/tg{target}{'+evict-first' if hinted else ''}" if case.kernel == "paged_attention"
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
