"""Kernel time of the matrix partial with K / V staged ahead in threadgroup memory (template ST, cp.async on CUDA)
against register loads (ST 0), beside MLX SDPA on contiguous K/V, on the H200 (issue 32's 32/8 gap); and, at
32/8/D128/N128k, the same kernels over an identity block table (the pool's blocks in logical order), which tells the
scatter of a permuted table's 4 KB blocks apart from the kernel.
python3 stage_sweep.py CALLS OUT.json"""
import json, sys, time
import mlx.core as mx
import numpy as np
import impl.paged_attention as paged
from impl.paged_attention import launch
from perf import cases, kernel_time as kt
from perf.shapes import DecodeShape

calls = int(sys.argv[1]) if len(sys.argv) > 1 else 12
STAGES = (0, 2, 0, 2)  # each twice, interleaved: the spread between two measurements of one kernel
SHAPES = [((32, 8, 1, 128, 131072), False), ((32, 8, 1, 128, 131072), True), ((32, 8, 1, 128, 32768), False),
          ((8, 1, 1, 128, 32768), False), ((32, 8, 1, 128, 4096), False), ((8, 8, 1, 80, 8192), False)]
avail = kt.availability()
out, t_start = {}, time.time()


class _IdentityTables:  # perf.cases' numpy, whose rng.permutation(blocks) (the pool's table) is the identity
    random = type("random", (), {"default_rng": staticmethod(lambda seed: type("rng", (), {
        "permutation": staticmethod(np.arange)}))})

    def __getattr__(self, name):
        return getattr(np, name)


def use(stages):
    launch.MATRIX_STAGES = stages
    paged.set_matrix_partial(True, 1)
    paged._compiled_pair.cache_clear()


def result(case):
    y = case.build()()
    y = y[0] if isinstance(y, (tuple, list)) else y
    return np.array(y.astype(mx.float32))


for dims, identity in SHAPES:
    # identity: perf.cases._pool's table is rng.permutation(blocks); the identity keeps every block where it is
    cases.np = _IdentityTables() if identity else np
    group = cases.paged_group(DecodeShape(*dims), ["cuda"], copies=calls)
    cases.np = np
    tag = f"{dims}{'|identity' if identity else ''}"
    try:
        for case in group.cases:
            if case.kernel not in kt.SMOKE_KERNELS:
                continue
            if case.kernel == "paged_attention":
                ys = {}
                for st in (0, 2):
                    use(st)
                    ys[st] = result(case)
                same = bool(np.array_equal(ys[0], ys[2]))  # the same words reach the same products: bit for bit
                print(tag, "ST 0 and ST 2 outputs bit-identical:", same, flush=True)
                out[f"{tag}|identical"] = same
            todo = STAGES if case.kernel == "paged_attention" else ("sdpa", "sdpa")
            for i, name in enumerate(todo):
                if case.kernel == "paged_attention":
                    use(name)
                label = f"ST{name}" if case.kernel == "paged_attention" else name
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
use(0)
json.dump(out, open(sys.argv[2] if len(sys.argv) > 2 else "/tmp/stages.json", "w"), indent=1)
