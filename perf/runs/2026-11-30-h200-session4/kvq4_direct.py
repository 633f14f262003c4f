"""kvq4 on the direct attention body (body="direct") against the seed body and dequantize + SDPA, at the
H200 shapes; then the direct body's partition (block) and rows-per-threadgroup (MAX_ROWS) choices.
ms per call, 8 calls per eval, median of 15 rounds. Every direct variant is checked first against
the seed body's output (both are float32 computations of the same attention: max |diff| < 0.03 in bf16)."""
import mlx.core as mx

import impl.kvq4_decode as kvq4
import impl.paged_attention as paged
from perf.cases import kvq4_group
from perf.harness import batched, time_call
from perf.shapes import DecodeShape


def ms(call, batch=8, rounds=15):
    r = sorted(x / batch for x in time_call(batched(call, "mlx", batch), rounds=rounds, warmup=2))
    return r[len(r) // 2] * 1e3


def forget():
    """Drop every cached launch shape and trace (MAX_ROWS is read when a shape is first built)."""
    paged._partial_shape.cache_clear()
    kvq4._compiled_direct.cache_clear()


for shape in (DecodeShape(16, 8, 1, 256, 131072), DecodeShape(32, 8, 1, 256, 32768), DecodeShape(8, 1, 1, 256, 32768)):
    group = kvq4_group(shape, ["cuda"])
    x = group.inputs()
    scale = 256 ** -0.5
    control = None
    for case in group.cases:
        if case.arm != "cuda":
            t = ms(case.build())
            if case.kernel == "dequantize_sdpa":
                control = t
            print(f"kvq4 {shape} {case.benchmark}/{case.kernel}[{case.arm}]: {t:.4f} ms", flush=True)
    seed = kvq4.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, body="seed", arm="cuda")
    print(f"kvq4 {shape} seed body [cuda] block=512: {ms(lambda: kvq4.kvq4_decode(x['q'], x['keys'], x['values'], scale=scale, body='seed', arm='cuda')):.4f} ms", flush=True)
    for rows in (4, 2):
        paged.MAX_ROWS = rows
        forget()
        for block in (None, 64, 128, 256, 512, 1024):
            call = lambda: kvq4.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, block=block, arm="cuda")
            err = mx.abs(call().astype(mx.float32) - seed.astype(mx.float32)).max().item()
            t = ms(call)
            print(f"kvq4 {shape} direct [cuda] MAX_ROWS={rows} block={block}: {t:.4f} ms, "
                  f"{control / t:.2f}x dequantize+SDPA; max|direct - seed| {err:.2e} ({'ok' if err < 0.03 else 'BAD'})",
                  flush=True)
    paged.MAX_ROWS = 4
    forget()
    group.release()
