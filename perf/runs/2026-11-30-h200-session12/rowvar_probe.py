"""Session 12, call T4: the row kernel's footprint (64 x 151936 bfloat16, 8 input sets, interleaved).

T3 had MLX's logsumexp at 8.5 us per call pipelined8 and the row kernel at 16.1, though the row kernel only
compares: with 47 registers a 1024-thread block fills an SM's register file, so the calls of a round (whose
kernels MLX's graph may run side by side: they share no array) cannot share an SM, as MLX's lighter logsumexp
blocks can. Here the row kernel at threadgroups of 1024 / 512 / 256 threads and 8 or 4 chunks per thread per round,
alone (given the lse) and in the two-launch call, against the control.
"""

import mlx.core as mx

from impl import normalized_argmax as am
from impl.kernels import Launch
from perf.interleaved import in_turn, interleaved, ratios, table

mx.set_default_device(mx.gpu)


def row_launch(x, lse, threads, unroll):
    rows, vocab = x.shape
    return Launch(am.ROW, (x, lse), (("V", vocab), ("THREADS", threads), ("UNROLL", unroll), ("T", x.dtype)),
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

calls = {}
for threads, unroll in ((1024, 8), (512, 8), (512, 4), (256, 8), (256, 4), (128, 8)):
    alone = mx.compile(lambda x, lse, t=threads, u=unroll: row_launch(x, lse, t, u).run("cuda")[0])
    two = mx.compile(lambda x, t=threads, u=unroll: row_launch(
        x, mx.logsumexp(x, axis=-1, keepdims=True), t, u).run("cuda")[0])
    for x in sets[:2]:
        assert mx.array_equal(two(x), am.normalized_argmax_native(x)).item(), (threads, unroll)
    calls[f"row_{threads}_{unroll}"] = in_turn(pairs, lambda p, f=alone: f(*p))
    calls[f"call_{threads}_{unroll}"] = in_turn(sets, two)
calls["control"] = in_turn(sets, am.normalized_argmax_native)
results = interleaved(calls, blocks=4, rounds=25)
print(table(results))
print(ratios(results, "control"))
