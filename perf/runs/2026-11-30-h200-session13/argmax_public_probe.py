"""Session 13, call U1: normalized argmax's public call now that the cuda arm runs the fused variant (one launch),
against the same public wrapper around the two launches it replaced (MLX's logsumexp, then the row kernel) and the
control; 64 x 151936 bfloat16, 8 input sets taken in turn, interleaved (perf.interleaved; us per call). Session 12
timed the fused variant only as a bare compiled call (T9)."""

import sys
from functools import lru_cache

import mlx.core as mx

from impl import normalized_argmax as am
from impl.arms import resolve_arm
from perf.interleaved import in_turn, interleaved, ratios, table

mx.set_default_device(mx.gpu)


@lru_cache(maxsize=None)
def _two_launches(arm):
    return mx.compile(lambda x: am.row_launch(x, am._lse(x)).run(arm)[0])


def public_two_launches(logits, arm=None):
    """normalized_argmax's wrapper as committed (the same checks, in the same order) around the two launches."""
    if not isinstance(logits, mx.array):
        raise TypeError(f"logits must be an mx.array, got {type(logits).__name__}")
    if logits.ndim == 0:
        raise ValueError("logits must have a vocabulary axis, got a 0-d array")
    arm = resolve_arm(arm)
    if logits.size == 0 or logits.dtype not in am.ELIGIBLE_DTYPES:
        return am.normalized_argmax_native(logits)
    return _two_launches(arm)(logits)


sets = []
for s in range(8):
    mx.random.seed(100 + s)
    logits = (4.0 * mx.random.normal((64, 151936))).astype(mx.bfloat16)
    mx.eval(logits)
    sets.append(logits)
for x in sets:
    native = am.normalized_argmax_native(x)
    assert mx.array_equal(am.normalized_argmax(x, arm="cuda"), native).item()
    assert mx.array_equal(public_two_launches(x, arm="cuda"), native).item()
calls = {
    "public (fused, one launch)": in_turn(sets, lambda x: am.normalized_argmax(x, arm="cuda")),
    "public wrapper, two launches": in_turn(sets, lambda x: public_two_launches(x, arm="cuda")),
    "control": in_turn(sets, am.normalized_argmax_native),
}
results = interleaved(calls, blocks=int(sys.argv[1]) if len(sys.argv) > 1 else 8, rounds=30)
print(table(results))
print(ratios(results, "control"))
