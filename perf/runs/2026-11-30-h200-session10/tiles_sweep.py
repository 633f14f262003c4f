"""Session 10, call R2: multi-query at 32/8/L8/D128/N32k with one 8-row tile per computing SIMD group.

Call R1 found the ring (cp.async, RING - 1 blocks ahead) no faster than the two-stage partial at D128 with two tiles
per SIMD group (NQ 32: 2 computing SIMD groups + 2 stagers), while it gained 8-12% at D256 (one tile per SIMD
group): at D128 the stagers' loads no longer set the pace, the two computing SIMD groups do. One tile per SIMD group
gives 4 computing SIMD groups (+ 2 stagers: 192 threads, 144 registers, 2 threadgroups per SM: 8 computing warps per
SM against 6). Session 5 measured that tiling with one stage only (every SIMD group staging). Same protocols and
output as ring_sweep.py; each setting bit-identical to the committed call first (the tiling does not change a sum
order within a row: each row's products are its own).
"""
import math
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.shapes import DecodeShape
from ring_sweep import COPIES, in_turn, sweep


def compiled(scale, splits, ring, tiles, whole=True):
    def call(q, k, v):
        kept = mq.TILES_PER_SIMDGROUP
        mq.TILES_PER_SIMDGROUP = tiles  # read by partial_launch while the call is traced
        try:
            nq, d = q.shape[1] // k.shape[1] * q.shape[2], q.shape[3]
            opart, mpart, lpart = mq.partial_launch(q, k, v, mx.array([scale], dtype=q.dtype), splits,
                                                    mq.pipeline_stages(nq, d, "cuda"), ring).run("cuda")
        finally:
            mq.TILES_PER_SIMDGROUP = kept
        if not whole:
            return opart
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


def main(blocks=5, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    shape = DecodeShape(32, 8, 8, 128, 32768)
    group = multi_query_group(shape, ["cuda"], copies=COPIES)
    sets = group.inputs()
    scale = 1 / math.sqrt(shape.head_dim)
    x = sets[0]
    q = mx.contiguous(x["q"])
    committed = compiled(scale, 32, 0, 2)(q, x["k"], x["v"])
    settings = [(32, 0, 2), (32, 2, 2), (32, 0, 1), (32, 2, 1), (32, 3, 1), (64, 2, 1), (16, 2, 1)]
    for splits, ring, tiles in settings[1:]:
        out = compiled(scale, splits, ring, tiles)(q, x["k"], x["v"])
        err = mx.abs(out.astype(mx.float32) - committed.astype(mx.float32)).max().item()
        print(f"splits {splits} ring {ring} tiles {tiles}: max |difference| from the committed call {err:.3g}",
              flush=True)
    calls = {f"splits {s} ring {r} tiles {t}": in_turn(sets, compiled(scale, s, r, t)) for s, r, t in settings}
    for r, t in ((0, 2), (2, 1)):
        calls[f"partial only, ring {r} tiles {t}"] = in_turn(sets, compiled(scale, 32, r, t, whole=False))
    calls["sdpa_rows (control)"] = next(c for c in group.cases if c.kernel == "sdpa_rows").build()
    sweep(f"multi-query {shape}", calls, blocks, rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
