"""Session 6, call E1: the launch-geometry knobs that exist today, timed on the H200 (eval8, perf's protocol, and
pipelined, about the GPU time), plus two quantized-load variants of the paged affine body, each compared with the
committed kernel's output first:

* multi-query: key splits (the grid fills 1.29 waves at the default 64 splits: ncu, call C3);
* paged bf16 and KV4 / KV8 at 32/8/D128/N32k: tokens per partition (the default gives 8 batches per SIMD group);
* KV4 D128: MAGIC (a 4/8-bit code to float as bits(0x4B000000 | code) - 2^23, exact, instead of an int-to-float
  conversion: bit-identical by construction), LPR16 (16 lanes per row, a lane a whole packed word: two tokens per
  load instruction), and both."""
import dataclasses
import math
import sys
import time

import mlx.core as mx

import impl.multi_query as mq
import impl.paged_attention as pa
from perf.cases import multi_query_group, paged_group
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


def line(label, call, nbytes):
    e8, pl = ms(call), pipelined(call)
    print(f"  {label:34s} eval8 {e8:.4f} ms  pipelined {pl:.4f} ms ({nbytes / pl / 1e9:.2f} TB/s)", flush=True)


def case(group, kernel):
    return next(c for c in group.cases if c.kernel == kernel)


MAGIC_AFFINE_LOAD = pa.AFFINE_LOAD.replace(
    "float((word >> (e * BITS)) & ((1u << BITS) - 1u))",
    "(paged_bits_to_float(0x4B000000u | ((word >> (e * BITS)) & ((1u << BITS) - 1u))) - 8388608.0f)")
assert MAGIC_AFFINE_LOAD != pa.AFFINE_LOAD
MAGIC = {"LOAD_KEY": MAGIC_AFFINE_LOAD.format(plane="keys", scales="ks", biases="kb", dest="kx", lanes="VK", width="DK"),
         "LOAD_VALUE": MAGIC_AFFINE_LOAD.format(plane="values", scales="vs", biases="vb", dest="vx", lanes="VV",
                                                width="DV")}
TREE_AFFINE, TREE_LANES = pa.QUANTIZED_PARTIAL, pa._lane_map


def affine(magic: bool, lpr16: bool):
    pa.QUANTIZED_PARTIAL = (dataclasses.replace(TREE_AFFINE, name="paged_attention_affine_partial_magic",
                                                source=pa._with_loads(MAGIC)) if magic else TREE_AFFINE)
    pa._lane_map = ((lambda dk, dv, dtype, bits: pa._LaneMap(16, 8, 8) if bits == 4 and dk == dv == 128
                     else TREE_LANES(dk, dv, dtype, bits)) if lpr16 else TREE_LANES)
    for cached in (pa._partial_shape, pa._plan, pa._compiled_pair):
        cached.cache_clear()


which = sys.argv[1:] or ["mq", "paged", "q4", "q8"]
if "mq" in which:
    for shape, sweep in ((DecodeShape(32, 8, 8, 128, 32768), (32, 40, 44, 48, 56, 64, 80, 96, 128)),
                         (DecodeShape(16, 8, 8, 256, 32768), (32, 33, 48, 64, 66, 96, 128)),
                         (DecodeShape(32, 8, 4, 128, 32768), (32, 44, 48, 64, 96, 128))):
        g = multi_query_group(shape, ["cuda"])
        x = g.inputs()
        q, k, v = x["q"], x["k"], x["v"]
        scale = 1 / math.sqrt(shape.head_dim)
        print(f"multi-query {shape} (default splits {mq.default_splits(shape.length, shape.hkv)})", flush=True)
        line("sdpa_rows (control)", case(g, "sdpa_rows").build(), 2 * k.nbytes)
        for splits in sweep:
            line(f"splits {splits}", lambda: mq.multi_query_causal(q, k, v, scale=scale, splits=splits, arm="cuda"),
                 2 * k.nbytes)
        g.release()
for bits, tag in ((None, "paged"), (4, "q4"), (8, "q8")):
    if tag not in which:
        continue
    shape = DecodeShape(32, 8, 1, 128, 32768)
    g = paged_group(shape, ["cuda"], bits=bits, dense=False)
    x = g.inputs()
    st, table, q = x["storage"], x["table"], x["q"]
    scale = 1 / math.sqrt(shape.head_dim)
    nbytes = case(g, "paged_attention").bytes
    print(f"paged {tag} {shape} (default partition {pa.partition_span(q, st, shape.length, None)})", flush=True)
    control = [c for c in g.cases if c.kernel != "paged_attention"][0]
    line(f"{control.kernel} (control)", control.build(), nbytes)
    variants = [(False, False)] + ([(True, False), (False, True), (True, True)] if bits == 4 else [])
    want = None
    for magic, lpr16 in variants:
        affine(magic, lpr16)
        for partition in (None, 128, 192, 256, 384, 512, 1024):
            call = lambda: pa.paged_attention(q, st, table, shape.length, scale=scale, partition=partition, arm="cuda")
            out = call().astype(mx.float32)
            if want is None:
                want = out
            diff = mx.abs(out - want).max().item()
            label = f"magic={int(magic)} lpr16={int(lpr16)} partition={partition}"
            print(f"  {label}: max |diff| vs the tree's default {diff:.3g}, identical {bool(mx.array_equal(out, want).item())}")
            line(label, call, nbytes)
    affine(False, False)
    g.release()
