"""Session 11, call S4: the ring partial's conversion in whole words (chunk_to_half) against the body before it
(partial_ring_before.txt: the session-10 ring body, which converted through half4 element by element), interleaved
(perf.interleaved; us per call), at the three multi-query shapes of session 10's R1 / R6. First, per shape and per
dtype at a small N, whether the new body's output is bit-identical to the old one's (it must be: the same roundings).
"""
import dataclasses
import math
from pathlib import Path

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.interleaved import in_turn, interleaved, table
from perf.shapes import DecodeShape
from probe_s11 import control, ratios

COPIES = 8
BEFORE = dataclasses.replace(mq.PARTIAL_RING, name="multi_query_partial_ring_before",
                             source=(Path(__file__).parent / "partial_ring_before.txt").read_text())


def compiled(scale, splits, spec, whole=True):
    def call(q, k, v):
        launch = mq.partial_launch(q, k, v, mx.array([scale], dtype=q.dtype), splits, 2, mq.RING_SLOTS)
        opart, mpart, lpart = dataclasses.replace(launch, spec=spec).run("cuda")
        if not whole:
            return opart
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


def identical(shape, dtype):
    mx.random.seed(3)
    q = mx.random.normal((1, shape.hq, shape.rows, shape.head_dim)).astype(dtype)
    k, v = (mx.random.normal((1, shape.hkv, 3000, shape.head_dim)).astype(dtype) for _ in range(2))
    scale = 1 / math.sqrt(shape.head_dim)
    a = compiled(scale, 7, BEFORE)(q, k, v)
    b = compiled(scale, 7, mq.PARTIAL_RING)(q, k, v)
    return mx.array_equal(a, b).item()


def main(blocks=5, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    shapes = (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768), DecodeShape(64, 8, 8, 128, 32768))
    for shape in shapes:
        for dtype in (mx.bfloat16, mx.float16, mx.float32):
            print(f"{shape} {dtype} N3000 splits 7: bit-identical to the body before: {identical(shape, dtype)}",
                  flush=True)
    for shape in shapes:
        group = multi_query_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        splits = mq.default_splits(shape.length, shape.hkv)
        x = sets[0]
        a = compiled(scale, splits, BEFORE)(mx.contiguous(x["q"]), x["k"], x["v"])
        b = compiled(scale, splits, mq.PARTIAL_RING)(mx.contiguous(x["q"]), x["k"], x["v"])
        print(f"\n## multi-query {shape} (splits {splits}, ring {mq.RING_SLOTS}); bit-identical: "
              f"{mx.array_equal(a, b).item()}", flush=True)
        calls = {}
        for name, spec in (("before", BEFORE), ("after", mq.PARTIAL_RING)):
            calls[f"call, {name}"] = in_turn(sets, lambda x, f=compiled(scale, splits, spec): f(mx.contiguous(x["q"]),
                                                                                                x["k"], x["v"]))
            calls[f"partial only, {name}"] = in_turn(
                sets, lambda x, f=compiled(scale, splits, spec, whole=False): f(mx.contiguous(x["q"]), x["k"], x["v"]))
        calls["sdpa_rows (control)"] = control(group, "sdpa_rows")
        results = interleaved(calls, blocks=blocks, rounds=rounds)
        print(table(results))
        print(ratios(results, "sdpa_rows (control)", ["call, before", "call, after"]))
        group.release()


if __name__ == "__main__":
    main()
