"""Session 9, call H1: how fast can a call be at all? Speed-of-light bounds for issue 10's unmet eval8 targets.

The targets still unmet in perf's eval8 protocol (8 calls, one mx.eval) are multi-query L8 D128 (>= 4x eight
single-row SDPA calls), paged bf16 D128 (>= 2.5 TB/s and >= 2.4x MLX SDPA) and kvq4 8/1 (>= 3x dequantize +
SDPA). This probe times, in the same process and interleaved block by block, the real calls and their controls
next to stand-ins that do only what any kernel of the same call structure must do:

* ``stream2``: a partial that only streams the head's K and V (16-byte loads, 4 of K and 4 of V in flight per
  thread, an XOR that every load feeds so none is dead) and writes the same partial outputs as the real one,
  then the real merge, both in one ``mx.compile``d call: the floor of multi-query's two-kernel structure;
* ``empty2``: the same with no K/V read: the two kernels' fixed cost;
* ``stream1`` / ``stream1w``: one kernel that streams K/V and writes the output (128 / 512 threads per
  threadgroup, the real grid of 256 threadgroups): the floor of ANY one-kernel design (a fused merge, a paged
  call) that reads the K/V bytes;
* ``empty1``: one kernel that reads nothing: the floor of any call at all.

Protocols: eval8 (perf's), pipelined8, pipelined1 (one call per round, host overlapped). us per call, the
median over blocks of each block's median.
"""
import math
import statistics
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import kvq4_group, multi_query_group, paged_group
from perf.harness import Pipelined, batched, time_call
from perf.shapes import DecodeShape

STREAM = """
  const int tid = threadIdx.x;
  const int split = blockIdx.x, hk = blockIdx.y, splits = gridDim.x;
  const int n = k_shape[2];
  const int per = (n + splits - 1) / splits;
  const int k0 = min(n, split * per), k1 = min(n, k0 + per);
  constexpr int VPR = D / 8;  // 16-byte vectors per bf16 row
  const uint4* kp = reinterpret_cast<const uint4*>(k) + ((size_t)hk * n + k0) * VPR;
  const uint4* vp = reinterpret_cast<const uint4*>(v) + ((size_t)hk * n + k0) * VPR;
  const int total = READ ? (k1 - k0) * VPR : 0;
  unsigned acc = 0;
  for (int i0 = 0; i0 < total; i0 += THREADS * UNROLL) {
    uint4 a[UNROLL], b[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int i = i0 + u * THREADS + tid;
      a[u] = i < total ? kp[i] : make_uint4(0, 0, 0, 0);
      b[u] = i < total ? vp[i] : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
  }
  const float mark = acc == 0x9e3779b9u ? 2.0f : 1.0f;  // every load feeds it
"""
PARTIAL_OUT = """
  const size_t base = ((size_t)split * KVH + hk) * NQ;
  for (int i = tid; i < NQ * D; i += THREADS) opart[base * D + i] = mark;
  for (int i = tid; i < NQ; i += THREADS) { mpart[base + i] = 0.0f; lpart[base + i] = 1.0f; }
"""
FUSED_OUT = """
  if (split == 0)
    for (int i = tid; i < NQ * D; i += THREADS) out[(size_t)hk * NQ * D + i] = T(mark);
"""
UNROLL = 4


def bound_calls(q, k, v):
    """name -> call of the stand-ins at q's shape (grid: the real partial's splits x KV heads)."""
    _, h, L, d = q.shape
    kvh, n = k.shape[1], k.shape[2]
    nq = h // kvh * L
    splits = mq.default_splits(n, kvh)
    partial_kernel = mx.fast.cuda_kernel(name="sol_stream_partial", input_names=["q", "k", "v"],
                                         output_names=["opart", "mpart", "lpart"], source=STREAM + PARTIAL_OUT)
    fused_kernel = mx.fast.cuda_kernel(name="sol_stream_fused", input_names=["q", "k", "v"], output_names=["out"],
                                       source=STREAM + FUSED_OUT)

    def template(threads, read):
        return [("T", q.dtype), ("D", d), ("KVH", kvh), ("NQ", nq), ("THREADS", threads), ("UNROLL", UNROLL),
                ("READ", int(read))]

    def two(read):
        def call(q, k, v):
            opart, mpart, lpart = partial_kernel(
                inputs=[q, k, v], template=template(128, read), grid=(128 * splits, kvh, 1),
                threadgroup=(128, 1, 1), output_shapes=[(splits, kvh, nq, d), (splits, kvh, nq), (splits, kvh, nq)],
                output_dtypes=[mx.float32] * 3)
            return mq.merge_launch(opart, mpart, lpart, q.dtype, h, L).run("cuda")[0]
        return mx.compile(call)

    def one(threads, read):
        def call(q, k, v):
            return fused_kernel(inputs=[q, k, v], template=template(threads, read), grid=(threads * splits, kvh, 1),
                                threadgroup=(threads, 1, 1), output_shapes=[(1, h, L, d)], output_dtypes=[q.dtype])[0]
        return mx.compile(call)

    compiled = {"stream2": two(True), "empty2": two(False), "stream1": one(128, True), "stream1w": one(512, True),
                "empty1": one(128, False)}
    return {name: (lambda f=f: f(q, k, v)) for name, f in compiled.items()}


def case_call(group, kernel, arm):
    (case,) = [c for c in group.cases if c.kernel == kernel and c.arm == arm]
    return case.build()


def per_call_us(launch, protocol, rounds):
    if protocol == "eval8":
        samples = time_call(batched(launch, "mlx", 8), rounds=rounds, warmup=2)
        return statistics.median(samples) / 8 * 1e6
    batch = 8 if protocol == "pipelined8" else 1
    round_ = Pipelined(launch, batch)
    samples = time_call(round_, rounds=rounds, warmup=2)
    round_.finish()
    return statistics.median(samples) / batch * 1e6


def main(blocks=6, rounds=30):
    print(mx.default_device(), mx.__version__, flush=True)
    mqs = DecodeShape(32, 8, 8, 128, 32768)
    mq_group = multi_query_group(mqs, ["cuda"])
    x = mq_group.inputs()
    q, k, v = x["q"], mx.contiguous(x["k"]), mx.contiguous(x["v"])
    mx.eval(k, v)
    calls = {"multi_query_causal 32/8/L8/D128/N32k": case_call(mq_group, "multi_query_causal", "cuda"),
             "sdpa_rows (its control)": case_call(mq_group, "sdpa_rows", "mlx")}
    calls.update({f"{name} (bound, mq grid)": f for name, f in bound_calls(q, k, v).items()})
    paged = paged_group(DecodeShape(32, 8, 1, 128, 32768), ["cuda"])
    calls["paged_attention bf16 32/8/D128/N32k"] = case_call(paged, "paged_attention", "cuda")
    calls["sdpa contiguous, one row (its control)"] = case_call(paged, "sdpa", "mlx")
    kvq4 = kvq4_group(DecodeShape(8, 1, 1, 256, 32768), ["cuda"])
    calls["kvq4_decode 8/1/D256/N32k"] = case_call(kvq4, "kvq4_decode", "cuda")
    calls["dequantize_sdpa 8/1 (its control)"] = case_call(kvq4, "dequantize_sdpa", "mlx")
    for f in calls.values():
        for _ in range(3):
            mx.eval(f())
    protocols = ("eval8", "pipelined8", "pipelined1")
    times = {(name, p): [] for name in calls for p in protocols}
    for _ in range(blocks):
        for name, f in calls.items():
            for p in protocols:
                times[name, p].append(per_call_us(f, p, rounds))
    kv_bytes = 2 * 8 * 32768 * 128 * 2
    print(f"\nus per call, median of {blocks} interleaved blocks of {rounds} rounds; "
          f"TB/s = the {kv_bytes / 1e6:.0f} MB of bf16 K/V at 8 KV heads, D128, N32k")
    print(f"{'call':44s} {'eval8':>8s} {'pipel8':>8s} {'pipel1':>8s} {'TB/s eval8':>11s} {'TB/s pipel8':>12s}")
    for name in calls:
        e, p8, p1 = (statistics.median(times[name, p]) for p in protocols)
        print(f"{name:44s} {e:8.1f} {p8:8.1f} {p1:8.1f} {kv_bytes / e / 1e6:11.2f} {kv_bytes / p8 / 1e6:12.2f}")
    print("\nblock medians (eval8):")
    for name in calls:
        print(f"  {name:44s} " + " ".join(f"{t:7.1f}" for t in times[name, "eval8"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
