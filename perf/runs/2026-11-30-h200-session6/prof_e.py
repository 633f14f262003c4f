"""One profiled call (run under ncu by callE1.sh): argv[1] = mq (multi-query 32/8/L8/D128), paged (bf16 32/8/D128)
or q4 (KV4 32/8/D128), all N32k bf16; warm-up (JIT), then the calls ncu captures."""
import math
import sys

import mlx.core as mx

from perf.cases import multi_query_group, paged_group
from perf.shapes import DecodeShape

which = sys.argv[1]
if which == "mq":
    g = multi_query_group(DecodeShape(32, 8, 8, 128, 32768), ["cuda"])
    kernel = "multi_query_causal"
else:
    g = paged_group(DecodeShape(32, 8, 1, 128, 32768), ["cuda"], bits=4 if which == "q4" else None, dense=False)
    kernel = "paged_attention"
call = next(c for c in g.cases if c.kernel == kernel).build()
for _ in range(6):
    mx.eval(call())
