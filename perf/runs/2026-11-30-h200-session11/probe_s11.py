"""Session 11, call S1: three cheap questions about issue 10's unmet targets, each interleaved in one process
(perf.interleaved: eval8 / pipelined8 / eval1 / pipelined1, 8 input sets taken in turn; us per call, the median over
blocks of each block's median).

* multi-query: does a grid that fills the H200's resident threadgroup slots run faster? At 32/8/L8/D128 the ring
  partial holds 3 threadgroups per SM (168 registers x 128 threads, 67.5 KiB of shared memory), 396 slots on 132
  SMs, and the default 32 splits launch 256 threadgroups (two per SM, one computing SIMD group per scheduler).
  Splits 32 / 40 / 48 / 56 / 64, with eight single-row SDPA calls (the target's control) beside.
* kvq4 8/1/N32k (one KV head): its direct body's 512-token partitions give 128 threadgroups (64 partitions x 2 row
  chunks), under one per SM. Partitions 128 / 256 / 512 and SIMD groups per threadgroup 4 / 8, against dequantize +
  SDPA (the target's control); the partial alone at the default.
* normalized argmax 64 x 151936 against its native control, interleaved, for a ratio free of pool-to-pool drift.
"""
import dataclasses
import os
import math
import sys

import mlx.core as mx
import numpy as np

import impl.kvq4_decode as kvq4
import impl.paged_attention as pa
from impl.kvq4_decode import QuantizedKV, kvq4_decode
from impl.multi_query import multi_query_causal
from perf.cases import argmax_group, kvq4_group, multi_query_group
from perf.interleaved import in_turn, interleaved, table
from perf.shapes import ArgmaxShape, DecodeShape

COPIES = 8
ARM = os.environ.get("PROBE_ARM", "cuda")  # "graph": a smoke run of the plumbing on a CPU, small shapes
SMALL = ARM != "cuda"


def control(group, kernel):
    (case,) = [c for c in group.cases if c.kernel == kernel]
    return case.build()


def ratios(results, numerator, names):
    import statistics
    out = []
    for name in names:
        cells = [f"{statistics.median(results[numerator][p]) / statistics.median(results[name][p]):6.2f}x"
                 for p in results[name]]
        out.append(f"  {numerator} / {name}: " + " ".join(cells))
    return "\n".join(out)


def multi_query(shape, split_counts, blocks, rounds):
    group = multi_query_group(shape, [ARM], copies=COPIES)
    sets = group.inputs()
    scale = 1.0 / math.sqrt(shape.head_dim)
    calls = {f"splits {s}": in_turn(sets, lambda x, s=s: multi_query_causal(x["q"], x["k"], x["v"], scale=scale,
                                                                            splits=s, arm=ARM))
             for s in split_counts}
    calls["sdpa_rows (control)"] = control(group, "sdpa_rows")
    results = interleaved(calls, blocks=blocks, rounds=rounds)
    print(f"\n## multi-query {shape}  ({len(sets)} input sets)")
    print(table(results))
    print(ratios(results, "sdpa_rows (control)", [n for n in calls if n.startswith("splits")]))
    group.release()


def kvq4_variant(scale_in, block, sg, whole=True):
    if SMALL:  # the graph arm has no SIMD groups: the smoke run checks the plumbing only
        return lambda q, *planes: kvq4_decode(q, QuantizedKV(*planes[:3]), QuantizedKV(*planes[3:]), scale=scale_in,
                                              block=block, arm=ARM)

    def call(q, kp, ks, kb, vp, vs, vb):
        cache = kvq4._cache(QuantizedKV(kp, ks, kb), QuantizedKV(vp, vs, vb))
        launch = pa.strided_partial_launch(mx.contiguous(q), cache, kp.shape[2], scale_in, block)
        if sg != pa.SIMDGROUPS:
            threads = 32 * sg
            parts = launch.grid[0] // launch.threadgroup[0]
            template = tuple((k, sg if k == "SG" else v) for k, v in launch.template)
            launch = dataclasses.replace(launch, template=template, threadgroup=(threads, 1, 1),
                                         grid=(threads * parts, launch.grid[1], 1))
        parts, normal = launch.run("cuda")
        if not whole:
            return parts
        return pa.merge_launch(parts, normal, launch.inputs[4], q.dtype).run("cuda")[0]
    return mx.compile(call)


def kvq4_sweep(shape, settings, blocks, rounds):
    group = kvq4_group(shape, [ARM], copies=COPIES)
    sets = group.inputs()
    scale = 1.0 / math.sqrt(shape.head_dim)
    scale_in = kvq4._in_dtype(scale, mx.bfloat16)
    args = lambda x: (x["q"], *x["keys"][:3], *x["values"][:3])
    x0 = sets[0]
    want = kvq4_decode(x0["q"], x0["keys"], x0["values"], scale=scale, arm=ARM)
    calls = {"default (kvq4_decode)": in_turn(sets, lambda x: kvq4_decode(x["q"], x["keys"], x["values"],
                                                                          scale=scale, arm=ARM))}
    print(f"\n## kvq4 {shape}  ({len(sets)} input sets); default partition "
          f"{pa.partition_span(x0['q'], kvq4._cache(x0['keys'], x0['values']), shape.length, None)}")
    for block, sg, whole in settings:
        fn = kvq4_variant(scale_in, block, sg, whole)
        name = f"partition {block} sg {sg}" + ("" if whole else " partial only")
        if whole:
            got = fn(*args(x0))
            diff = mx.max(mx.abs(got.astype(mx.float32) - want.astype(mx.float32))).item()
            print(f"  {name}: max |out - default| = {diff:.3g}")
        calls[name] = in_turn(sets, lambda x, fn=fn: fn(*args(x)))
    calls["dequantize_sdpa (control)"] = control(group, "dequantize_sdpa")
    results = interleaved(calls, blocks=blocks, rounds=rounds)
    print(table(results))
    print(ratios(results, "dequantize_sdpa (control)", [n for n in calls if "control" not in n]))
    group.release()


def argmax(shape, blocks, rounds):
    group = argmax_group(shape, [ARM], copies=COPIES)
    calls = {"normalized_argmax": control(group, "normalized_argmax"),
             "native (control)": control(group, "logsumexp_sub_argmax")}
    results = interleaved(calls, blocks=blocks, rounds=rounds)
    print(f"\n## argmax {shape}")
    print(table(results))
    print(ratios(results, "native (control)", ["normalized_argmax"]))
    group.release()


def main():
    print(mx.default_device(), mx.__version__, mx.device_info())
    which = sys.argv[1:] or ["mq", "kvq4", "argmax"]
    if SMALL:
        multi_query(DecodeShape(4, 1, 8, 128, 512), (2, 3), blocks=1, rounds=2)
        kvq4_sweep(DecodeShape(8, 1, 1, 256, 512), [(128, 4, True), (256, 8, True)], blocks=1, rounds=2)
        argmax(ArgmaxShape(2, 1000), blocks=1, rounds=2)
        return
    if "mq" in which:
        multi_query(DecodeShape(32, 8, 8, 128, 32768), (32, 40, 48, 56, 64), blocks=4, rounds=20)
        multi_query(DecodeShape(32, 8, 4, 128, 32768), (32, 48), blocks=4, rounds=20)
        multi_query(DecodeShape(16, 8, 8, 256, 32768), (24, 32, 48), blocks=3, rounds=20)
        multi_query(DecodeShape(64, 8, 8, 128, 32768), (32, 48), blocks=3, rounds=20)
    if "kvq4" in which:
        kvq4_sweep(DecodeShape(8, 1, 1, 256, 32768),
                   [(128, 4, True), (256, 4, True), (512, 4, True), (256, 8, True), (512, 8, True),
                    (1024, 8, True), (512, 4, False), (256, 4, False)], blocks=4, rounds=20)
    if "argmax" in which:
        argmax(ArgmaxShape(64, 151936), blocks=6, rounds=30)


if __name__ == "__main__":
    main()
