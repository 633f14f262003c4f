"""One ring-fetch call per shape, for compute-sanitizer (memcheck, racecheck): 32/8/D128 and 16/4/D64 at N 4096 + 40
(a partial last step), blocks of 16 and 4 tokens (the consecutive-rows path and the per-row one).
    compute-sanitizer --tool racecheck python3 sanitize.py"""
import mlx.core as mx
import numpy as np

import impl.paged_attention as paged
from properties.strategies import ArrayPagedStorage

for hq, hk, d, bs in ((32, 8, 128, 16), (16, 4, 64, 4), (32, 8, 128, 8)):
    n = 4096 + 40
    blocks = -(-n // bs)
    mx.random.seed(0)
    k = (0.5 * mx.random.normal((blocks, hk, bs, d))).astype(mx.bfloat16)
    v = (0.5 * mx.random.normal((blocks, hk, bs, d))).astype(mx.bfloat16)
    q = (0.5 * mx.random.normal((1, hq, 1, d))).astype(mx.bfloat16)
    table = [int(b) for b in np.random.default_rng(0).permutation(blocks)]
    st = ArrayPagedStorage(k, v, bs, d, d, mx.bfloat16)
    ys = []
    for ring in (0, 3):
        paged.set_matrix_ring(ring)
        y = paged.paged_attention(q, st, table, n, scale=d ** -0.5, arm="cuda")
        mx.eval(y)
        ys.append(np.array(y.astype(mx.float32)))
    print(hq, hk, d, bs, "ring 3 bit-identical to ring 0:", bool(np.array_equal(*ys)), flush=True)
