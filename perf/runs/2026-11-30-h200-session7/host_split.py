"""Session 7, call F1: where a call's time goes in eval8 (perf's protocol) on the H200.

For each launch: ``build`` (8 launches, no eval: the host Python and MLX graph construction of one round), ``eval8``
(perf's protocol: 8 launches then one mx.eval), ``pipelined`` (round r+1 built while round r runs), in us per call.
Launches: multi-query 32/8/L8/D128 through its public function, through its compiled call directly, as two
uncompiled launches, the partial alone; its control (eight single-row SDPA calls); one single-row SDPA; an empty
cuda_kernel (one and two launches per call): at N = 32768 and at N = 64 (the fixed cost). Then paged bf16 / KV4 D128
and argmax 64 x 151936 through perf.cases (public function and control)."""
import math
import sys
import time

import mlx.core as mx

import impl.multi_query as mq
from impl.kernels.compile import input_signature
from perf.cases import argmax_group, multi_query_group, paged_group
from perf.harness import time_call
from perf.shapes import ArgmaxShape, DecodeShape

ROUNDS = 30


def build_us(launch, batch=8, rounds=ROUNDS):
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        outs = [launch() for _ in range(batch)]
        samples.append(time.perf_counter() - start)
        mx.eval(outs)
    return sorted(samples)[len(samples) // 2] / batch * 1e6


def eval8_us(launch, batch=8, rounds=ROUNDS):
    def call():
        mx.eval([launch() for _ in range(batch)])
    r = sorted(time_call(call, rounds=rounds, warmup=3))
    return r[len(r) // 2] / batch * 1e6


def pipelined_us(launch, batch=8, rounds=ROUNDS):
    for _ in range(3):
        mx.eval([launch() for _ in range(batch)])
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        outs = [launch() for _ in range(batch)]
        mx.async_eval(outs)
        if previous is not None:
            mx.eval(previous)
        previous = outs
    mx.eval(previous)
    return (time.perf_counter() - start) / (rounds * batch) * 1e6


NOOP = mx.fast.cuda_kernel(name="noop_f1", input_names=["a"], output_names=["o"],
                           source="if (threadIdx.x == 0 && blockIdx.x == 0) o[0] = a[0];")


def noop(a):
    return NOOP(inputs=[a], grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(1,)],
                output_dtypes=[mx.float32])[0]


def mq_launches(n):
    q = mx.random.normal((1, 32, 8, 128)).astype(mx.bfloat16)
    k = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
    v = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
    a = mx.zeros((4,))
    mx.eval(q, k, v, a)
    scale = 1 / math.sqrt(128)
    splits = mq.default_splits(n, 8)
    compiled = mq._compiled_call("cuda", scale, splits, input_signature((q, k, v)))
    stages = mq.pipeline_stages(32, 128, "cuda")
    s_t = mq._scale_array(scale, q.dtype)
    mx.eval(s_t)

    def direct():
        o, m, l = mq.partial_launch(q, k, v, s_t, splits, stages).run("cuda")
        return mq.merge_launch(o, m, l, q.dtype, 32, 8).run("cuda")[0]

    def partial():
        return mq.partial_launch(q, k, v, s_t, splits, stages).run("cuda")[0]

    def rows():
        return [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - 8 + i + 1],
                                                     v[:, :, :n - 8 + i + 1], scale=scale) for i in range(8)]

    return {
        "mq public": lambda: mq.multi_query_causal(q, k, v, scale=scale, arm="cuda"),
        "mq compiled": lambda: compiled(q, k, v),
        "mq direct (2 launches)": direct,
        "mq partial only": partial,
        "sdpa_rows (control)": rows,
        "sdpa one row": lambda: mx.fast.scaled_dot_product_attention(q[:, :, :1], k, v, scale=scale),
        "noop x1": lambda: noop(a),
        "noop x2": lambda: noop(noop(a)),
    }


def table(title, launches):
    print(f"\n## {title}\n{'launch':32s} {'build':>8s} {'eval8':>8s} {'pipelined':>9s}  (us per call)")
    for name, launch in launches.items():
        mx.eval(launch())
        b, e, p = build_us(launch), eval8_us(launch), pipelined_us(launch)
        print(f"{name:32s} {b:8.1f} {e:8.1f} {p:9.1f}", flush=True)


def main():
    print(mx.default_device(), mx.__version__)
    for rep in range(2):
        for n in (32768, 64):
            table(f"multi-query 32/8/L8/D128, N={n} (round {rep})", mq_launches(n))
    cases = {}
    for group in (paged_group(DecodeShape(32, 8, 1, 128, 32768), ["cuda"], bits=None),
                  paged_group(DecodeShape(32, 8, 1, 128, 32768), ["cuda"], bits=4),
                  argmax_group(ArgmaxShape(64, 151936), ["cuda"])):
        for case in group.cases:
            cases[case.id] = case.build()
    for rep in range(2):
        table(f"other targets (round {rep})", cases)


if __name__ == "__main__":
    sys.exit(main())
