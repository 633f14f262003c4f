"""Session 10, call R1: multi-query's ring partial (cp.async into RING raw slots) against the two-stage partial.

Session 9 found multi-query's partial short of the K/V stream's floor (pipelined8 53.7 against 34.5 us at
32/8/L8/D128/N32k) and its rate matching one 16 KB block in flight per threadgroup. The ring keeps RING - 1 blocks
ahead in flight without registers. Here, per shape: first the ring's output against the two-stage partial's on the
perf inputs (must be bit-identical: the same half buffers), then the whole call (partial + merge, one mx.compile'd
function as impl.multi_query builds it) and the partial alone, at ring 0 (two stages) / 2 / 3 / 4 and at the
default split count and half / twice it, interleaved block by block in one process, in eval8, pipelined8 (perf's
protocols, 8 input sets taken in turn) and eval1 / pipelined1 (one call per round). us per call, the median over
blocks of each block's median.
"""
import itertools
import math
import statistics
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.harness import Pipelined, batched, time_call
from perf.shapes import DecodeShape

PROTOCOLS = ("eval8", "pipelined8", "eval1", "pipelined1")
COPIES = 8


def per_call_us(launch, protocol, rounds):
    batch = 8 if protocol.endswith("8") else 1
    if protocol.startswith("eval"):
        return statistics.median(time_call(batched(launch, "mlx", batch), rounds=rounds, warmup=2)) / batch * 1e6
    round_ = Pipelined(launch, batch)
    samples = time_call(round_, rounds=rounds, warmup=2)
    round_.finish()
    return statistics.median(samples) / batch * 1e6


def compiled(scale, splits, ring, whole=True):
    def call(q, k, v):
        nq, d = q.shape[1] // k.shape[1] * q.shape[2], q.shape[3]
        scale_t = mx.array([scale], dtype=q.dtype)
        opart, mpart, lpart = mq.partial_launch(q, k, v, scale_t, splits, mq.pipeline_stages(nq, d, "cuda"),
                                                ring).run("cuda")
        if not whole:
            return opart
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


def in_turn(sets, fn):
    turn = itertools.cycle(sets)

    def launch():
        x = next(turn)
        return fn(x["q"], x["k"], x["v"])
    return launch


def sweep(title, calls, blocks, rounds):
    for f in calls.values():
        for _ in range(3):
            mx.eval(f())
    times = {(key, p): [] for key in calls for p in PROTOCOLS}
    for _ in range(blocks):
        for key, f in calls.items():
            for p in PROTOCOLS:
                times[key, p].append(per_call_us(f, p, rounds))
    print(f"\n## {title}")
    print(f"{'setting':28s} " + " ".join(f"{p:>10s}" for p in PROTOCOLS))
    for key in calls:
        print(f"{key:28s} " + " ".join(f"{statistics.median(times[key, p]):10.1f}" for p in PROTOCOLS), flush=True)


def main(blocks=4, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    print(f"us per call, median of {blocks} interleaved blocks of {rounds} rounds; {COPIES} input sets in turn")
    for shape in (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768),
                  DecodeShape(64, 8, 8, 128, 32768)):
        group = multi_query_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        default = mq.default_splits(shape.length, shape.hkv)
        x = sets[0]
        q = mx.contiguous(x["q"])
        two = compiled(scale, default, 0)(q, x["k"], x["v"])
        for ring in (2, 3, 4):
            out = compiled(scale, default, ring)(q, x["k"], x["v"])
            same = mx.array_equal(out, two, equal_nan=True).item()
            print(f"{shape} ring {ring} bit-identical to two stages: {same}", flush=True)
        calls = {}
        for splits in (default // 2, default, default * 2):
            for ring in (0, 2, 3, 4):
                calls[f"splits {splits} ring {ring}"] = in_turn(sets, compiled(scale, splits, ring))
        for ring in (0, 2, 3, 4):
            calls[f"partial only, ring {ring}"] = in_turn(sets, compiled(scale, default, ring, whole=False))
        calls["sdpa_rows (control)"] = next(c for c in group.cases if c.kernel == "sdpa_rows").build()
        sweep(f"multi-query {shape} (default splits {default})", calls, blocks, rounds)
        group.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
