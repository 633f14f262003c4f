"""Session 12, call T8: normalized argmax like for like. The public call as committed (the raw-logit scan) against
the same public wrapper around the row kernel before it (row_before.py, commit 8d8cdde), and the control; 64 x 151936
bfloat16, 8 input sets, interleaved (T6 compared the public call with a bare compiled call)."""

import sys
from functools import lru_cache
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
import row_before  # noqa: E402

from impl import normalized_argmax as am  # noqa: E402
from impl.arms import resolve_arm  # noqa: E402
from impl.kernels import KernelSpec, Launch  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402

mx.set_default_device(mx.gpu)
BEFORE = KernelSpec("normalized_argmax_row_before", ("logits", "lse"), ("out",), row_before.ROW_SOURCE,
                    header=row_before.HEADER)


def _kernel_before(logits, arm):
    rows, vocab = logits.shape
    threads = am.threads_for(vocab)
    return Launch(BEFORE, (logits, mx.logsumexp(logits, axis=-1, keepdims=True)),
                  (("V", vocab), ("THREADS", threads), ("UNROLL", row_before.UNROLL), ("T", logits.dtype)),
                  grid=(threads * rows, 1, 1), threadgroup=(threads, 1, 1), output_shapes=((rows,),),
                  output_dtypes=(mx.uint32,)).run(arm)[0]


@lru_cache(maxsize=None)
def _compiled_before(arm):
    return mx.compile(lambda logits: _kernel_before(logits, arm))


def public_before(logits, arm=None):
    """normalized_argmax's wrapper as committed (the same checks, in the same order) around the kernel before."""
    if not isinstance(logits, mx.array):
        raise TypeError(f"logits must be an mx.array, got {type(logits).__name__}")
    if logits.ndim == 0:
        raise ValueError("logits must have a vocabulary axis, got a 0-d array")
    arm = resolve_arm(arm)
    if logits.size == 0 or logits.dtype not in am.ELIGIBLE_DTYPES:
        return am.normalized_argmax_native(logits)
    return _compiled_before(arm)(logits)


sets = []
for s in range(8):
    mx.random.seed(100 + s)
    logits = (4.0 * mx.random.normal((64, 151936))).astype(mx.bfloat16)
    mx.eval(logits)
    sets.append(logits)
for x in sets:
    native = am.normalized_argmax_native(x)
    assert mx.array_equal(am.normalized_argmax(x, arm="cuda"), native).item()
    assert mx.array_equal(public_before(x, arm="cuda"), native).item()
calls = {
    "after": in_turn(sets, lambda x: am.normalized_argmax(x, arm="cuda")),
    "before": in_turn(sets, lambda x: public_before(x, arm="cuda")),
    "control": in_turn(sets, am.normalized_argmax_native),
}
results = interleaved(calls, blocks=int(sys.argv[1]) if len(sys.argv) > 1 else 10, rounds=30)
print(table(results))
print(ratios(results, "control"))
