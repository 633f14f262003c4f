"""Session 7, call F4: the public multi-query call's host Python on the H200 host, piece by piece (us per call,
build only: 2000 calls, an eval every 16 so the graph stays small), and a cProfile of 4000 public calls."""
import cProfile
import math
import pstats
import time

import mlx.core as mx

import impl.multi_query as mq
from impl.arms import current_device_name, resolve_arm
from impl.kernels.compile import input_signature
from impl.recent_calls import array_key, scalar_key

n = 32768
q = mx.random.normal((1, 32, 8, 128)).astype(mx.bfloat16)
k = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
v = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
mx.eval(q, k, v)
scale = 1 / math.sqrt(128)
compiled = mq._compiled_call("cuda", scale, mq.default_splits(n, 8), input_signature((q, k, v)))


def per_call(f, count=2000):
    total, outs = 0.0, []
    for i in range(count):
        start = time.perf_counter()
        out = f()
        total += time.perf_counter() - start
        outs.append(out)
        if len(outs) == 16:
            mx.eval([o for o in outs if isinstance(o, mx.array)])
            outs = []
    return total / count * 1e6


mx.eval(mq.multi_query_causal(q, k, v, scale=scale, arm="cuda"))
print("memo entries", len(mq._RECENT), "hit:", mq._RECENT.lookup(lambda: ("cuda", array_key(q), array_key(k), array_key(v),
                                                                           scalar_key(scale), scalar_key(None)))[1] is compiled)
for name, f in [("public", lambda: mq.multi_query_causal(q, k, v, scale=scale, arm="cuda")),
                ("compiled", lambda: compiled(q, k, v)),
                ("resolve_arm", lambda: resolve_arm("cuda")),
                ("current_device_name", current_device_name),
                ("array_key x3", lambda: (array_key(q), array_key(k), array_key(v))),
                ("lookup", lambda: mq._RECENT.lookup(lambda: (resolve_arm("cuda"), array_key(q), array_key(k),
                                                              array_key(v), scalar_key(scale), scalar_key(None)))),
                ("q.shape", lambda: q.shape)]:
    print(f"{name:20s} {per_call(f):7.2f} us", flush=True)
profile = cProfile.Profile()
profile.enable()
per_call(lambda: mq.multi_query_causal(q, k, v, scale=scale, arm="cuda"), 4000)
profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(15)
