"""Before the full run: each body compiles with mx.fast.cuda_kernel and runs once; compile and run times.

Prints one JSON line per measurement (also written to $OUT/perf.jsonl):
* the simdgroup-matrix probe (the CUDA prelude alone) against NumPy;
* kvq4 decode and multi-query on the cuda arm against the float64 oracle, with
  the first call's time (NVRTC compiles of the partial and merge kernels: the
  PTX cache is disabled by run.sh) and a second N (multi-query specializes on
  N: a new compile; kvq4 reads N at run time: none);
* steady-state time per call (median of 20, mx.eval each) next to MLX's own
  path on the same inputs: mx.dequantize + mx.fast.scaled_dot_product_attention
  for kvq4, mx.fast.scaled_dot_product_attention(mask="causal") for multi-query.
"""

import json
import os
import time

import mlx.core as mx
import numpy as np

from impl.kernels.test_cuda_compile_decode import probe_launch
from impl.kvq4_decode import kvq4_decode
from impl.multi_query import multi_query_causal
from properties.strategies.decode import (build_kvq4_case, build_multi_query_case, kvq4_oracles,
                                          multi_query_oracles)
from reference import metrics

OUT = os.environ.get("OUT", ".")


def emit(**record):
    line = json.dumps(record)
    print(line, flush=True)
    with open(os.path.join(OUT, "perf.jsonl"), "a") as f:
        f.write(line + "\n")


def timed(fn):
    start = time.perf_counter()
    out = fn()
    mx.eval(out)
    return out, time.perf_counter() - start


def median_time(fn, iters=20):
    mx.eval(fn())
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        mx.eval(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


emit(what="device", device=str(mx.default_device()), mlx=mx.__version__, cuda=bool(mx.cuda.is_available()))

rng = np.random.default_rng(0)
for transpose in (False, True):
    a, b, c = (rng.integers(-8, 9, (8, 8)).astype(np.float32) for _ in range(3))
    d, _ = probe_launch(*(mx.array(x.reshape(-1)) for x in (a, b, c)), transpose).run("cuda")
    expect = a @ (b.T if transpose else b) + c
    emit(what="simdgroup_probe", transpose=transpose, exact=bool(np.array_equal(np.array(d).reshape(8, 8), expect)))

# kvq4: GQA 4 (32 query heads over 8 KV heads), 8192 cached positions, bf16.
for n in (8192, 8191):
    case = build_kvq4_case(np.random.default_rng(n), dtype="bfloat16", h=32, kvh=8, n=n, block=512)
    call = lambda: kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, arm="cuda")
    out, first = timed(call)
    ref, base = kvq4_oracles(case)
    err = float(np.max(np.abs(metrics.as_f64(out) - ref)))
    base_err = float(np.max(np.abs(metrics.as_f64(base) - ref)))
    emit(what="kvq4_decode", case=case.id, first_call_s=round(first, 3), max_err=err, naive_bf16_err=base_err)
    assert np.isfinite(err) and err <= 2 * base_err + 0.01, (err, base_err)
kernel_s = median_time(call)
dq = lambda: mx.fast.scaled_dot_product_attention(
    case.q_mx, mx.dequantize(*case.keys[:3], group_size=64, bits=4),
    mx.dequantize(*case.values[:3], group_size=64, bits=4), scale=case.scale)
kd, vd = (mx.dequantize(*p[:3], group_size=64, bits=4) for p in (case.keys, case.values))
mx.eval(kd, vd)
sdpa = lambda: mx.fast.scaled_dot_product_attention(case.q_mx, kd, vd, scale=case.scale)
emit(what="kvq4_decode_time", case=case.id, kernel_ms=1e3 * kernel_s, mlx_dequantize_sdpa_ms=1e3 * median_time(dq),
     mlx_sdpa_on_bf16_kv_ms=1e3 * median_time(sdpa))

# multi-query: 8 rows (speculative verify), GQA 4, 4096 cached positions, D 128, bf16.
for n in (4096, 4095):
    case = build_multi_query_case(np.random.default_rng(n), dtype="bfloat16", h=32, kvh=8, L=8, n=n, d=128)
    call = lambda: multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, arm="cuda")
    out, first = timed(call)
    ref, base = multi_query_oracles(case)
    err = float(np.max(np.abs(metrics.as_f64(out) - ref)))
    base_err = float(np.max(np.abs(metrics.as_f64(base) - ref)))
    emit(what="multi_query", case=case.id, first_call_s=round(first, 3), max_err=err, naive_bf16_err=base_err)
    assert np.isfinite(err) and err <= 2 * base_err + 0.01, (err, base_err)
kernel_s = median_time(call)
sdpa = lambda: mx.fast.scaled_dot_product_attention(case.q_mx, case.k_mx, case.v_mx, scale=case.scale,
                                                    mask="causal")
emit(what="multi_query_time", case=case.id, kernel_ms=1e3 * kernel_s, mlx_sdpa_causal_ms=1e3 * median_time(sdpa))
