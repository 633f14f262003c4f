"""Session 11, call S5: the tiles' dependency chains at 32/8/L8/D128, where they set the ring partial's pace
(session 10's ncu; S4's conversion change left that shape unchanged). Variants of the ring body, each a textual
edit of impl.multi_query's, interleaved against it (perf.interleaved; us per call):

* ``split_s``: S = Q . K^T accumulated in two halves (the 16-deep products of dims [32i, 32i + 16) into s, of
  [32i + 16, 32i + 32) into s2, added before the softmax): the chain of dependent tensor-core products per key
  fragment halves (8 -> 4 at D128). Not bit-identical: float32 sums in another order.
* ``full_blocks``: a block whose keys every row sees (inside the split, before every row's causal limit) skips the
  per-score key comparisons. Bit-identical.
* both.
"""
import dataclasses
import math
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.interleaved import in_turn, interleaved, table
from perf.shapes import DecodeShape
from probe_s11 import control, ratios

COPIES = 8
MASK_LINE = "              if (!rowOks[t] || key >= k1 || key > limit[t]) v = -INFINITY;\n"
SPLIT_S = [
    ("        metal::simdgroup_float8x8 s[TILES][BK / 8];\n",
     "        metal::simdgroup_float8x8 s[TILES][BK / 8], s2[TILES][BK / 8];\n"),
    ("for (uint t = 0; t < (uint)TILES; ++t) s[t][c] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);",
     "for (uint t = 0; t < (uint)TILES; ++t) s[t][c] = s2[t][c] = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);"),
    ("simdgroup_multiply_accumulate_rows16_k16(s[0][c], s[TILES - 1][c],",
     "simdgroup_multiply_accumulate_rows16_k16(i < 2u ? s[0][c] : s2[0][c], i < 2u ? s[TILES - 1][c] : s2[TILES - 1][c],"),
    ("simdgroup_multiply_accumulate_rows16(s[0][c], s[TILES - 1][c],",
     "simdgroup_multiply_accumulate_rows16(i < 2u ? s[0][c] : s2[0][c], i < 2u ? s[TILES - 1][c] : s2[TILES - 1][c],"),
    ("metal::simdgroup_multiply_accumulate(s[0][c], qf[0][f], kf[i], s[0][c]);",
     "metal::simdgroup_multiply_accumulate(i % 2u == 0u ? s[0][c] : s2[0][c], qf[0][f], kf[i], i % 2u == 0u ? s[0][c] : s2[0][c]);"),
    ("        // Causal / range mask and online softmax for this lane's row fm of each tile.\n",
     "        UNROLL_FULL\n"
     "        for (uint c = 0; c < (uint)BK / 8u; ++c)\n"
     "          UNROLL_FULL\n"
     "          for (uint t = 0; t < (uint)TILES; ++t) {\n"
     "            s[t][c].thread_elements()[0] += s2[t][c].thread_elements()[0];\n"
     "            s[t][c].thread_elements()[1] += s2[t][c].thread_elements()[1];\n"
     "          }\n"
     "        // Causal / range mask and online softmax for this lane's row fm of each tile.\n"),
]
FULL_BLOCKS = [
    ("        // Causal / range mask and online softmax for this lane's row fm of each tile.\n",
     "        // Causal / range mask and online softmax for this lane's row fm of each tile.\n"
     "        const bool full = kb + (uint)BK <= k1 && kb + (uint)BK + (uint)L <= n + 1u;\n"),
    (MASK_LINE, "              if (!rowOks[t] || (!full && (key >= k1 || key > limit[t]))) v = -INFINITY;\n"),
]
VARIANTS = {"split_s": SPLIT_S, "full_blocks": FULL_BLOCKS, "both": SPLIT_S + FULL_BLOCKS}


def variant_spec(name):
    source = mq.PARTIAL_RING.source
    for old, new in VARIANTS[name]:
        assert source.count(old) >= 1, (name, old)
        source = source.replace(old, new)
    return dataclasses.replace(mq.PARTIAL_RING, name=f"multi_query_partial_ring_{name}", source=source)


def compiled(scale, splits, spec, whole=True):
    def call(q, k, v):
        launch = mq.partial_launch(q, k, v, mx.array([scale], dtype=q.dtype), splits, 2, mq.RING_SLOTS)
        opart, mpart, lpart = dataclasses.replace(launch, spec=spec).run("cuda")
        if not whole:
            return opart
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


def main(blocks=5, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    specs = {"ring (committed)": mq.PARTIAL_RING, **{n: variant_spec(n) for n in VARIANTS}}
    for shape in (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768),
                  DecodeShape(64, 8, 8, 128, 32768)):
        group = multi_query_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        splits = mq.default_splits(shape.length, shape.hkv)
        x = sets[0]
        want = compiled(scale, splits, mq.PARTIAL_RING)(mx.contiguous(x["q"]), x["k"], x["v"]).astype(mx.float32)
        print(f"\n## multi-query {shape} (splits {splits}, ring {mq.RING_SLOTS})")
        calls = {}
        for name, spec in specs.items():
            got = compiled(scale, splits, spec)(mx.contiguous(x["q"]), x["k"], x["v"]).astype(mx.float32)
            print(f"  {name}: bit-identical {mx.array_equal(got, want).item()}, max |diff| "
                  f"{mx.max(mx.abs(got - want)).item():.3g} of max |out| {mx.max(mx.abs(want)).item():.3g}", flush=True)
            calls[f"call, {name}"] = in_turn(sets, lambda x, f=compiled(scale, splits, spec): f(mx.contiguous(x["q"]),
                                                                                               x["k"], x["v"]))
            calls[f"partial, {name}"] = in_turn(
                sets, lambda x, f=compiled(scale, splits, spec, whole=False): f(mx.contiguous(x["q"]), x["k"], x["v"]))
        calls["sdpa_rows (control)"] = control(group, "sdpa_rows")
        results = interleaved(calls, blocks=blocks, rounds=rounds)
        print(table(results))
        print(ratios(results, "sdpa_rows (control)", [c for c in calls if c.startswith("call")]))
        group.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
