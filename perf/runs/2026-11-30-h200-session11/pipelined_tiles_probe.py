"""Session 11, call S7: the ring partial with its tiles software-pipelined: at each step the tiles compute the scores
S = Q . K^T of block i - 1 and the softmax and P . V of block i - 2, so two independent dependency chains are in
flight (session 10's ncu and S5's variants: the tiles' time is a serial chain of dependent instructions, one or two
tile warps per scheduler). V is triple-buffered (the stagers fill block i's while the tiles read block i - 2's), K
double; the stagers run one more step. The same blocks, products and order: bit-identical to the committed ring.
Interleaved against it (perf.interleaved; us per call) at the three multi-query shapes.
"""
import dataclasses
import math
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.interleaved import in_turn, interleaved, table
from probe_s11 import control, ratios
from perf.shapes import DecodeShape

COPIES = 8
SPLIT_AT = "        // Causal / range mask and online softmax for this lane's row fm of each tile.\n"


def _pieces():
    compute = mq.COMPUTE_SOURCE.lstrip("\n")
    head, tail = compute.split(SPLIT_AT)
    lines = head.splitlines(keepends=True)
    # head: the step / kb / kc / vc lines, then S (s and p declared).
    assert lines[0].lstrip().startswith("const uint step") and "kc = kt" in lines[1] and "vc = vt" in lines[2]
    scores = "".join(lines[3:]).replace("        metal::simdgroup_half8x8 p[TILES][BK / 8];\n", "")
    return scores, SPLIT_AT + tail


def pipelined_source():
    scores, softmax_pv = _pieces()
    s_part = lambda target: scores.replace("metal::simdgroup_float8x8 s[TILES][BK / 8];\n", "").replace("s[", target + "[")
    s_block = lambda step, target: (
        f"        {{\n        const uint step = {step};\n"
        "        const THREADGROUP_MEM half* kc = kt + (step % (uint)STAGES) * (uint)(BK * KS);\n"
        + s_part(target) + "        }\n")
    pv_block = lambda step: (
        f"        {{\n        const uint step = {step}, kb = k0 + step * (uint)BK;\n"
        "        const THREADGROUP_MEM half* vc = vt + (step % 3u) * (uint)(BK * KS);\n"
        "        metal::simdgroup_half8x8 p[TILES][BK / 8];\n"
        + softmax_pv.replace("s[t][c]", "s_old[t][c]") + "        }\n")
    loop = (
        "    metal::simdgroup_float8x8 s_old[TILES][BK / 8];\n"
        "    for (uint it = 0; it < blocks + 2u; ++it) {\n"
        "      if (it >= 2u && it <= blocks) {\n"
        "        metal::simdgroup_float8x8 s_new[TILES][BK / 8];\n"
        + s_block("it - 1u", "s_new") + pv_block("it - 2u")
        + "        UNROLL_FULL\n        for (uint c = 0; c < (uint)BK / 8u; ++c)\n"
          "          UNROLL_FULL\n          for (uint t = 0; t < (uint)TILES; ++t) s_old[t][c] = s_new[t][c];\n"
        "      } else if (it == 1u && blocks >= 1u) {\n"
        + s_block("0u", "s_old")
        + "      } else if (it == blocks + 1u && blocks >= 1u) {\n"
        + pv_block("blocks - 1u")
        + "      }\n      ROLE_BARRIER(THREADS);\n    }\n")
    source = mq._assembled(ring=True)
    start = source.index("  } else if (tile) {\n")
    body_start = source.index("    for (uint it = 0; it < blocks + 1u; ++it) {\n", start)
    end = source.index("\n  } else {\n", body_start) + 1
    source = source[:body_start] + loop + source[end:]
    edits = [
        ("  T* const raw = (T*)(vt + STAGES * BK * KS);", "  T* const raw = (T*)(vt + 3 * BK * KS);", 1),
        ("    for (uint it = 0; it < blocks + 1u; ++it) {\n      if (staging && it < blocks) {",
         "    for (uint it = 0; it < blocks + 2u; ++it) {\n      if (staging && it < blocks) {", 1),
        ("*(THREADGROUP_MEM half4*)(vt + at + b * PASS * (uint)KS)",
         "*(THREADGROUP_MEM half4*)(vt + (it % 3u) * (uint)(BK * KS) + j0 * (uint)KS + d0 + b * PASS * (uint)KS)", 2),
        ("vt + at + j * (uint)KS + e, live);", "vt + (b % 3u) * (uint)(BK * KS) + j * (uint)KS + e, live);", 1),
        ("      for (uint it = 0; it < blocks + 1u; ++it) {\n        if (it < blocks) {\n          if (it + (uint)RING",
         "      for (uint it = 0; it < blocks + 2u; ++it) {\n        if (it < blocks) {\n          if (it + (uint)RING", 1),
    ]
    for old, new, count in edits:
        assert source.count(old) == count, (old, source.count(old))
        source = source.replace(old, new)
    return source


PIPELINED = dataclasses.replace(mq.PARTIAL_RING, name="multi_query_partial_ring_pipelined_tiles",
                                source=pipelined_source())


def compiled(scale, splits, spec, whole=True):
    def call(q, k, v):
        launch = mq.partial_launch(q, k, v, mx.array([scale], dtype=q.dtype), splits, 2, mq.RING_SLOTS)
        if spec is PIPELINED:  # one more V buffer of BK rows
            launch = dataclasses.replace(launch, spec=spec, shared_memory=launch.shared_memory
                                         + mq.block_keys(q.shape[3]) * (q.shape[3] + mq.ROW_PAD) * 2)
        opart, mpart, lpart = launch.run("cuda")
        if not whole:
            return opart
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


def identical(shape, dtype, n, splits):
    mx.random.seed(5)
    q = mx.random.normal((1, shape.hq, shape.rows, shape.head_dim)).astype(dtype)
    k, v = (mx.random.normal((1, shape.hkv, n, shape.head_dim)).astype(dtype) for _ in range(2))
    scale = 1 / math.sqrt(shape.head_dim)
    a = compiled(scale, splits, mq.PARTIAL_RING)(q, k, v)
    b = compiled(scale, splits, PIPELINED)(q, k, v)
    return mx.array_equal(a, b).item()


def main(blocks=5, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    shapes = (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768), DecodeShape(64, 8, 8, 128, 32768))
    for shape in shapes:
        for dtype, n, splits in ((mx.bfloat16, 3000, 7), (mx.float16, 1000, 40), (mx.float32, 500, 3),
                                 (mx.bfloat16, 40, 64)):
            print(f"{shape} {dtype} N{n} splits {splits}: bit-identical to the committed ring: "
                  f"{identical(shape, dtype, n, splits)}", flush=True)
    for shape in shapes:
        group = multi_query_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        splits = mq.default_splits(shape.length, shape.hkv)
        print(f"\n## multi-query {shape} (splits {splits}, ring {mq.RING_SLOTS})", flush=True)
        calls = {}
        for name, spec in (("ring (committed)", mq.PARTIAL_RING), ("pipelined tiles", PIPELINED)):
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
