"""Session 10, call R6: multi-query's partial with the q / scale prologue in the tiles' branch (the stagers' first
copies go out at once) against the body before (eb04e51's PARTIAL_RING source, saved in partial_ring_before.txt),
interleaved block by block in one process, as ring_sweep.py measures: first bit-identity, then the whole call and the
partial alone at 32/8/L8/D128, 16/8/L8/D256 and 64/8/L8/D128 (N32k), eval8 / pipelined8 / eval1 / pipelined1."""
import dataclasses
import math
import sys
from pathlib import Path

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.shapes import DecodeShape
from ring_sweep import COPIES, in_turn, sweep

BEFORE = dataclasses.replace(mq.PARTIAL_RING, name="multi_query_partial_ring_before",
                             source=(Path(__file__).parent / "partial_ring_before.txt").read_text())


def compiled(scale, splits, spec, whole=True):
    def call(q, k, v):
        nq, d = q.shape[1] // k.shape[1] * q.shape[2], q.shape[3]
        launch = mq.partial_launch(q, k, v, mx.array([scale], dtype=q.dtype), splits, 2, mq.RING_SLOTS)
        opart, mpart, lpart = dataclasses.replace(launch, spec=spec).run("cuda")
        if not whole:
            return opart
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


def main(blocks=5, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    for shape in (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768),
                  DecodeShape(64, 8, 8, 128, 32768)):
        group = multi_query_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        splits = mq.default_splits(shape.length, shape.hkv)
        x = sets[0]
        q = mx.contiguous(x["q"])
        a = compiled(scale, splits, BEFORE)(q, x["k"], x["v"])
        b = compiled(scale, splits, mq.PARTIAL_RING)(q, x["k"], x["v"])
        print(f"{shape}: bit-identical to the body before: {mx.array_equal(a, b).item()}", flush=True)
        calls = {}
        for name, spec in (("before", BEFORE), ("after", mq.PARTIAL_RING)):
            calls[f"call, {name}"] = in_turn(sets, compiled(scale, splits, spec))
            calls[f"partial only, {name}"] = in_turn(sets, compiled(scale, splits, spec, whole=False))
        calls["sdpa_rows (control)"] = next(c for c in group.cases if c.kernel == "sdpa_rows").build()
        sweep(f"multi-query {shape} (splits {splits}, ring {mq.RING_SLOTS})", calls, blocks, rounds)
        group.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
