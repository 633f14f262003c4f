"""Call B: (1) kvq4 after the scale fix (the direct body's per-call .item() on the GPU stream removed):
direct (block None / 256 / 512) against the seed body and dequantize + SDPA; (2) the paged partial's
tokens per batch (BATCH_TOKENS 8 / 16) now that the wide loads freed registers; (3) how much of a call
is host and per-eval overhead: each paged / SDPA call timed three ways, ms per call:
  eval8     8 calls then one mx.eval (perf's protocol, host Python included),
  eval32    32 calls then one mx.eval (the per-eval overhead shared 4x more),
  pipelined 8 calls, mx.async_eval, then wait for the PREVIOUS batch: the host builds batch r+1 while
            the device runs batch r (how a decoder overlaps its steps), so a call costs max(host, device)."""
import time

import mlx.core as mx

import impl.kvq4_decode as kvq4
import impl.paged_attention as paged
from impl.block_table import BlockTable
from perf.cases import kvq4_group, paged_group
from perf.harness import batched, time_call
from perf.shapes import DecodeShape


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


print("== (1) kvq4", flush=True)
for shape in (DecodeShape(16, 8, 1, 256, 131072), DecodeShape(32, 8, 1, 256, 32768), DecodeShape(8, 1, 1, 256, 32768)):
    group = kvq4_group(shape, ["cuda"])
    x = group.inputs()
    scale = 256 ** -0.5
    control = None
    for case in group.cases:
        if case.arm != "cuda":
            t = ms(case.build())
            control = t if case.kernel == "dequantize_sdpa" else control
            print(f"kvq4 {shape} {case.benchmark}/{case.kernel}[{case.arm}]: {t:.4f} ms", flush=True)
    seed = kvq4.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, body="seed", arm="cuda")
    t = ms(lambda: kvq4.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, body="seed", arm="cuda"))
    print(f"kvq4 {shape} seed body [cuda] block=512: {t:.4f} ms, {control / t:.2f}x", flush=True)
    for block in (None, 256, 512):
        call = lambda: kvq4.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, block=block, arm="cuda")
        err = mx.abs(call().astype(mx.float32) - seed.astype(mx.float32)).max().item()
        t = ms(call)
        print(f"kvq4 {shape} direct [cuda] block={block}: {t:.4f} ms, {control / t:.2f}x dequantize+SDPA "
              f"(pipelined {pipelined(call):.4f} ms); max|direct - seed| {err:.2e} ({'ok' if err < 0.03 else 'BAD'})",
              flush=True)
    group.release()

print("== (2) paged BATCH_TOKENS, (3) protocols", flush=True)
for shape in (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)):
    group = paged_group(shape, ["cuda"])
    x = group.inputs()
    scale = shape.head_dim ** -0.5
    table = x["table"] if isinstance(x["table"], BlockTable) else BlockTable.of(x["table"])
    mbytes = 2 * shape.hkv * shape.length * shape.head_dim * 2 / 1e6
    want = paged.paged_attention_gather(x["q"], x["storage"], table, shape.length, scale=scale)
    sdpa = lambda: mx.fast.scaled_dot_product_attention(x["q"], x["k"], x["v"], scale=scale)
    print(f"{shape}: MLX SDPA eval8 {ms(sdpa):.4f} eval32 {ms(sdpa, 32, 8):.4f} pipelined {pipelined(sdpa):.4f} ms "
          f"({mbytes:.0f} MB of K+V)", flush=True)
    for tb in (8, 16):
        paged.BATCH_TOKENS = tb
        paged._partial_shape.cache_clear()
        paged._plan.cache_clear()
        call = lambda: paged.paged_attention(x["q"], x["storage"], table, shape.length, scale=scale, arm="cuda")
        err = mx.abs(call().astype(mx.float32) - want.astype(mx.float32)).max().item()
        e8, e32, pl = ms(call), ms(call, 32, 8), pipelined(call)
        print(f"{shape}: paged TB={tb} eval8 {e8:.4f} ({mbytes / e8 / 1e3:.2f} TB/s) eval32 {e32:.4f} "
              f"pipelined {pl:.4f} ms ({mbytes / pl / 1e3:.2f} TB/s); max|paged - gather| {err:.2e} "
              f"({'ok' if err < 0.03 else 'BAD'})", flush=True)
    paged.BATCH_TOKENS = 8
    paged._partial_shape.cache_clear()
    paged._plan.cache_clear()
    group.release()
