"""Session 11, call S3: would a tensor-core body help kvq4 at one KV head? multi-query's partial (8-row query tiles on
the tensor cores, K / V staged as half by SIMD groups of their own) run on the bf16 cache that kvq4's 4-bit cache
was quantized from, at kvq4's shapes (L = 1), against kvq4's default body and its control (dequantize + SDPA), on
the same 8 input sets, interleaved. The stand-in reads 1.8x kvq4's bytes and converts bf16 instead of dequantizing
4-bit codes, so it bounds what such a body could do only roughly.
"""
import math

import mlx.core as mx

from impl.kvq4_decode import kvq4_decode
from impl.multi_query import multi_query_causal
from perf.cases import kvq4_group
from perf.interleaved import in_turn, interleaved, table
from perf.shapes import DecodeShape
from probe_s11 import control, ratios

COPIES = 8


def main():
    print(mx.default_device(), mx.__version__)
    for shape, split_counts in ((DecodeShape(8, 1, 1, 256, 32768), (64, 128)),
                                (DecodeShape(32, 8, 1, 256, 32768), (16, 32))):
        group = kvq4_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1.0 / math.sqrt(shape.head_dim)
        calls = {"kvq4_decode (default)": in_turn(sets, lambda x: kvq4_decode(x["q"], x["keys"], x["values"],
                                                                              scale=scale, arm="cuda"))}
        for s in split_counts:
            calls[f"multi_query bf16 splits {s}"] = in_turn(
                sets, lambda x, s=s: multi_query_causal(x["q"], x["k"], x["v"], scale=scale, splits=s, arm="cuda"))
        calls["dequantize_sdpa (control)"] = control(group, "dequantize_sdpa")
        calls["sdpa bf16"] = control(group, "sdpa")
        results = interleaved(calls, blocks=4, rounds=20)
        print(f"\n## {shape} ({len(sets)} input sets)")
        print(table(results))
        print(ratios(results, "dequantize_sdpa (control)", [n for n in calls if "control" not in n]))
        group.release()


if __name__ == "__main__":
    main()
