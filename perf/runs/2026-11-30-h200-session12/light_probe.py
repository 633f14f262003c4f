"""Session 12, call T5: the row kernel scanning raw logits (light_scan.py) against the committed one and the
fused variant with a rescan (pieces_probe.py), 64 x 151936 bfloat16, 8 input sets, interleaved."""

import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
from light_scan import LIGHT_SCAN  # noqa: E402

from impl import normalized_argmax as am  # noqa: E402
from impl.kernels import KernelSpec, Launch  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402

mx.set_default_device(mx.gpu)
LIGHT = KernelSpec("argmax_light_probe", ("logits", "lse"), ("out",), am.ROW_PROLOGUE + am.ROW_SHIFT + LIGHT_SCAN,
                   header=am.HEADER)


def row_launch(spec, x, lse, threads, unroll):
    rows, vocab = x.shape
    return Launch(spec, (x, lse), (("V", vocab), ("THREADS", threads), ("UNROLL", unroll), ("T", x.dtype)),
                  grid=(threads * rows, 1, 1), threadgroup=(threads, 1, 1), output_shapes=((rows,),),
                  output_dtypes=(mx.uint32,))


sets, lses = [], []
for s in range(8):
    mx.random.seed(100 + s)
    logits = (4.0 * mx.random.normal((64, 151936))).astype(mx.bfloat16)
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    mx.eval(logits, lse)
    sets.append(logits)
    lses.append(lse)
pairs = list(zip(sets, lses))

# planted rounding ties (lowest id must win), one inside a thread before its largest logit, all -inf, NaN
tie = mx.full((5, 151936), -0.05, mx.bfloat16)
tie[:, 151935] = 2.0**-7
tie[0, 2] = 0.0
tie[1, 700] = 0.0
tie[2] = mx.full((151936,), -mx.inf, mx.bfloat16)
tie[3, 5] = mx.nan
tie[4, 3 + 4 * 1024 * 3] = 0.0  # thread 0, a chunk before the same thread's 2^-7 ... (different thread: checks both)
tie[4, 4 * 1024 * 5] = 2.0**-7  # thread 0's chunk 5 * 1024: its largest, after an id of thread 0 rounding alike
tie[4, 4 * 1024 * 2] = 0.0      # thread 0's chunk 2 * 1024: the lowest id rounding to the best score

calls = {}
for name, spec, threads, unroll in (("row", am.ROW, 1024, 8), ("light8", LIGHT, 1024, 8), ("light4", LIGHT, 1024, 4),
                                    ("light4_512", LIGHT, 512, 4)):
    alone = mx.compile(lambda x, lse, s=spec, t=threads, u=unroll: row_launch(s, x, lse, t, u).run("cuda")[0])
    two = mx.compile(lambda x, s=spec, t=threads, u=unroll: row_launch(
        s, x, mx.logsumexp(x, axis=-1, keepdims=True), t, u).run("cuda")[0])
    for x in sets[:3]:
        assert mx.array_equal(two(x), am.normalized_argmax_native(x)).item(), name
    ref = am.normalized_argmax(tie, arm="graph")
    print(name, "planted:", two(tie).tolist(), "graph arm:", ref.tolist(), flush=True)
    calls[f"{name}_alone"] = in_turn(pairs, lambda p, f=alone: f(*p))
    calls[name] = in_turn(sets, two)
calls["control"] = in_turn(sets, am.normalized_argmax_native)
results = interleaved(calls, blocks=6, rounds=25)
print(table(results))
print(ratios(results, "control"))
