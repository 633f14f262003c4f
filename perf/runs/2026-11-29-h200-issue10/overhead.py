"""Where the direct paged kernel's per-call time goes on the H200 (host vs GPU), shape 32/8/D128/N32k."""
import time

import mlx.core as mx
import numpy as np

import impl.paged_attention as paged
from perf.cases import _dense_qkv, _pool
from perf.harness import batched, time_call
from perf.shapes import DecodeShape


def per_call(fn, n=200):
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def timed(call):
    rounds = sorted(r / 8 for r in time_call(batched(call, "mlx", 8), rounds=15, warmup=3))
    return rounds[len(rounds) // 2] * 1e3


for s in (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)):
    mx.random.seed(0)
    q, k, v = _dense_qkv(s)
    storage, table = _pool(k, v, s, 0, None)
    mx.eval(q, storage.keys, storage.values)
    scale = s.head_dim ** -0.5
    print(s)
    print(f"  host us: mx.array(numpy table) {per_call(lambda: mx.array(table)):.1f}; "
          f"mx.array([3 floats]) {per_call(lambda: mx.array([0.1, 5.0, 6.0], dtype=mx.float32)):.1f}; "
          f"_validate {per_call(lambda: paged._validate(q, storage, table, s.length, scale, direct=True, bucket=True)):.1f}")
    tb, sc, planes = paged._validate(q, storage, table, s.length, scale, direct=True, bucket=True)
    launch = paged.partial_launch(q, storage, tb, s.length, sc, planes)
    mx.eval(*launch.inputs)
    fn = paged._compiled_pair("cuda", launch.spec, launch.template, launch.grid, launch.threadgroup,
                              launch.output_shapes, q.dtype)
    print(f"  host us: partial_launch {per_call(lambda: paged.partial_launch(q, storage, tb, s.length, sc, planes)):.1f}; "
          f"compiled pair call {per_call(lambda: fn(*launch.inputs)):.1f}; "
          f"uncompiled two launches {per_call(lambda: launch.run('cuda')):.1f}; "
          f"full paged_attention {per_call(lambda: paged.paged_attention(q, storage, table, s.length, scale=scale, arm='cuda')):.1f}")
    print(f"  ms per call (8 calls/eval): compiled pair on fixed inputs {timed(lambda: fn(*launch.inputs)):.4f}; "
          f"partial alone {timed(lambda: launch.run('cuda')[0]):.4f}; "
          f"full {timed(lambda: paged.paged_attention(q, storage, table, s.length, scale=scale, arm='cuda')):.4f}; "
          f"sdpa {timed(lambda: mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)):.4f}")
    for batch in (1, 32):
        r = sorted(x / batch for x in time_call(batched(lambda: fn(*launch.inputs), "mlx", batch), rounds=9, warmup=2))
        print(f"  compiled pair, {batch} calls/eval: {r[len(r)//2]*1e3:.4f} ms")
