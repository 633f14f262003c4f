"""Issue 10, third H200 session: the paged kernel's launch knobs after the host-path work.

For each shape and variant (TB tokens per batch, MAX_ROWS rows per threadgroup, TARGET threadgroups):
a correctness check against the gather control (max |diff| over the output; bf16: must stay under
0.03, 4x bf16's eps at |out| <= 1, else the line says BAD and the variant is out), then ms per call
with 8 calls per eval (the suite's method, host cost included) and with 32 per eval (the GPU time
shows through). Then the controls (MLX SDPA on contiguous K/V, gather controls), the per-call host
cost of the default configuration, and kvq4 / argmax after their host-path changes.
"""
import itertools
import sys
import time

import mlx.core as mx
import numpy as np

import impl.paged_attention as paged
from impl.block_table import BlockTable
from perf.cases import argmax_group, kvq4_group, paged_group
from perf.harness import batched, time_call
from perf.shapes import ArgmaxShape, DecodeShape

import os

P1, P2 = DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)
ARM = os.environ.get("ARM", "cuda")  # ARM=graph SMOKE=1: a quick local check of this script on a CPU
if os.environ.get("SMOKE"):
    P1, P2 = DecodeShape(32, 8, 1, 128, 1024), DecodeShape(16, 8, 1, 256, 1024)
WHICH = sys.argv[1:] or ["plain", "quant", "controls", "kvq4", "argmax"]


def ms(call, batch, rounds=15):
    r = sorted(x / batch for x in time_call(batched(call, "mlx", batch), rounds=rounds, warmup=2))
    return r[len(r) // 2] * 1e3


def configure(tb, rows, target):
    paged.BATCH_TOKENS, paged.MAX_ROWS, paged.TARGET_THREADGROUPS = tb, rows, target
    paged._plan.cache_clear()
    paged._partial_shape.cache_clear()


def inputs(shape, bits):
    group = paged_group(shape, [ARM], bits=bits, dense=True)
    x = group.inputs()
    return group, x


def sweep(shape, bits, variants):
    group, x = inputs(shape, bits)
    q, storage, table = x["q"], x["storage"], x["table"]
    scale = shape.head_dim ** -0.5
    want = paged.paged_attention_gather(q, storage, table, shape.length, scale=scale).astype(mx.float32)
    mx.eval(want)
    kv = 2 * shape.hkv * shape.length * (shape.head_dim * 2 if bits is None else shape.head_dim * bits // 8 + 2 * 2 * shape.head_dim // 64)
    for tb, rows, target in variants:
        configure(tb, rows, target)
        call = lambda: paged.paged_attention(q, storage, table, shape.length, scale=scale, arm=ARM)
        try:
            got = call().astype(mx.float32)
            err = mx.abs(got - want).max().item()
        except Exception as e:  # a compile failure is a result too
            print(f"{shape} q{bits} TB{tb} R{rows} T{target}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        ok = "ok" if err < 0.03 else "BAD"
        a, b = ms(call, 8), ms(call, 32)
        print(f"{shape} q{bits} TB{tb:>2} R{rows} T{target:>4}: {ok} maxdiff {err:.2e} | {a:.4f} ms (8/eval, {kv / a / 1e6:.0f} GB/s) "
              f"| {b:.4f} ms (32/eval, {kv / b / 1e6:.0f} GB/s)", flush=True)
    configure(8, 4, 1024)
    t0 = time.perf_counter()
    for _ in range(200):
        paged.paged_attention(q, storage, table, shape.length, scale=scale, arm=ARM)
    print(f"{shape} q{bits} host cost per call (graph build, no eval, default config): "
          f"{(time.perf_counter() - t0) / 200 * 1e6:.1f} us", flush=True)
    group.release()


PLAIN = [(8, 4, 1024)] if os.environ.get("SMOKE") else list(itertools.product((8, 16), (4, 2), (512, 1024, 2048)))
QUANT = [(8, 4, 1024), (8, 2, 1024), (8, 4, 512), (16, 4, 1024)]

if "plain" in WHICH:
    for shape in (P1, P2, DecodeShape(8, 1, 1, 128, P1.length)):
        sweep(shape, None, PLAIN)
if "quant" in WHICH:
    for shape in (P1, P2):
        for bits in (4, 8):
            sweep(shape, bits, QUANT)
if "controls" in WHICH:
    for shape in (P1, P2):
        for bits in (None, 4, 8):
            group = paged_group(shape, [], bits=bits, dense=True)
            for case in group.cases:
                call = case.build()
                print(f"{shape} q{bits} {case.kernel}[{case.arm}]: {ms(call, 8):.4f} ms (8/eval) "
                      f"{ms(call, 32):.4f} ms (32/eval)", flush=True)
            group.release()
if "kvq4" in WHICH:
    for shape in (DecodeShape(16, 8, 1, 256, 131072), DecodeShape(32, 8, 1, 256, 32768), DecodeShape(8, 1, 1, 256, 32768)):
        group = kvq4_group(shape, [ARM])
        for case in group.cases:
            call = case.build()
            print(f"kvq4 {shape} {case.benchmark}/{case.kernel}[{case.arm}]: {ms(call, 8):.4f} ms (8/eval)", flush=True)
        group.release()
if "argmax" in WHICH:
    for shape in (ArgmaxShape(64, 151936), ArgmaxShape(1, 151936)):
        group = argmax_group(shape, [ARM])
        for case in group.cases:
            call = case.build()
            print(f"argmax {shape} {case.kernel}[{case.arm}]: {ms(call, 8, rounds=25):.4f} ms (8/eval)", flush=True)
        group.release()
