"""Multi-query at 32/8/L8/D128/N32k bf16 (argv[1]: before = the committed module, now = this tree), for ncu."""
import importlib.util
import math
import pathlib
import sys

import mlx.core as mx

if sys.argv[1] == "before":
    spec = importlib.util.spec_from_file_location("mq_before", pathlib.Path(__file__).with_name("mq_before.py"))
    mq = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mq)
else:
    import impl.multi_query as mq
hq, hkv, L, d, n = 32, 8, 8, 128, 32768
mx.random.seed(0)
q, k, v = ((0.5 * mx.random.normal(s)).astype(mx.bfloat16) for s in ((1, hq, L, d), (1, hkv, n, d), (1, hkv, n, d)))
mx.eval(q, k, v)
for _ in range(5):
    mx.eval(mq.multi_query_causal(q, k, v, scale=1 / math.sqrt(d), arm="cuda"))
