"""Session 8, call G8: call G2's split sweep with ONE call per round, so no other call's threadgroups fill the GPU
(as in a decode step, whose layers' attention calls run one after another): eval1 (one call, one mx.eval) and
pipelined1 (one call submitted per round, the previous awaited: the calls run back to back on the GPU with the host
overlapped). The claim under test (multi-query docstring, session 8): fewer splits than the default, which won
6-14% at D256 and 64/8 with 8 calls per round, lose when a call must fill the GPU alone."""
import math
import statistics
import sys
import time

import mlx.core as mx

import impl.multi_query as mq

SHAPES = ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768), (64, 8, 8, 128, 32768), (32, 8, 8, 128, 131072),
          (8, 1, 8, 128, 32768))
COUNTS = (8, 16, 32, 64, 128)


def eval1(f, rounds):
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        mx.eval(f())
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def pipelined1(f, rounds):
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        out = f()
        mx.async_eval(out)
        if previous is not None:
            mx.eval(previous)
        previous = out
    mx.eval(previous)
    return (time.perf_counter() - start) / rounds * 1e6


def main(blocks=6, rounds=40):
    print(mx.default_device(), mx.__version__)
    for h, kvh, L, d, n in SHAPES:
        q = mx.random.normal((1, h, L, d)).astype(mx.bfloat16)
        k = mx.random.normal((1, kvh, n, d)).astype(mx.bfloat16)
        v = mx.random.normal((1, kvh, n, d)).astype(mx.bfloat16)
        mx.eval(q, k, v)
        scale = 1 / math.sqrt(d)
        calls = {c: (lambda c=c: mq.multi_query_causal(q, k, v, scale=scale, splits=c, arm="cuda")) for c in COUNTS}
        for f in calls.values():
            for _ in range(5):
                mx.eval(f())
        e = {c: [] for c in COUNTS}
        p = {c: [] for c in COUNTS}
        for _ in range(blocks):
            for c, f in calls.items():
                e[c].append(eval1(f, rounds))
                p[c].append(pipelined1(f, rounds))
        default = mq.default_splits(n, kvh)
        print(f"\n## {h}/{kvh}/L{L}/D{d}/N{n} (default {default}), one call per round")
        print(f"{'splits':>6s} {'TGs':>5s} {'eval1':>8s} {'pipelined1':>10s}  (us per call; median of {blocks} blocks)")
        for c in COUNTS:
            print(f"{c:6d} {c * kvh:5d} {statistics.median(e[c]):8.1f} {statistics.median(p[c]):10.1f}"
                  f"{'  <- default' if c == default else ''}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
