"""Session 8, call G2: multi-query's key splits per KV head, swept through the public function (this tree's one-pass
merge), all counts interleaved block by block in one process, eval8 and pipelined, us per call (median of blocks).
The default (``default_splits``) aims at TARGET_THREADGROUPS = 512 threadgroups: 64 splits at 8 KV heads; call G1
had 32 faster than 64 in both protocols at 32/8/L8 D128 and D256, N 32k and 128k."""
import math
import statistics
import sys
import time

import mlx.core as mx

import impl.multi_query as mq

SHAPES = ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768), (32, 8, 4, 128, 32768), (32, 8, 8, 128, 131072),
          (32, 8, 8, 128, 4096), (8, 1, 8, 128, 32768), (64, 8, 8, 128, 32768))
COUNTS = (8, 16, 24, 32, 48, 64, 128)


def eval8(f, rounds):
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        mx.eval([f() for _ in range(8)])
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) / 8 * 1e6


def pipelined(f, rounds):
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        outs = [f() for _ in range(8)]
        mx.async_eval(outs)
        if previous is not None:
            mx.eval(previous)
        previous = outs
    mx.eval(previous)
    return (time.perf_counter() - start) / rounds / 8 * 1e6


def main(blocks=6, rounds=10):
    print(mx.default_device(), mx.__version__)
    for h, kvh, L, d, n in SHAPES:
        q = mx.random.normal((1, h, L, d)).astype(mx.bfloat16)
        k = mx.random.normal((1, kvh, n, d)).astype(mx.bfloat16)
        v = mx.random.normal((1, kvh, n, d)).astype(mx.bfloat16)
        mx.eval(q, k, v)
        scale = 1 / math.sqrt(d)
        counts = [c for c in COUNTS if c <= min(mq.MAX_SPLITS, -(-n // 64))]
        calls = {c: (lambda c=c: mq.multi_query_causal(q, k, v, scale=scale, splits=c, arm="cuda")) for c in counts}
        for f in calls.values():
            for _ in range(3):
                mx.eval([f() for _ in range(8)])
        e = {c: [] for c in counts}
        p = {c: [] for c in counts}
        for _ in range(blocks):
            for c, f in calls.items():
                e[c].append(eval8(f, rounds))
                p[c].append(pipelined(f, rounds))
        default = mq.default_splits(n, kvh)
        print(f"\n## {h}/{kvh}/L{L}/D{d}/N{n} (default {default})")
        print(f"{'splits':>6s} {'TGs':>5s} {'eval8':>8s} {'pipelined':>9s}  (us per call; median of {blocks} blocks)")
        for c in counts:
            print(f"{c:6d} {c * kvh:5d} {statistics.median(e[c]):8.1f} {statistics.median(p[c]):9.1f}"
                  f"{'  <- default' if c == default else ''}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
