"""Session 9, call H3: do the 8 calls of a perf round share K/V in the GPU's L2?

perf's eval8 and pipelined8 rounds run one case's launch 8 times on the SAME inputs (perf.cases builds one input
set per group). The calls of a round run concurrently (MLX puts a round's kernels into one CUDA graph), so their
threadgroups can read the same K/V lines while they are in the H200's 50 MB L2. Call H1's stream bound read the
134 MB of K/V of 32/8/D128/N32k at 7.35 TB/s per call in pipelined8, above HBM3e's 4.8 TB/s: they do. A decode
step's calls (one per layer) read different caches. This probe times every issue-10 target case and its control
with the round's 8 calls on the same inputs ("shared", perf's protocol) and on 8 different input sets ("distinct":
8 groups built with seeds 0-7, the launches taken in turn), interleaved block by block. us per call, eval8 and
pipelined8, the median over blocks of each block's median.
"""
import itertools
import statistics
import sys

import mlx.core as mx

from perf.cases import argmax_group, kvq4_group, multi_query_group, paged_group
from perf.harness import Pipelined, batched, time_call
from perf.shapes import ArgmaxShape, DecodeShape

COPIES = 8
D128, D256 = DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)
# (label, group factory, kernel, arm, control kernel)
TARGETS = (
    ("paged bf16 32/8/D128/N32k", lambda seed: paged_group(D128, ["cuda"], seed=seed), "paged_attention", "sdpa"),
    ("paged bf16 16/8/D256/N128k", lambda seed: paged_group(D256, ["cuda"], seed=seed), "paged_attention", "sdpa"),
    ("paged KV4 32/8/D128/N32k", lambda seed: paged_group(D128, ["cuda"], bits=4, seed=seed), "paged_attention",
     "gather_dequantize_sdpa"),
    ("paged KV8 32/8/D128/N32k", lambda seed: paged_group(D128, ["cuda"], bits=8, seed=seed), "paged_attention",
     "gather_dequantize_sdpa"),
    ("kvq4 32/8/N32k", lambda seed: kvq4_group(DecodeShape(32, 8, 1, 256, 32768), ["cuda"], seed=seed),
     "kvq4_decode", "dequantize_sdpa"),
    ("kvq4 8/1/N32k", lambda seed: kvq4_group(DecodeShape(8, 1, 1, 256, 32768), ["cuda"], seed=seed),
     "kvq4_decode", "dequantize_sdpa"),
    ("multi-query 32/8/L8/D128/N32k", lambda seed: multi_query_group(DecodeShape(32, 8, 8, 128, 32768), ["cuda"],
                                                                     seed=seed), "multi_query_causal", "sdpa_rows"),
    ("argmax 64x151936", lambda seed: argmax_group(ArgmaxShape(64, 151936), ["cuda"], seed=seed),
     "normalized_argmax", "logsumexp_sub_argmax"),
)


def launch_of(group, kernel):
    (case,) = [c for c in group.cases if c.kernel == kernel]
    return case.build()


def in_turn(launches):
    turn = itertools.cycle(launches)
    return lambda: next(turn)()


def per_call_us(launch, protocol, rounds):
    if protocol == "eval8":
        return statistics.median(time_call(batched(launch, "mlx", 8), rounds=rounds, warmup=2)) / 8 * 1e6
    round_ = Pipelined(launch, 8)
    samples = time_call(round_, rounds=rounds, warmup=2)
    round_.finish()
    return statistics.median(samples) / 8 * 1e6


def main(blocks=4, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    print(f"us per call; median of {blocks} interleaved blocks of {rounds} rounds; ratio = control / kernel")
    print(f"{'case':32s} {'proto':10s} {'kernel shared':>13s} {'distinct':>9s} {'control shared':>14s} "
          f"{'distinct':>9s} {'ratio shared':>12s} {'distinct':>9s}")
    for label, factory, kernel, control in TARGETS:
        groups = [factory(seed) for seed in range(COPIES)]
        calls = {}
        for name in (kernel, control):
            launches = [launch_of(g, name) for g in groups]
            calls[name, "shared"] = launches[0]
            calls[name, "distinct"] = in_turn(launches)
        for f in calls.values():
            for _ in range(COPIES + 2):
                mx.eval(f())
        times = {(key, p): [] for key in calls for p in ("eval8", "pipelined8")}
        for _ in range(blocks):
            for key, f in calls.items():
                for p in ("eval8", "pipelined8"):
                    times[key, p].append(per_call_us(f, p, rounds))
        for p in ("eval8", "pipelined8"):
            t = {key: statistics.median(times[key, p]) for key in calls}
            ks, kd, cs, cd = t[kernel, "shared"], t[kernel, "distinct"], t[control, "shared"], t[control, "distinct"]
            print(f"{label:32s} {p:10s} {ks:13.1f} {kd:9.1f} {cs:14.1f} {cd:9.1f} {cs / ks:12.2f} {cd / kd:9.2f}",
                  flush=True)
        for g in groups:
            g.release()
    stream_bounds(blocks, rounds)
    return 0


def stream_bounds(blocks, rounds):
    """Call H1's stream bounds (sol_probe.py) on the same 134 MB of K/V 8 times, or on 8 different copies."""
    from sol_probe import bound_calls

    groups = [multi_query_group(DecodeShape(32, 8, 8, 128, 32768), ["cuda"], seed=seed) for seed in range(COPIES)]
    bounds = [bound_calls(g.inputs()["q"], mx.contiguous(g.inputs()["k"]), mx.contiguous(g.inputs()["v"]))
              for g in groups]
    kv_bytes = 2 * 8 * 32768 * 128 * 2
    print(f"\nstream bounds (sol_probe.py), us per call and TB/s of the {kv_bytes / 1e6:.0f} MB of K/V")
    for name in ("stream1w", "stream1", "stream2"):
        calls = {"shared": bounds[0][name], "distinct": in_turn([b[name] for b in bounds])}
        for f in calls.values():
            for _ in range(COPIES + 2):
                mx.eval(f())
        times = {(key, p): [] for key in calls for p in ("eval8", "pipelined8")}
        for _ in range(blocks):
            for key, f in calls.items():
                for p in ("eval8", "pipelined8"):
                    times[key, p].append(per_call_us(f, p, rounds))
        for p in ("eval8", "pipelined8"):
            ts, td = (statistics.median(times[key, p]) for key in calls)
            print(f"  {name:9s} {p:10s} shared {ts:7.1f} us ({kv_bytes / ts / 1e6:5.2f} TB/s)  "
                  f"distinct {td:7.1f} us ({kv_bytes / td / 1e6:5.2f} TB/s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
