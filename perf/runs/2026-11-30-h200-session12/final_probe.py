"""Session 12, call T6: normalized argmax as committed (the raw-logit scan) against the row kernel before it
(row_before.py, commit 8d8cdde) and the control, each the whole public-style call (MLX's logsumexp + the row
kernel, mx.compile'd), 64 x 151936 bfloat16, 8 input sets, interleaved; and each arm's answer on the sets."""

import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
import row_before  # noqa: E402

from impl import normalized_argmax as am  # noqa: E402
from impl.kernels import KernelSpec, Launch  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402

mx.set_default_device(mx.gpu)
BEFORE = KernelSpec("normalized_argmax_row_before", ("logits", "lse"), ("out",), row_before.ROW_SOURCE,
                    header=row_before.HEADER)


def before_call(x):
    rows, vocab = x.shape
    threads = am.threads_for(vocab)
    return Launch(BEFORE, (x, mx.logsumexp(x, axis=-1, keepdims=True)),
                  (("V", vocab), ("THREADS", threads), ("UNROLL", row_before.UNROLL), ("T", x.dtype)),
                  grid=(threads * rows, 1, 1), threadgroup=(threads, 1, 1), output_shapes=((rows,),),
                  output_dtypes=(mx.uint32,)).run("cuda")[0]


sets = []
for s in range(8):
    mx.random.seed(100 + s)
    logits = (4.0 * mx.random.normal((64, 151936))).astype(mx.bfloat16)
    mx.eval(logits)
    sets.append(logits)
before = mx.compile(before_call)
for x in sets:
    native = am.normalized_argmax_native(x)
    assert mx.array_equal(am.normalized_argmax(x, arm="cuda"), native).item()
    assert mx.array_equal(before(x), native).item()
calls = {
    "committed": in_turn(sets, lambda x: am.normalized_argmax(x, arm="cuda")),
    "before": in_turn(sets, before),
    "control": in_turn(sets, am.normalized_argmax_native),
}
results = interleaved(calls, blocks=int(sys.argv[1]) if len(sys.argv) > 1 else 8, rounds=30)
print(table(results))
print(ratios(results, "control"))
