"""Session 7, call F2: a CUPTI timeline (torch.profiler: CUPTI records every CUDA context of the process, MLX's
too) of eval8 rounds of multi-query 32/8/L8/D128/N32k (public function), its control (eight single-row SDPA calls),
paged bf16 D128/N32k and normalized argmax 64 x 151936, 6 rounds each after warm-up, a 3 ms sleep between rounds.
Writes trace.json.gz (chrome trace) to argv[1]; the summary is trace_summary.py's."""
import math
import sys
import time

import mlx.core as mx
import torch
from torch.profiler import ProfilerActivity, profile

import impl.multi_query as mq
from perf.cases import argmax_group, paged_group
from perf.shapes import ArgmaxShape, DecodeShape

n = 32768
q = mx.random.normal((1, 32, 8, 128)).astype(mx.bfloat16)
k = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
v = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
mx.eval(q, k, v)
scale = 1 / math.sqrt(128)


def mq_public():
    return mq.multi_query_causal(q, k, v, scale=scale, arm="cuda")


def sdpa_rows():
    return [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - 8 + i + 1], v[:, :, :n - 8 + i + 1],
                                                 scale=scale) for i in range(8)]


launches = {"mq_public": mq_public, "sdpa_rows": sdpa_rows}
for group in (paged_group(DecodeShape(32, 8, 1, 128, 32768), ["cuda"], bits=None),
              argmax_group(ArgmaxShape(64, 151936), ["cuda"])):
    for case in group.cases:
        if case.kernel in ("paged_attention", "sdpa", "normalized_argmax", "logsumexp_sub_argmax"):
            launches[case.benchmark + ":" + case.kernel] = case.build()

torch.zeros(1, device="cuda")
for launch in launches.values():
    for _ in range(3):
        mx.eval([launch() for _ in range(8)])
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for name, launch in launches.items():
        with torch.profiler.record_function(f"phase {name}"):
            for r in range(6):
                with torch.profiler.record_function(f"round {name} {r}"):
                    start = time.perf_counter()
                    outs = [launch() for _ in range(8)]
                    with torch.profiler.record_function("mx.eval"):
                        mx.eval(outs)
                    print(f"{name} round {r}: {(time.perf_counter() - start) / 8 * 1e6:.1f} us per call", flush=True)
                time.sleep(0.003)
prof.export_chrome_trace(sys.argv[1])
