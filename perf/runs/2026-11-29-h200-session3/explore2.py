"""Call 2: quantized paged pools after the lane change (a lane owns part of a word at D128 KV4), and
kvq4's block size (the seed's 512 against 64..256) at the H200 shapes. ms per call, 8 calls per eval."""
import mlx.core as mx

import impl.kvq4_decode as kvq4
import impl.paged_attention as paged
from perf.cases import kvq4_group, paged_group
from perf.harness import batched, time_call
from perf.shapes import DecodeShape


def ms(call, batch=8, rounds=15):
    r = sorted(x / batch for x in time_call(batched(call, "mlx", batch), rounds=rounds, warmup=2))
    return r[len(r) // 2] * 1e3


for shape in (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)):
    for bits in (4, 8):
        group = paged_group(shape, ["cuda"], bits=bits)
        x = group.inputs()
        scale = shape.head_dim ** -0.5
        want = paged.paged_attention_gather(x["q"], x["storage"], x["table"], shape.length, scale=scale)
        for case in group.cases:
            call = case.build()
            extra = ""
            if case.arm == "cuda":
                err = mx.abs(call().astype(mx.float32) - want.astype(mx.float32)).max().item()
                extra = f" maxdiff vs gather control {err:.2e} ({'ok' if err < 0.03 else 'BAD'})"
            print(f"{shape} q{bits} {case.kernel}[{case.arm}]: {ms(call):.4f} ms{extra}", flush=True)
        group.release()

for shape in (DecodeShape(16, 8, 1, 256, 131072), DecodeShape(32, 8, 1, 256, 32768), DecodeShape(8, 1, 1, 256, 32768)):
    group = kvq4_group(shape, ["cuda"])
    x = group.inputs()
    for case in group.cases:
        if case.arm != "cuda":
            print(f"kvq4 {shape} {case.benchmark}/{case.kernel}[{case.arm}]: {ms(case.build()):.4f} ms", flush=True)
    cuda = next(c for c in group.cases if c.arm == "cuda")
    call = cuda.build()
    for block in (64, 128, 256, 512):
        kvq4.KV4_DECODE_BLOCK = block
        kvq4.kvq4_decode.__kwdefaults__["block"] = block  # the default is bound at definition
        print(f"kvq4 {shape} kvq4_decode[cuda] block={block}: {ms(call):.4f} ms", flush=True)
    kvq4.kvq4_decode.__kwdefaults__["block"] = 512
    group.release()
