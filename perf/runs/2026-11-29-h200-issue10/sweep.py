"""Issue 10 exploration on the H200: the new direct paged kernel's launch geometry, swept.

For each configuration (TARGET_THREADGROUPS x SIMDGROUPS) times paged_attention[cuda] on the
headline shapes (bf16, KV4, KV8), next to MLX SDPA on contiguous K/V, gather(+dequantize)+SDPA and
torch's default SDPA. Same timing as perf.run (8 calls, one wait; 3 warm-up rounds; median / 8).
Also the host cost of one call (graph construction only, no eval).
"""
import sys
import time

import mlx.core as mx

import impl.paged_attention as paged
from perf.cases import paged_group
from perf.harness import batched, time_call
from perf.shapes import DecodeShape

ROUNDS, WARMUP, BATCH = 15, 3, 8
SHAPES = [DecodeShape(32, 8, 1, 128, 32768), DecodeShape(32, 8, 1, 128, 131072), DecodeShape(16, 8, 1, 256, 32768),
          DecodeShape(16, 8, 1, 256, 131072)]
HEADLINE = {SHAPES[0], SHAPES[3]}  # quantized pools only here
CONFIGS = [(int(t), int(s)) for t, s in (c.split("x") for c in sys.argv[1:])] or [(1024, 4)]


def timed(call, runtime="mlx"):
    rounds = time_call(batched(call, runtime, BATCH), rounds=ROUNDS, warmup=WARMUP)
    rounds = sorted(r / BATCH for r in rounds)
    return rounds[len(rounds) // 2]


for shape in SHAPES:
    for bits in (None, 4, 8) if shape in HEADLINE else (None,):
        group = paged_group(shape, ["cuda"], bits=bits, torch_backends=("default",) if bits is None else ())
        nbytes = group.cases[0].bytes
        for case in group.cases:
            if case.kernel == "paged_attention":
                continue
            t = timed(case.build(), case.runtime)
            print(f"{shape} q{bits} {case.kernel}[{case.arm}]: {t*1e3:.4f} ms {nbytes/t/1e9:.0f} GB/s", flush=True)
        direct = group.cases[0]
        for target, sg in CONFIGS:
            paged.TARGET_THREADGROUPS, paged.SIMDGROUPS = target, sg
            call = direct.build()
            t = timed(call)
            print(f"{shape} q{bits} paged_attention[cuda] target={target} sg={sg}: {t*1e3:.4f} ms "
                  f"{nbytes/t/1e9:.0f} GB/s", flush=True)
        t0 = time.perf_counter()
        for _ in range(100):
            call()
        print(f"{shape} q{bits} host cost per call (graph build, no eval): {(time.perf_counter()-t0)*1e4:.1f} us",
              flush=True)
        group.release()
