"""Session 8, call G1: multi-query's split merge, committed body (A) against a one-pass candidate (B), on the H200.

A: a threadgroup per (query vector, 32 dims), 8 slices of the splits; pass 1 the slices' maxima, a barrier, the
row's max, pass 2 the weighted sums, a barrier, the slices added (two dependent memory round trips).
B: a threadgroup per (query vector, 128 dims); lane x owns 4 dims (one 16-byte load per split), SIMD group `slice`
the splits slice, slice + 8, ... in one pass with a running max (a split's weight against the running max, the
sums rescaled when it grows), so a slice's loads go out together; the slices combine in threadgroup memory,
rescaled to their common max. Same sums up to float32 rounding (more rescales).

Per shape (multi-query 32/8/L8/D128 and 16/8/L8/D256 at N 32768; kvq4's seed body at 8/1/N32k uses this merge
with one query row), in one process, A and B interleaved round by round: the merge alone (8 per eval, and
pipelined), the whole call (partial + merge as one mx.compile'd function; eval8 and pipelined), and max |B - A| /
max |A| of the outputs.
"""
import math
import statistics
import sys
import time

import mlx.core as mx

import impl.multi_query as mq
from impl.kernels import KernelSpec, Launch

SOURCE_B = """
  const uint x = thread_position_in_threadgroup.x, slice = thread_position_in_threadgroup.y;
  const uint d = (threadgroup_position_in_grid.x * 32u + x) * 4u;  // this lane's 4 dims
  const uint qv = threadgroup_position_in_grid.y;
  const uint splits = (uint)mpart_shape[0];
  const ulong stride = (ulong)(KVH * NQ);
  const bool live = d < (uint)D;
  threadgroup float tops[8], dens[8], nums[8][128];
  float top = -INFINITY, den = 0.0f, num[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  UNROLL_BY_8
  for (uint s = slice; s < splits; s += 8u) {
    const ulong b = (ulong)s * stride + qv;
    const float ms = mpart[b], ls = lpart[b];
    // (a lane past D reads dims 0..3 and never writes: the loads stay unconditional)
    const float4 os = float4(*(const DEVICE_MEM metal::vec<float, 4>*)(opart + b * (uint)D + (live ? d : 0u)));
    if (ms == -INFINITY) continue;  // no key of the split visible to the row: weight 0
    const float next = metal::max(top, ms);
    const float c = metal::exp(top - next), w = metal::exp(ms - next);  // top = -inf: c = 0
    num[0] = num[0] * c + w * os.x;
    num[1] = num[1] * c + w * os.y;
    num[2] = num[2] * c + w * os.z;
    num[3] = num[3] * c + w * os.w;
    den = den * c + w * ls;
    top = next;
  }
  for (uint e = 0; e < 4u; ++e) nums[slice][4u * x + e] = num[e];
  if (x == 0u) { tops[slice] = top; dens[slice] = den; }
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  if (slice == 0u && live) {
    float gtop = -INFINITY;
    for (uint i = 0; i < 8u; ++i) gtop = metal::max(gtop, tops[i]);
    float total[4] = {0.0f, 0.0f, 0.0f, 0.0f}, weight = 0.0f;
    for (uint i = 0; i < 8u; ++i) {
      if (tops[i] == -INFINITY) continue;
      const float c = metal::exp(tops[i] - gtop);
      weight += c * dens[i];
      for (uint e = 0; e < 4u; ++e) total[e] += c * nums[i][4u * x + e];
    }
    const uint hk = qv / (uint)NQ, row = qv % (uint)NQ, rr = row / (uint)L, qi = row % (uint)L;
    const ulong o0 = ((ulong)(hk * (uint)REP + rr) * (uint)L + qi) * (uint)D + d;
    for (uint e = 0; e < 4u; ++e) out[o0 + e] = T(total[e] / weight);
  }
"""
MERGE_B = KernelSpec("multi_query_merge_probe_b", ("opart", "mpart", "lpart"), ("out",), SOURCE_B)


def merge_b(opart, mpart, lpart, dtype, heads, rows):
    _, kvh, nq, d = opart.shape
    template = (("T", dtype), ("L", rows), ("D", d), ("KVH", kvh), ("REP", heads // kvh), ("NQ", nq))
    return Launch(MERGE_B, (opart, mpart, lpart), template, grid=(-(-d // 128) * 32, kvh * nq * 8, 1),
                  threadgroup=(32, 8, 1), output_shapes=((1, heads, rows, d),), output_dtypes=(dtype,)).run("cuda")


def eval8(launch, rounds):
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        mx.eval([launch() for _ in range(8)])
        samples.append(time.perf_counter() - start)
    return samples


def pipelined(launch, rounds):
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        outs = [launch() for _ in range(8)]
        mx.async_eval(outs)
        if previous is not None:
            mx.eval(previous)
        previous = outs
    mx.eval(previous)
    return [(time.perf_counter() - start) / rounds]


def interleaved(name, a, b, rounds=12, blocks=8):
    """A and B alternating, `blocks` blocks of `rounds` rounds each protocol; us per call (median of blocks)."""
    for f in (a, b):
        for _ in range(3):
            mx.eval([f() for _ in range(8)])
    res = {("A", "eval8"): [], ("B", "eval8"): [], ("A", "pipelined"): [], ("B", "pipelined"): []}
    for _ in range(blocks):
        for tag, f in (("A", a), ("B", b)):
            res[(tag, "eval8")].append(statistics.median(eval8(f, rounds)) / 8 * 1e6)
            res[(tag, "pipelined")].append(pipelined(f, rounds)[0] / 8 * 1e6)
    line = "  ".join(f"{t} {p} {statistics.median(v):7.1f} (min {min(v):6.1f})" for (t, p), v in res.items())
    print(f"{name:34s} {line}", flush=True)


def mq_shape(h, kvh, L, d, n):
    q = mx.random.normal((1, h, L, d)).astype(mx.bfloat16)
    k = mx.random.normal((1, kvh, n, d)).astype(mx.bfloat16)
    v = mx.random.normal((1, kvh, n, d)).astype(mx.bfloat16)
    scale = 1 / math.sqrt(d)
    s_t = mq._scale_array(scale, q.dtype)
    mx.eval(q, k, v, s_t)
    splits = mq.default_splits(n, kvh)
    stages = mq.pipeline_stages(h // kvh * L, d, "cuda")
    parts = mq.partial_launch(q, k, v, s_t, splits, stages).run("cuda")
    mx.eval(parts)
    merge_a = lambda: mq.merge_launch(*parts, q.dtype, h, L).run("cuda")[0]
    merge_bb = lambda: merge_b(*parts, q.dtype, h, L)[0]
    out_a, out_b = merge_a(), merge_bb()
    err = (mx.abs(out_b.astype(mx.float32) - out_a.astype(mx.float32)).max() /
           mx.abs(out_a.astype(mx.float32)).max()).item()
    exact = mx.array_equal(out_a, out_b).item()

    def call(merge):
        def f(q, k, v):
            o, m, l = mq.partial_launch(q, k, v, s_t, splits, stages).run("cuda")
            return merge(o, m, l, q.dtype, h, L)
        return mx.compile(f)

    call_a = call(lambda *a: mq.merge_launch(*a).run("cuda")[0])
    call_b = call(lambda *a: merge_b(*a)[0])
    tag = f"{h}/{kvh}/L{L}/D{d}/N{n} splits {splits}"
    print(f"\n## {tag}: max|B-A|/max|A| = {err:.3g}, bit-identical: {exact}", flush=True)
    interleaved("merge alone", merge_a, merge_bb)
    interleaved("partial + merge", lambda: call_a(q, k, v), lambda: call_b(q, k, v))
    if splits >= 64:
        half = splits // 2
        interleaved(f"public: splits {splits} (A) vs {half} (B)",
                    lambda: mq.multi_query_causal(q, k, v, scale=scale, arm="cuda"),
                    lambda: mq.multi_query_causal(q, k, v, scale=scale, splits=half, arm="cuda"))
    interleaved("partial alone", lambda: mq.partial_launch(q, k, v, s_t, splits, stages).run("cuda")[0],
                lambda: mq.partial_launch(q, k, v, s_t, splits, stages).run("cuda")[0])


def main():
    print(mx.default_device(), mx.__version__)
    for shape in ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768), (32, 8, 8, 128, 131072), (8, 1, 1, 128, 32768)):
        mq_shape(*shape)


if __name__ == "__main__":
    sys.exit(main())
