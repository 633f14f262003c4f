"""Session 6, call E3: multi-query's two-stage partial with ldmatrix.x4 fragment loads and the skipped rescale (stagers fill block i + 1 while the tiles compute block i; the
new staging map: a stager owns one 4-dim quad of a row) against the session's starting module (mq_before.py, the
committed body of 8987c9e): outputs bit-identical first (one stage and two, plain / sliced / transposed / strided K
and V, forced splits with empty ones), then ms per call (eval8 and pipelined, the two modules interleaved)."""
import importlib.util
import math
import pathlib
import sys
import time

import mlx.core as mx

import impl.multi_query as mq
from perf.harness import batched, time_call

spec = importlib.util.spec_from_file_location("mq_before", pathlib.Path(__file__).with_name("mq_before.py"))
before = importlib.util.module_from_spec(spec)
spec.loader.exec_module(before)


def ms(call, batch=8, rounds=15):
    r = sorted(x / batch for x in time_call(batched(call, "mlx", batch), rounds=rounds, warmup=2))
    return r[len(r) // 2] * 1e3


def pipelined(call, batch=8, rounds=40):
    for _ in range(3):
        mx.eval([call() for _ in range(batch)])
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        outs = [call() for _ in range(batch)]
        mx.async_eval(outs)
        if previous is not None:
            mx.eval(previous)
        previous = outs
    mx.eval(previous)
    return (time.perf_counter() - start) / (rounds * batch) * 1e3


def views(kvh, n, d, layout, dtype):
    if layout == "contiguous":
        return [mx.random.normal((1, kvh, n, d)).astype(dtype) for _ in range(2)]
    if layout == "sliced":  # a prefix of a longer cache, heads sliced too
        return [mx.random.normal((1, kvh + 1, n + 37, d)).astype(dtype)[:, 1:, :n] for _ in range(2)]
    if layout == "heads":  # [1, N, KVH, D] transposed: row stride KVH * D
        return [mx.random.normal((1, n, kvh, d)).astype(dtype).transpose(0, 2, 1, 3) for _ in range(2)]
    return [mx.random.normal((1, kvh, d, n)).astype(dtype).transpose(0, 1, 3, 2) for _ in range(2)]  # strided dims


ok = True
if "correct" in sys.argv[1:] or len(sys.argv) == 1:
    mx.random.seed(1)
    for (h, kvh, L, d, n, splits, layout, dtype) in (
            (32, 8, 8, 128, 5000, None, "contiguous", mx.bfloat16), (32, 8, 8, 128, 4099, 7, "sliced", mx.bfloat16),
            (16, 8, 8, 256, 3000, None, "contiguous", mx.bfloat16), (64, 8, 8, 128, 2000, 5, "heads", mx.float16),
            (8, 2, 1, 64, 40, None, "contiguous", mx.float32), (12, 2, 3, 80, 1000, 37, "strided", mx.bfloat16),
            (6, 1, 4, 256, 257, None, "heads", mx.bfloat16), (40, 4, 5, 80, 300, 37, "contiguous", mx.bfloat16),
            (32, 8, 4, 128, 777, 100, "sliced", mx.float32), (64, 8, 8, 256, 600, None, "contiguous", mx.bfloat16),
            (4, 2, 8, 64, 8, None, "contiguous", mx.bfloat16), (2, 1, 2, 256, 300, 3, "strided", mx.float16)):
        q = (0.5 * mx.random.normal((1, h, L, d))).astype(dtype)
        k, v = views(kvh, n, d, layout, dtype)
        scale = 1 / math.sqrt(d)
        want = before.multi_query_causal(q, k, v, scale=scale, splits=splits, arm="cuda")
        nq = h // kvh * L
        got = {}
        for slot, stages in enumerate((1, 2) if mq.pipeline_stages(nq, d, "cuda") == 2 else (1, 1), 1):
            sp = splits or mq.default_splits(n, kvh)
            part = mq.partial_launch(mx.contiguous(q), k, v, mx.array([scale], dtype=dtype), sp, stages)
            o, m_, l_ = part.run("cuda")
            got[slot] = mq.merge_launch(o, m_, l_, dtype, h, L).run("cuda")[0]
        default = mq.multi_query_causal(q, k, v, scale=scale, splits=splits, arm="cuda")
        same = [bool(mx.array_equal(x, want, equal_nan=True).item()) for x in (got[1], got[2], default)]
        ok &= all(same)
        print(f"H{h} KVH{kvh} L{L} D{d} N{n} splits={splits} {layout} {dtype}: pipeline_stages "
              f"{mq.pipeline_stages(nq, d, 'cuda')}; identical to the committed kernel: one stage {same[0]}, "
              f"two stages {same[1]}, default call {same[2]}", flush=True)
    print("ALL IDENTICAL" if ok else "MISMATCH", flush=True)
if "time" in sys.argv[1:] or len(sys.argv) == 1:
    for hq, hkv, L, d, n in ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768), (64, 8, 8, 128, 32768),
                             (32, 8, 4, 128, 32768), (8, 1, 8, 128, 32768)):
        mx.random.seed(0)
        q, k, v = ((0.5 * mx.random.normal(s)).astype(mx.bfloat16) for s in ((1, hq, L, d), (1, hkv, n, d), (1, hkv, n, d)))
        mx.eval(q, k, v)
        scale = 1.0 / math.sqrt(d)
        rows = lambda: [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - L + i + 1],
                                                             v[:, :, :n - L + i + 1], scale=scale) for i in range(L)]
        print(f"{hq}/{hkv}/L{L}/D{d}/N{n} bf16 (stages {mq.pipeline_stages(hq // hkv * L, d, 'cuda')}): "
              f"sdpa_rows eval8 {ms(rows):.4f} ms, pipelined {pipelined(rows):.4f}", flush=True)
        for rnd in range(2):
            for name, mod in (("before", before), ("now", mq)):
                call = lambda: mod.multi_query_causal(q, k, v, scale=scale, arm="cuda")
                print(f"  {name:6s} eval8 {ms(call):.4f} ms, pipelined {pipelined(call):.4f} ms", flush=True)
