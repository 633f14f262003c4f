"""Session 11, call S12: what the public multi-query call's wrapper costs this host, piece by piece (timeit, us per
call; no GPU work is timed: the calls only build their graphs, which are then evaluated untimed)."""
import math
import timeit

import mlx.core as mx

import impl.multi_query as mq
from impl.arms import current_device_name, resolve_arm
from impl.recent_calls import array_key, scalar_key

q = mx.zeros((1, 32, 8, 128), mx.bfloat16)
k = mx.zeros((1, 8, 64, 128), mx.bfloat16)
scale = 1 / math.sqrt(128)
mx.eval(mq.multi_query_causal(q, k, k, scale=scale, arm="cuda"))
bare = mq._compiled_call("cuda", scale, mq.default_splits(64, 8), mq.input_signature((q, k, k)))
key = (resolve_arm("cuda"), array_key(q), array_key(k), array_key(k), scalar_key(scale), scalar_key(None))
pieces = {
    "mx.default_device()": lambda: mx.default_device(),
    "current_device_name()": current_device_name,
    "resolve_arm('cuda')": lambda: resolve_arm("cuda"),
    "q.shape": lambda: q.shape,
    "q.dtype": lambda: q.dtype,
    "array_key(q)": lambda: array_key(q),
    "hash(key)": lambda: hash(key),
    "_RECENT.lookup(...)": lambda: mq._RECENT.lookup(lambda: (resolve_arm("cuda"), array_key(q), array_key(k),
                                                              array_key(k), scalar_key(scale), scalar_key(None))),
    "bare compiled call (graph only)": lambda: bare(q, k, k),
    "multi_query_causal (graph only)": lambda: mq.multi_query_causal(q, k, k, scale=scale, arm="cuda"),
    "mx.contiguous(q) (graph only)": lambda: mx.contiguous(q),
}
print(mx.default_device(), mx.__version__)
for name, fn in pieces.items():
    n = 2000
    best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    print(f"{name:36s} {best:8.2f} us")
