"""Session 12, call T9: one launch again, now with the raw-logit scan's candidate phase: pass 1 is MLX's CUDA
logsumexp mirrored (fused_source.py) and also keeps each thread's largest logit, its first id and the largest before
it; then the committed kernel's candidate phase (no second pass over the row). At 4 and 8 chunks per round, against
the committed two launches (bare compiled and public) and the control; 64 x 151936 bfloat16, 8 input sets."""

import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
import fused_source  # noqa: E402

from impl import normalized_argmax as am  # noqa: E402
from impl.kernels import KernelSpec, Launch  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402

TRACK = ("      for (uint e = 0; e < 4u; ++e) normalizer = normalizer + __expf(c[u].v[e] - maxval);\n")
PASS1 = fused_source.FUSED_LSE.replace(TRACK, TRACK + (
    "      for (uint e = 0; e < 4u; ++e) {\n"
    "        if (c[u].v[e] > top) { before = top; top = c[u].v[e]; topId = 4u * ((r0 + u) * THREADS + tid) + e; }\n"
    "      }\n"))
assert PASS1 != fused_source.FUSED_LSE
STATE = ("  float top = -INFINITY, before = -INFINITY;\n"
         "  uint topId = 0xffffffffu;\n")
CANDIDATES = am.ROW_SOURCE[am.ROW_SOURCE.index("  float mine = float(T(top - shift));"):]
SOURCE = fused_source.ROW_PROLOGUE + STATE + PASS1 + CANDIDATES
SPEC = KernelSpec("argmax_fused_light_probe", ("logits",), ("out", "lse"), SOURCE, header=am.HEADER, arms=("cuda",))


def mlx_threads(vocab):
    chunks = -(-vocab // 4)
    return next((t for t in (32, 64, 128, 256, 512) if chunks <= t), 1024)


def fused_launch(x, unroll):
    rows, vocab = x.shape
    t = mlx_threads(vocab)
    return Launch(SPEC, (x,), (("V", vocab), ("THREADS", t), ("UNROLL", unroll), ("T", x.dtype)),
                  grid=(t * rows, 1, 1), threadgroup=(t, 1, 1), output_shapes=((rows,), (rows,)),
                  output_dtypes=(mx.uint32, x.dtype))


if __name__ == "__main__":
    mx.set_default_device(mx.gpu)
    sets = []
    for s in range(8):
        mx.random.seed(100 + s)
        logits = (4.0 * mx.random.normal((64, 151936))).astype(mx.bfloat16)
        mx.eval(logits)
        sets.append(logits)
    tie = mx.full((5, 151936), -0.05, mx.bfloat16)
    tie[:, 151935] = 2.0**-7
    tie[0, 2] = 0.0
    tie[1, 700] = 0.0
    tie[2] = mx.full((151936,), -mx.inf, mx.bfloat16)
    tie[3, 5] = mx.nan
    tie[4, 3 + 4 * 1024 * 3] = 0.0
    tie[4, 4 * 1024 * 5] = 2.0**-7
    tie[4, 4 * 1024 * 2] = 0.0
    calls = {}
    for unroll in (4, 8):
        fused = mx.compile(lambda x, u=unroll: fused_launch(x, u).run("cuda")[0])
        for x in sets:
            assert mx.array_equal(fused(x), am.normalized_argmax_native(x)).item(), unroll
            ids, lse = fused_launch(x, unroll).run("cuda")
            assert mx.array_equal(lse, mx.logsumexp(x, axis=-1)).item(), unroll
        print(f"fused_light{unroll} planted:", fused(tie).tolist(), "graph arm:",
              am.normalized_argmax(tie, arm="graph").tolist(), flush=True)
        calls[f"fused_light{unroll}"] = in_turn(sets, fused)
    two = mx.compile(lambda x: am.row_launch(x, mx.logsumexp(x, axis=-1, keepdims=True)).run("cuda")[0])
    calls["two_launch"] = in_turn(sets, two)
    calls["public"] = in_turn(sets, lambda x: am.normalized_argmax(x, arm="cuda"))
    calls["control"] = in_turn(sets, am.normalized_argmax_native)
    results = interleaved(calls, blocks=8, rounds=30)
    print(table(results))
    print(ratios(results, "control"))
