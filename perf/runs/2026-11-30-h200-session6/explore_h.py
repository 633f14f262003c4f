"""Session 6, call E4: multi-query as in call E3 plus 16x8x16 tensor-core products for two tiles (S over dims-block
pairs, P.V over key-fragment pairs) and the CUDA bfloat16 4-vector load by shifts and masks. Checks: one stage and
two bit-identical; one-tile shapes (no paired product) bit-identical to the committed module (mq_before.py); two-tile
shapes within a few half ULPs of it (the hardware adds 16 products before the accumulator instead of 8). Then ms per
call: the committed module, this tree with the pairs spelled as two 8-deep products (K8: call E3's kernel plus the
load), and this tree."""
import dataclasses
import importlib.util
import math
import pathlib
import time

import mlx.core as mx

import impl.multi_query as mq
from perf.harness import batched, time_call

spec = importlib.util.spec_from_file_location("mq_before", pathlib.Path(__file__).with_name("mq_before.py"))
before = importlib.util.module_from_spec(spec)
spec.loader.exec_module(before)
TREE = mq.PARTIAL
K8 = dataclasses.replace(TREE, name="multi_query_partial_k8", source=(
    "#define simdgroup_multiply_accumulate_rows16_k16(d0, d1, a0, a1, a2, a3, b0, b1) do { "
    "simdgroup_multiply_accumulate_rows16(d0, d1, a0, a1, b0); simdgroup_multiply_accumulate_rows16(d0, d1, a2, a3, b1); "
    "} while (0)\n" + TREE.source))


def use(spec_):
    mq.PARTIAL = spec_
    mq._compiled_call.cache_clear()


def ms(call, batch=8, rounds=15):
    r = sorted(x / batch for x in time_call(batched(call, "mlx", batch), rounds=rounds, warmup=2))
    return r[len(r) // 2] * 1e3


def pipelined(call, batch=8, rounds=40):
    for _ in range(3):
        mx.eval([call() for _ in range(batch)])
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        outs = [call() for _ in range(batch)]
        mx.async_eval(outs)
        if previous is not None:
            mx.eval(previous)
        previous = outs
    mx.eval(previous)
    return (time.perf_counter() - start) / (rounds * batch) * 1e3


def views(kvh, n, d, layout, dtype):
    if layout == "contiguous":
        return [mx.random.normal((1, kvh, n, d)).astype(dtype) for _ in range(2)]
    if layout == "sliced":
        return [mx.random.normal((1, kvh + 1, n + 37, d)).astype(dtype)[:, 1:, :n] for _ in range(2)]
    if layout == "heads":
        return [mx.random.normal((1, n, kvh, d)).astype(dtype).transpose(0, 2, 1, 3) for _ in range(2)]
    return [mx.random.normal((1, kvh, d, n)).astype(dtype).transpose(0, 1, 3, 2) for _ in range(2)]


ok = True
mx.random.seed(1)
for (h, kvh, L, d, n, splits, layout, dtype) in (
        (32, 8, 8, 128, 5000, None, "contiguous", mx.bfloat16), (32, 8, 8, 128, 4099, 7, "sliced", mx.bfloat16),
        (16, 8, 8, 256, 3000, None, "contiguous", mx.bfloat16), (64, 8, 8, 128, 2000, 5, "heads", mx.float16),
        (8, 2, 1, 64, 40, None, "contiguous", mx.float32), (12, 2, 3, 80, 1000, 37, "strided", mx.bfloat16),
        (6, 1, 4, 256, 257, None, "heads", mx.bfloat16), (40, 4, 5, 72, 300, 37, "contiguous", mx.bfloat16),
        (32, 8, 4, 128, 777, 100, "sliced", mx.float32), (64, 8, 8, 256, 600, None, "contiguous", mx.bfloat16),
        (4, 2, 8, 64, 8, None, "contiguous", mx.bfloat16), (2, 1, 2, 256, 300, 3, "strided", mx.float16)):
    q = (0.5 * mx.random.normal((1, h, L, d))).astype(dtype)
    k, v = views(kvh, n, d, layout, dtype)
    scale = 1 / math.sqrt(d)
    want = before.multi_query_causal(q, k, v, scale=scale, splits=splits, arm="cuda").astype(mx.float32)
    nq = h // kvh * L
    outs = []
    for stages in ((1, 2) if mq.pipeline_stages(nq, d, "cuda") == 2 else (1, 1)):
        part = mq.partial_launch(mx.contiguous(q), k, v, mx.array([scale], dtype=dtype),
                                 splits or mq.default_splits(n, kvh), stages)
        o, m_, l_ = part.run("cuda")
        outs.append(mq.merge_launch(o, m_, l_, dtype, h, L).run("cuda")[0].astype(mx.float32))
    stages_same = bool(mx.array_equal(outs[0], outs[1], equal_nan=True).item())
    paired = mq.tiles_per_simdgroup(nq, d) == 2
    same = bool(mx.array_equal(outs[1], want, equal_nan=True).item())
    rel = (mx.abs(outs[1] - want).max() / mx.abs(want).max()).item()
    good = stages_same and (same or (paired and rel < 4 * 2.0 ** -10))
    ok &= good
    print(f"H{h} KVH{kvh} L{L} D{d} N{n} splits={splits} {layout} {dtype}: two tiles {paired}; one stage == two "
          f"{stages_same}; vs the committed kernel: identical {same}, max |diff| / max |out| {rel:.3g} -> "
          f"{'ok' if good else 'BAD'}", flush=True)
print("ALL OK" if ok else "MISMATCH", flush=True)
for hq, hkv, L, d, n in ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768), (64, 8, 8, 128, 32768),
                         (32, 8, 4, 128, 32768)):
    mx.random.seed(0)
    q, k, v = ((0.5 * mx.random.normal(s)).astype(mx.bfloat16) for s in ((1, hq, L, d), (1, hkv, n, d), (1, hkv, n, d)))
    mx.eval(q, k, v)
    scale = 1.0 / math.sqrt(d)
    rows = lambda: [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - L + i + 1],
                                                         v[:, :, :n - L + i + 1], scale=scale) for i in range(L)]
    print(f"{hq}/{hkv}/L{L}/D{d}/N{n} bf16: sdpa_rows eval8 {ms(rows):.4f} ms, pipelined {pipelined(rows):.4f}",
          flush=True)
    for rnd in range(2):
        for name, mod, sp in (("before", before, None), ("K8", mq, K8), ("now", mq, TREE)):
            if sp is not None:
                use(sp)
            call = lambda: mod.multi_query_causal(q, k, v, scale=scale, arm="cuda")
            print(f"  {name:6s} eval8 {ms(call):.4f} ms, pipelined {pipelined(call):.4f} ms", flush=True)
    use(TREE)
