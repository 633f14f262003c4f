"""Session 9, call H6: the quantized paged pools' partitions (KV4, KV8), every call of a round on its own input set.

Call H5 had plain (bf16) pools faster or equal at every shape and protocol with half the threadgroups of
``paged_attention.TARGET_THREADGROUPS`` = 1024 (twice the partition); KV4 / KV8 share that rule. Same method as H5.
"""
import math
import sys

import mlx.core as mx

from defaults_sweep import sweep
from defaults_sweep2 import COPIES, in_turn
from impl.paged_attention import paged_attention, partition_span
from perf.cases import paged_group
from perf.shapes import DecodeShape


def main(blocks=4, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    print(f"us per call, median of {blocks} interleaved blocks of {rounds} rounds; {COPIES} input sets taken in turn")
    for bits in (4, 8):
        for shape in (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)):
            group = paged_group(shape, ["cuda"], bits=bits, copies=COPIES)
            sets = group.inputs()
            scale = 1 / math.sqrt(shape.head_dim)
            auto = partition_span(sets[0]["q"], sets[0]["storage"], shape.length, None)
            calls = {}
            for partition in (auto // 2, auto, auto * 2):
                calls[f"partition {partition}"] = in_turn(sets, lambda x, p=partition: lambda: paged_attention(
                    x["q"], x["storage"], x["table"], shape.length, scale=scale, partition=p, arm="cuda"))
            calls["control"] = next(c for c in group.cases if c.kernel == "gather_dequantize_sdpa").build()
            sweep(f"paged KV{bits} {shape}", calls, f"partition {auto}", blocks, rounds)
            group.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
