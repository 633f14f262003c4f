"""One profiled multi-query call (run under ncu by callC1.sh) at 32/8/L8/D128/N32k bf16: argv[1] = PREFETCH (0/1),
argv[2] = TILES_PER_SIMDGROUP; warm-up (JIT), then the calls ncu captures."""
import math
import sys

import mlx.core as mx

import impl.multi_query as mq

mq.TILES_PER_SIMDGROUP = int(sys.argv[2])  # argv[1]: PREFETCH in call C1 (the knob was dropped after it)
hq, hkv, L, d, n = 32, 8, 8, 128, 32768
mx.random.seed(0)
q, k, v = ((0.5 * mx.random.normal(s)).astype(mx.bfloat16) for s in ((1, hq, L, d), (1, hkv, n, d), (1, hkv, n, d)))
mx.eval(q, k, v)
for _ in range(4):
    mx.eval(mq.multi_query_causal(q, k, v, scale=1 / math.sqrt(d), arm="cuda"))
