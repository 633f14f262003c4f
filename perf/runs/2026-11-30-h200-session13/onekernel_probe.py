"""Session 13, call U1: can a call of ours be ONE kernel, its merge done by each KV head's last threadgroup?

The ninth pass (session 9, call H1, sol_probe.py) measured a call's fixed cost at 32/8/L8/D128/N32k: two empty
kernels (partial + merge) 25.6 us per call in eval8, one empty kernel 8.3. It ruled a one-kernel call out because a
last-threadgroup merge needs a counter at zero in every call, and MLX's custom kernels zero an output only through
``init_value``, which fills EVERY output (here: the partial scratch too). MLX fills them inside the kernel's own
primitive (``CustomKernel::eval_gpu``: ``fill_gpu`` per output), so no graph node is added: what does that cost?

Stand-ins at multi-query's real grid (32 splits x 8 KV heads, 128 threads), interleaved with the real call and its
control (perf.interleaved; 8 input sets taken in turn; us per call):

* ``empty2``: an empty partial writing its outputs, then multi-query's real merge (sol_probe's empty2);
* ``empty1``: one empty kernel writing the output (sol_probe's empty1);
* ``empty1_init``: one empty kernel with ``init_value=0`` on [out, work] (work: the partials' scratch, 4.2 MB, and
  the KV heads' counters), each threadgroup writing its partial, counting itself in, and the last of each KV head
  merging (the whole one-kernel protocol, no K/V read);
* ``empty1_init_tiny``: the same fill of [out, a 256-word work] with no partial written: the fill's fixed cost;
* ``stream2``: the partial streams the head's K/V (as sol_probe), then the real merge;
* ``stream1_last``: the same stream, then the one-kernel protocol (init_value=0, last threadgroup merges);
* ``stream1``: one kernel that streams and writes only the output (sol_probe's stream1: no merge at all).
"""
import math
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.interleaved import in_turn, interleaved, ratios, table
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
# work (float32, zero-filled by init_value): [COUNTERS words: one counter per KV head, as uint bits]
# [o: splits x KVH x NQ x D] [m, l: splits x KVH x NQ x 2]. The CUDA threadFenceReduction pattern: write, fence,
# count in; the threadgroup that counts last fences again and reads every split's partial from L2 (__ldcg).
LAST_MERGE = """
  constexpr int COUNTERS = 64;
  float* o = work + COUNTERS;
  float* ml = o + (size_t)splits * KVH * NQ * D;
  const size_t base = ((size_t)split * KVH + hk) * NQ;
  if (WRITE) {
    for (int i = tid; i < NQ * D; i += THREADS) o[base * D + i] = mark;
    for (int i = tid; i < NQ; i += THREADS) { ml[(base + i) * 2] = 0.0f; ml[(base + i) * 2 + 1] = 1.0f; }
    __threadfence();
    __shared__ bool last;
    __syncthreads();
    if (tid == 0) last = atomicAdd(reinterpret_cast<unsigned*>(work) + hk, 1u) == (unsigned)(splits - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    // Lane group of 4 dims: each thread owns quads (query vector, 4 dims), one online pass over the splits.
    for (int e = tid; e < NQ * (D / 4); e += THREADS) {
      const int qv = e / (D / 4), d4 = e % (D / 4);
      float mx_ = -INFINITY, l = 0.0f;
      float4 acc4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
      for (int s = 0; s < splits; ++s) {
        const size_t b = ((size_t)s * KVH + hk) * NQ + qv;
        const float2 m_l = __ldcg(reinterpret_cast<const float2*>(ml) + b);
        const float4 x = __ldcg(reinterpret_cast<const float4*>(o + b * D) + d4);
        const float nm = fmaxf(mx_, m_l.x), a = __expf(mx_ - nm), w = __expf(m_l.x - nm);
        acc4.x = acc4.x * a + w * x.x; acc4.y = acc4.y * a + w * x.y;
        acc4.z = acc4.z * a + w * x.z; acc4.w = acc4.w * a + w * x.w;
        l = l * a + w * m_l.y;
        mx_ = nm;
      }
      T* op = out + ((size_t)hk * NQ + qv) * D + 4 * d4;
      op[0] = T(acc4.x / l); op[1] = T(acc4.y / l); op[2] = T(acc4.z / l); op[3] = T(acc4.w / l);
    }
  }
"""
UNROLL = 4
THREADS = 128


def stand_ins(shape):
    """name -> compiled call (q, k, v) of the stand-ins at multi-query's real grid for ``shape``."""
    h, kvh, L, d = shape.hq, shape.hkv, shape.rows, shape.head_dim
    nq = h // kvh * L
    splits = mq.default_splits(shape.length, kvh)
    partial_kernel = mx.fast.cuda_kernel(name="u1_stream_partial", input_names=["q", "k", "v"],
                                         output_names=["opart", "mpart", "lpart"], source=STREAM + PARTIAL_OUT)
    fused_kernel = mx.fast.cuda_kernel(name="u1_stream_fused", input_names=["q", "k", "v"], output_names=["out"],
                                       source=STREAM + FUSED_OUT)
    last_kernel = mx.fast.cuda_kernel(name="u1_stream_last", input_names=["q", "k", "v"], output_names=["out", "work"],
                                      source=STREAM + LAST_MERGE)
    work_words = 64 + splits * kvh * nq * (d + 2)

    def template(read, write=True):
        return [("T", mx.bfloat16), ("D", d), ("KVH", kvh), ("NQ", nq), ("THREADS", THREADS), ("UNROLL", UNROLL),
                ("READ", int(read)), ("WRITE", int(write))]

    grid, tg = (THREADS * splits, kvh, 1), (THREADS, 1, 1)

    def two(read):
        def call(q, k, v):
            opart, mpart, lpart = partial_kernel(
                inputs=[q, k, v], template=template(read), grid=grid, threadgroup=tg,
                output_shapes=[(splits, kvh, nq, d), (splits, kvh, nq), (splits, kvh, nq)],
                output_dtypes=[mx.float32] * 3)
            return mq.merge_launch(opart, mpart, lpart, q.dtype, h, L).run("cuda")[0]
        return mx.compile(call)

    def one(read):
        def call(q, k, v):
            return fused_kernel(inputs=[q, k, v], template=template(read), grid=grid, threadgroup=tg,
                                output_shapes=[(1, h, L, d)], output_dtypes=[q.dtype])[0]
        return mx.compile(call)

    def last(read, write=True, words=work_words):
        def call(q, k, v):
            return last_kernel(inputs=[q, k, v], template=template(read, write), grid=grid, threadgroup=tg,
                               output_shapes=[(1, h, L, d), (words,)], output_dtypes=[q.dtype, mx.float32],
                               init_value=0.0)[0]
        return mx.compile(call)

    return {"empty2": two(False), "empty1": one(False), "empty1_init": last(False),
            "empty1_init_tiny": last(False, write=False, words=256),
            "stream2": two(True), "stream1_last": last(True), "stream1": one(True)}


def check_last_merge(shape, sets):
    """The one-kernel protocol's merge must see every split: with mark 1 everywhere and m = 0, l = 1, each output
    is (sum of splits x 1) / (splits x 1) = 1 exactly; a lost split or a merge before the last one gives other
    values or garbage. Run 50 times on each set (a race would show as a rare wrong value)."""
    f = stand_ins(shape)["stream1_last"]
    bad = 0
    for _ in range(50):
        for x in sets:
            out = f(x["q"], x["k"], x["v"])
            bad += int((out.astype(mx.float32) != 1.0).sum().item())
    print(f"stream1_last merge check: {bad} wrong outputs in {50 * len(sets)} calls")
    return bad


def main(blocks=5, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    shape = DecodeShape(32, 8, 8, 128, 32768)
    group = multi_query_group(shape, ["cuda"], copies=8)
    sets = group.inputs()
    bad = check_last_merge(shape, sets)
    scale = 1 / math.sqrt(shape.head_dim)
    calls = {"multi_query_causal": in_turn(sets, lambda x: mq.multi_query_causal(x["q"], x["k"], x["v"], scale=scale,
                                                                                 arm="cuda"))}
    for name, f in stand_ins(shape).items():
        calls[name] = in_turn(sets, lambda x, f=f: f(x["q"], x["k"], x["v"]))
    (control,) = [c for c in group.cases if c.kernel == "sdpa_rows"]
    calls["sdpa_rows (control)"] = control.build()
    results = interleaved(calls, blocks=blocks, rounds=rounds)
    print(f"\n## {shape}")
    print(table(results))
    print(ratios(results, "sdpa_rows (control)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(*map(int, sys.argv[1:])))
