"""Session 7, call F1 (under nsys): 12 eval8 rounds of multi-query 32/8/L8/D128/N32k through its public function,
then 12 of its control (eight single-row SDPA calls), a 5 ms sleep between rounds so each round stands alone in the
trace."""
import math
import time

import mlx.core as mx

import impl.multi_query as mq

n = 32768
q = mx.random.normal((1, 32, 8, 128)).astype(mx.bfloat16)
k = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
v = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
mx.eval(q, k, v)
scale = 1 / math.sqrt(128)


def ours():
    return mq.multi_query_causal(q, k, v, scale=scale, arm="cuda")


def rows():
    return [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - 8 + i + 1], v[:, :, :n - 8 + i + 1],
                                                 scale=scale) for i in range(8)]


for launch in (ours, rows):
    for r in range(15):
        start = time.perf_counter()
        mx.eval([launch() for _ in range(8)])
        if r >= 3:
            print(f"{launch.__name__} round {r}: {(time.perf_counter() - start) / 8 * 1e6:.1f} us per call", flush=True)
        time.sleep(0.005)
