"""Session 11: kvq4_decode at 8/1/N32k (the default direct body) called a few times, for ncu."""
import math

import mlx.core as mx

from impl.kvq4_decode import QuantizedKV, kvq4_decode

mx.random.seed(0)
q = (0.5 * mx.random.normal((1, 8, 1, 256))).astype(mx.bfloat16)
k, v = ((0.5 * mx.random.normal((1, 1, 32768, 256))).astype(mx.bfloat16) for _ in range(2))
keys, values = QuantizedKV(*mx.quantize(k, group_size=64, bits=4)), QuantizedKV(*mx.quantize(v, group_size=64, bits=4))
for _ in range(6):
    mx.eval(kvq4_decode(q, keys, values, scale=1 / math.sqrt(256), arm="cuda"))
