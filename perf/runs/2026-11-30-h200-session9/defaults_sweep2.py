"""Session 9, call H5: call H4's sweep again with every call of a round on its own input set.

H4 (defaults_sweep.py) ran a round's 8 calls on one input set, as perf did until this session: its paged D256
partition of 4096 tokens looked 1.4x faster in eval8 / pipelined8 while it was no faster alone (eval1,
pipelined1), the signature of concurrent calls sharing K/V in the L2. Here perf.cases builds 8 input sets per
group (seeds 0-7, ``copies=8``) and every setting takes them in turn (as ``perf.run --inputs distinct`` now does);
multi-query's split count is swept too. us per call, the median over blocks of each block's median.
"""
import itertools
import math
import sys

import mlx.core as mx

from defaults_sweep import sweep
from impl.kvq4_decode import kvq4_decode
from impl.multi_query import default_splits, multi_query_causal
from impl.paged_attention import paged_attention, partition_span
from perf.cases import kvq4_group, multi_query_group, paged_group
from perf.shapes import DecodeShape

COPIES = 8


def in_turn(sets, call_of):
    turn = itertools.cycle([call_of(x) for x in sets])
    return lambda: next(turn)()


def main(blocks=4, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    print(f"us per call, median of {blocks} interleaved blocks of {rounds} rounds; {COPIES} input sets taken in turn")
    for shape in (DecodeShape(8, 1, 1, 256, 32768), DecodeShape(32, 8, 1, 256, 32768),
                  DecodeShape(16, 8, 1, 256, 131072)):
        group = kvq4_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(256)
        calls = {}
        sizes = (("seed", (512, 256, 128)), ("direct", (None, 512, 1024, 2048))) if shape.hkv == 1 else \
            (("direct", (None, 512, 1024, 2048, 4096)),)
        for body, blocks_ in sizes:
            for block in blocks_:
                calls[f"{body} block {block or 'auto'}"] = in_turn(
                    sets, lambda x, body=body, block=block: lambda: kvq4_decode(
                        x["q"], x["keys"], x["values"], scale=scale, block=block, body=body, arm="cuda"))
        calls["control"] = next(c for c in group.cases if c.kernel == "dequantize_sdpa").build()
        default = "seed block 512" if shape.hkv == 1 else "direct block auto"
        sweep(f"kvq4 {shape}", calls, default, blocks, rounds)
        group.release()
    for shape in (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072),
                  DecodeShape(32, 8, 1, 128, 131072), DecodeShape(8, 1, 1, 128, 32768)):
        group = paged_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        auto = partition_span(sets[0]["q"], sets[0]["storage"], shape.length, None)
        calls = {}
        for partition in sorted({auto // 2, auto, auto * 2, auto * 4}):
            calls[f"partition {partition}"] = in_turn(sets, lambda x, p=partition: lambda: paged_attention(
                x["q"], x["storage"], x["table"], shape.length, scale=scale, partition=p, arm="cuda"))
        calls["sdpa (control)"] = next(c for c in group.cases if c.kernel == "sdpa").build()
        sweep(f"paged bf16 {shape}", calls, f"partition {auto}", blocks, rounds)
        group.release()
    for shape in (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768)):
        group = multi_query_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        calls = {}
        for splits in (16, 32, 64):
            calls[f"splits {splits}"] = in_turn(sets, lambda x, s=splits: lambda: multi_query_causal(
                x["q"], x["k"], x["v"], scale=scale, splits=s, arm="cuda"))
        calls["sdpa_rows (control)"] = next(c for c in group.cases if c.kernel == "sdpa_rows").build()
        sweep(f"multi-query {shape}", calls, f"splits {default_splits(shape.length, shape.hkv)}", blocks, rounds)
        group.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
