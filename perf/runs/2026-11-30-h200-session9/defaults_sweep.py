"""Session 9, call H4: kvq4's block and paged attention's partition, swept with one call per round as well as 8.

Call H1 found kvq4 at 8/1/D256/N32k taking 108 us alone (pipelined1: one call per round, host overlapped), against
71 us for its control: the seed body (the default with one KV head) runs 64 threadgroups of 512 tokens, each SIMD
group walking its 128 tokens one after another. Session 8 found that defaults tuned with 8 calls per round can lose
alone (multi-query's splits). So: every block / partition below through the public functions, interleaved block by
block in one process, in eval8, pipelined8 (perf's protocols: 8 calls per round) and pipelined1 / eval1 (one call
per round). us per call, the median over blocks of each block's median.
"""
import math
import statistics
import sys

import mlx.core as mx

from impl.kvq4_decode import kvq4_decode
from impl.paged_attention import paged_attention, partition_span
from perf.cases import kvq4_group, paged_group
from perf.harness import Pipelined, batched, time_call
from perf.shapes import DecodeShape

PROTOCOLS = ("eval8", "pipelined8", "eval1", "pipelined1")


def per_call_us(launch, protocol, rounds):
    batch = 8 if protocol.endswith("8") else 1
    if protocol.startswith("eval"):
        return statistics.median(time_call(batched(launch, "mlx", batch), rounds=rounds, warmup=2)) / batch * 1e6
    round_ = Pipelined(launch, batch)
    samples = time_call(round_, rounds=rounds, warmup=2)
    round_.finish()
    return statistics.median(samples) / batch * 1e6


def sweep(title, calls, default, blocks, rounds):
    for f in calls.values():
        for _ in range(3):
            mx.eval(f())
    times = {(key, p): [] for key in calls for p in PROTOCOLS}
    for _ in range(blocks):
        for key, f in calls.items():
            for p in PROTOCOLS:
                times[key, p].append(per_call_us(f, p, rounds))
    print(f"\n## {title}")
    print(f"{'setting':22s} " + " ".join(f"{p:>10s}" for p in PROTOCOLS))
    for key in calls:
        print(f"{key:22s} " + " ".join(f"{statistics.median(times[key, p]):10.1f}" for p in PROTOCOLS)
              + ("  <- default" if key == default else ""), flush=True)


def main(blocks=4, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    print(f"us per call, median of {blocks} interleaved blocks of {rounds} rounds")
    for shape in (DecodeShape(8, 1, 1, 256, 32768), DecodeShape(32, 8, 1, 256, 32768),
                  DecodeShape(16, 8, 1, 256, 131072)):
        group = kvq4_group(shape, ["cuda"])
        x = group.inputs()
        scale = 1 / math.sqrt(256)
        calls = {}
        for body, sizes in (("seed", (512, 256, 128, 64)), ("direct", (None, 128, 256, 512, 1024))):
            for block in sizes:
                calls[f"{body} block {block or 'auto'}"] = (
                    lambda body=body, block=block: kvq4_decode(x["q"], x["keys"], x["values"], scale=scale,
                                                               block=block, body=body, arm="cuda"))
        calls["control"] = next(c for c in group.cases if c.kernel == "dequantize_sdpa").build()
        default = "seed block 512" if shape.hkv == 1 else "direct block auto"
        sweep(f"kvq4 {shape}", calls, default, blocks, rounds)
        group.release()
    for shape in (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)):
        group = paged_group(shape, ["cuda"])
        x = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        auto = partition_span(x["q"], x["storage"], shape.length, None)
        calls = {}
        for partition in sorted({auto // 4, auto // 2, auto, auto * 2, auto * 4} - {0}):
            calls[f"partition {partition}"] = (
                lambda p=partition: paged_attention(x["q"], x["storage"], x["table"], shape.length, scale=scale,
                                                    partition=p, arm="cuda"))
        calls["sdpa (control)"] = next(c for c in group.cases if c.kernel == "sdpa").build()
        sweep(f"paged bf16 {shape}", calls, f"partition {auto}", blocks, rounds)
        group.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
