"""What racecheck trips on at kvq4's heads case: one call per process, by mode. python3 kvq4heads.py MODE
MODE: direct | seed | direct-contig | mlx-path (the test's MLX control) | direct-small (a heads view, N 300 block 100)"""
import sys
import numpy as np
import mlx.core as mx
from impl.kvq4_decode import kvq4_decode
from properties.strategies import build_kvq4_case
mode = sys.argv[1]
h, kvh, n, block = (16, 2, 300, 100) if mode == "direct-small" else (16, 2, 1000, 256)
case = build_kvq4_case(np.random.default_rng(n), dtype="bfloat16", h=h, kvh=kvh, n=n, block=block, layout="heads")
keys, values = case.keys, case.values
if mode == "direct-contig":
    keys = type(keys)(*(mx.contiguous(p) if isinstance(p, mx.array) else p for p in keys))
    values = type(values)(*(mx.contiguous(p) if isinstance(p, mx.array) else p for p in values))
if mode == "mlx-path":
    k = mx.dequantize(*keys[:3], group_size=64, bits=4)
    v = mx.dequantize(*values[:3], group_size=64, bits=4)
    out = mx.fast.scaled_dot_product_attention(case.q_mx, k, v, scale=case.scale)
else:
    out = kvq4_decode(case.q_mx, keys, values, scale=case.scale, block=block,
                      body="seed" if mode == "seed" else "direct", arm="cuda")
mx.eval(out)
print(mode, "finite", bool(np.isfinite(np.array(out.astype(mx.float32))).all()))
