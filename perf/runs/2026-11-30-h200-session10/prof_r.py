"""Session 10, call R5: multi-query's partial at 32/8/L8/D128/N32k under ncu, the ring (the CUDA default) or the
two-stage partial (argument "ring" / "two"): 6 calls, so ncu can skip the first 3 launches of the partial (compile,
warm-up) and profile the 4th."""
import math
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.shapes import DecodeShape

shape = DecodeShape(32, 8, 8, 128, 32768)
x = multi_query_group(shape, ["cuda"]).inputs()[0]
q = mx.contiguous(x["q"])
scale = mx.array([1 / math.sqrt(shape.head_dim)], dtype=q.dtype)
ring = mq.RING_SLOTS if sys.argv[1] == "ring" else 0
for _ in range(6):
    launch = mq.partial_launch(q, x["k"], x["v"], scale, mq.default_splits(shape.length, shape.hkv), 2, ring)
    mx.eval(*launch.run("cuda"))
print("ran", launch.spec.name, dict(launch.template)["RING"] if ring else 0)
