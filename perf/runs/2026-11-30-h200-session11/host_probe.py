"""Session 11, call S11: where could multi-query 32/8/L8/D128 find the ~8 us per call that 4x in eval8 needs (S10)?
The host's share of a call: the compiled call with and without its ``mx.contiguous(q)`` node (q is contiguous here),
and the partial alone, at N = 32k and at N = 64 (almost no GPU work: the call's fixed cost), interleaved
(perf.interleaved; us per call)."""
import math

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.interleaved import in_turn, interleaved, ratios, table
from perf.shapes import DecodeShape
from probe_s11 import control


def compiled(scale, splits, contiguous, whole):
    def call(q, k, v):
        nq, d = q.shape[1] // k.shape[1] * q.shape[2], q.shape[3]
        qin = mx.contiguous(q) if contiguous else q
        launch = mq.partial_launch(qin, k, v, mx.array([scale], dtype=q.dtype), splits, mq.pipeline_stages(nq, d, "cuda"),
                                   mq.ring_slots(nq, d, q.dtype, "cuda"))
        opart, mpart, lpart = launch.run("cuda")
        if not whole:
            return opart
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


print(mx.default_device(), mx.__version__)
for n in (32768, 64):
    shape = DecodeShape(32, 8, 8, 128, n)
    group = multi_query_group(shape, ["cuda"], copies=8)
    sets = group.inputs()
    scale = 1 / math.sqrt(shape.head_dim)
    splits = mq.default_splits(n, shape.hkv)
    calls = {"multi_query_causal": in_turn(sets, lambda x: mq.multi_query_causal(x["q"], x["k"], x["v"], scale=scale,
                                                                                 arm="cuda"))}
    for contiguous in (True, False):
        for whole in (True, False):
            f = compiled(scale, splits, contiguous, whole)
            name = ("call" if whole else "partial") + (", contiguous(q)" if contiguous else ", q as given")
            calls[name] = in_turn(sets, lambda x, f=f: f(x["q"], x["k"], x["v"]))
    calls["sdpa_rows (control)"] = control(group, "sdpa_rows")
    results = interleaved(calls, blocks=4, rounds=20)
    print(f"\n## {shape} (splits {splits})")
    print(table(results))
    print(ratios(results, "sdpa_rows (control)"))
    group.release()
