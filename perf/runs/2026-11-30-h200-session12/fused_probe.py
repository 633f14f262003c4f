"""Session 12, call T1: normalized argmax's fused variant (CUDA) on the H200.

1. Its lse against mx.logsumexp, row by row: the production body and, should it differ, variants of it (log as
   __logf; the butterflies upward; no multiply-add contraction), to find which one MLX's kernel is.
2. Interleaved in one process (perf.interleaved): the public call (fused), the two-launch row kernel it replaces
   (mx.logsumexp + the row kernel, compiled the same way) and the control (argmax(x - logsumexp(x))), at 64 x 151936
   bfloat16, 8 input sets taken in turn.
"""

import sys

import mlx.core as mx
import numpy as np

from impl import normalized_argmax as am
from impl.kernels import KernelSpec, Launch
from perf.interleaved import in_turn, interleaved, ratios, table

mx.set_default_device(mx.gpu)
rng = np.random.default_rng(0)


def variant(name, source):
    spec = KernelSpec(f"argmax_probe_{name}", ("logits",), ("out", "lse"), source, header=am.HEADER, arms=("cuda",))

    def run(x):
        launch = am.fused_launch(x)
        launch = Launch(spec, launch.inputs, launch.template, launch.grid, launch.threadgroup, launch.output_shapes,
                        launch.output_dtypes)
        return launch.run("cuda")
    return run


src = am.FUSED_SOURCE
butterfly = "for (int m = 16; m > 0; m >>= 1)"
VARIANTS = {
    "production": lambda x: am.fused_launch(x).run("cuda"),
    "fast_log": variant("fast_log", src.replace("logf(normalizer)", "__logf(normalizer)")),
    "upward": variant("upward", src.replace(butterfly, "for (int m = 1; m < 32; m <<= 1)")),
    "no_fma": variant("no_fma", src.replace("normalizer * __expf(prevmax - maxval)",
                                            "__fmul_rn(normalizer, __expf(prevmax - maxval))")),
}


def rows(V, dtype, n=256):
    x = rng.standard_normal((n, V)) * rng.choice([0.01, 1.0, 4.0, 30.0], (n, 1)) + rng.normal(0, 5, (n, 1))
    return mx.array(x.astype(np.float32)).astype(dtype)


TIMING_ONLY = "timing" in sys.argv
print("== lse: rows differing from mx.logsumexp (of 256 per case)")
for dtype in (() if TIMING_ONLY else (mx.float32, mx.bfloat16, mx.float16)):
    for V in (1, 3, 100, 129, 1000, 1025, 2049, 4100, 32000, 151936):
        x = rows(V, dtype)
        ref = mx.logsumexp(x, axis=-1)
        counts = {}
        for name, run in VARIANTS.items():
            ids, lse = run(x)
            counts[name] = int(mx.sum(lse != ref).item())
        ids, _ = VARIANTS["production"](x)
        (two,) = am.row_launch(x, mx.logsumexp(x, axis=-1, keepdims=True)).run("cuda")
        counts["ids_vs_two_launch"] = int(mx.sum(ids != two).item())
        print(f"{str(dtype):14} V={V:6} threads={am.lse_threads(V):4} {counts}", flush=True)

print("\n== interleaved, 64 x 151936 bfloat16, 8 input sets")
sets = []
for s in range(8):
    mx.random.seed(100 + s)
    logits = (4.0 * mx.random.normal((64, 151936))).astype(mx.bfloat16)
    mx.eval(logits)
    sets.append(logits)
two_launch = mx.compile(lambda x: am.row_launch(x, mx.logsumexp(x, axis=-1, keepdims=True)).run("cuda")[0])
calls = {
    "fused": in_turn(sets, lambda x: am.normalized_argmax(x, arm="cuda")),
    "two_launch": in_turn(sets, two_launch),
    "control": in_turn(sets, am.normalized_argmax_native),
}
for x in sets[:2]:
    assert mx.array_equal(am.normalized_argmax(x, arm="cuda"), am.normalized_argmax_native(x)).item()
results = interleaved(calls, blocks=6, rounds=30)
print(table(results))
print(ratios(results, "control"))
