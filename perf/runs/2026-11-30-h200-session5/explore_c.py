"""Session 5, call 1: multi-query's partial with the next block prefetched (PREFETCH) x tiles per SIMD group,
splits; the merges unrolled by 8 (multi-query's, now also kvq4's seed merge, and paged's) against the merges
of the tree before (their sources below, verbatim from commit 8bb6764). ms per call:
  eval8     8 calls then one mx.eval (perf's protocol, host Python included),
  pipelined 8 calls, mx.async_eval, then wait for the PREVIOUS batch (perf.harness.Pipelined)."""
import dataclasses
import math
import sys
import time

import mlx.core as mx
import numpy as np

import impl.kvq4_decode as kvq4
import impl.multi_query as mq
import impl.paged_attention as paged
from impl.block_table import BlockTable
from perf.cases import kvq4_group, paged_group
from perf.harness import batched, time_call
from perf.shapes import DecodeShape

OLD_PAGED_MERGE = """
  // One threadgroup per output row: 32 dims x 8 slices of the partitions, then a reduction.
  const uint d = thread_position_in_grid.x, slice = thread_position_in_threadgroup.y;
  const uint x = thread_position_in_threadgroup.x, row = threadgroup_position_in_grid.y;
  const uint length = uint(geometry[1]), span = uint(geometry[2]);
  const uint count = (length + span - 1) / span;  // partitions written (the buffers may hold more)
  threadgroup float tops[8];
  threadgroup float values[8][32], totals[8];
  float maximum = -INFINITY;
  for (uint part = slice; part < count; part += 8) maximum = max(maximum, normal[(row * count + part) * 2]);
  if (x == 0) tops[slice] = maximum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint s = 0; s < 8; ++s) maximum = max(maximum, tops[s]);
  float sum = 0, value = 0;
  for (uint part = slice; part < count; part += 8) {
    uint base = row * count + part;
    float weight = exp(normal[base * 2] - maximum);
    sum = fma(normal[base * 2 + 1], weight, sum);
    value = fma(d < DV ? parts[base * DV + d] : 0.0f, weight, value);
  }
  values[slice][x] = value;
  if (x == 0) totals[slice] = sum;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (slice == 0 && d < DV) {
    float v = 0, t = 0;
    for (uint s = 0; s < 8; ++s) { v += values[s][x]; t += totals[s]; }
    out[row * DV + d] = OutT(v / t);
  }
"""
OLD_MQ_MERGE = """
  const uint d = thread_position_in_grid.x;            // 0..D-1
  const uint qv = thread_position_in_grid.y;           // 0..KVH·NQ-1
  if (d >= (uint)D || qv >= (uint)(KVH * NQ)) return;
  const uint splits = (uint)mpart_shape[0];            // run-time, as in the partial pass
  const uint hk = qv / (uint)NQ, row = qv % (uint)NQ;
  float mmax = -INFINITY;
  for (uint s = 0; s < splits; ++s) mmax = metal::max(mmax, mpart[(ulong)s * (uint)(KVH * NQ) + qv]);
  float num = 0.0f, den = 0.0f;
  for (uint s = 0; s < splits; ++s) {
    const ulong b = (ulong)s * (uint)(KVH * NQ) + qv;
    const float ms = mpart[b];
    if (ms == -INFINITY) continue;
    const float w = metal::exp(ms - mmax);
    num += w * opart[b * (uint)D + d];
    den += w * lpart[b];
  }
  const uint rr = row / (uint)L, qi = row % (uint)L;
  out[((ulong)(hk * (uint)REP + rr) * (uint)L + qi) * (uint)D + d] = T(num / den);
"""


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


def configure(prefetch, tiles):
    mq.PREFETCH_NEXT_BLOCK, mq.TILES_PER_SIMDGROUP = prefetch, tiles
    mq._compiled_call.cache_clear()


def merges(old):
    """Swap every merge body to the old (serial) or the new (unrolled) source; caches cleared."""
    paged.MERGE = dataclasses.replace(NEW_PAGED, source=OLD_PAGED_MERGE, name="paged_attention_merge_old") if old else NEW_PAGED
    mq.MERGE = dataclasses.replace(NEW_MQ, source=OLD_MQ_MERGE, name="multi_query_merge_old") if old else NEW_MQ
    for f in (mq._compiled_call, paged._compiled_pair, paged._plan, kvq4._compiled_pair, kvq4._compiled_direct):
        f.cache_clear()


NEW_PAGED, NEW_MQ = paged.MERGE, mq.MERGE
which = sys.argv[1] if len(sys.argv) > 1 else "all"

if which in ("all", "correct"):
    from parity.gates import Gate, GateFailure
    from properties.strategies import build_multi_query_case, decode_error_floor, multi_query_oracles, working_dtype
    print("== (1) multi-query correctness on the cuda arm: error-ratio gate against the float64 oracle", flush=True)
    SHAPES = [(32, 8, 8, 4096, 128, "bfloat16", None, "slice"), (32, 8, 1, 1000, 128, "float16", None, "contiguous"),
              (32, 8, 3, 777, 64, "float32", None, "contiguous"), (16, 8, 8, 1001, 256, "bfloat16", None, "contiguous"),
              (8, 2, 5, 300, 256, "float16", 37, "window"), (64, 8, 8, 2000, 128, "bfloat16", None, "window"),
              (16, 16, 2, 33, 64, "bfloat16", None, "transposed"), (4, 2, 8, 8, 64, "float32", None, "contiguous"),
              (12, 2, 7, 4099, 80, "float16", None, "heads"), (8, 2, 8, 100, 128, "bfloat16", 64, "contiguous")]
    gate = Gate(test_id="explore_c/multi_query", sink=lambda r: None)
    fails = 0
    for h, kvh, L, n, d, dtype, splits, layout in SHAPES:
        case = build_multi_query_case(np.random.default_rng(n + L), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d,
                                      splits=splits, layout=layout)
        graph = mq.multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, splits=splits, arm="graph")
        ref, base = multi_query_oracles(case)
        work = working_dtype(case.dtype)
        floor, why = decode_error_floor(ref, work)
        for prefetch, tiles in ((True, 2), (True, 1), (False, 2), (False, 1)):
            configure(prefetch, tiles)
            out = mq.multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, splits=splits, arm="cuda")
            try:
                r = gate.error_ratio(out, ref, base, floor=floor, dtype=work, why="parity gate: " + why,
                                     kernel="multi_query", case=case.id)
                ok = r["passed"]
            except GateFailure as e:
                r, ok = e.record, False
            diff = float(mx.max(mx.abs(out.astype(mx.float32) - graph.astype(mx.float32))))
            fails += not ok
            print(f"  PREFETCH={int(prefetch)} TILES={tiles} {case.id:52s} max|out-ref| {r['measured']:.3e} "
                  f"bound {r['threshold']:.3e} |cuda-graph| {diff:.2e} {'PASS' if ok else 'FAIL'}", flush=True)
    print(f"multi-query correctness: {'ALL PASS' if not fails else f'{fails} FAILED'}", flush=True)

if which in ("all", "time"):
    print("== (2) multi-query timings", flush=True)
    for hq, hkv, L, d, n in ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768)):
        mx.random.seed(0)
        q, k, v = ((0.5 * mx.random.normal(s)).astype(mx.bfloat16) for s in ((1, hq, L, d), (1, hkv, n, d), (1, hkv, n, d)))
        mx.eval(q, k, v)
        scale = 1.0 / math.sqrt(d)
        name = f"{hq}/{hkv}/L{L}/D{d}/N{n} bf16"
        rows = lambda: [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - L + i + 1],
                                                             v[:, :, :n - L + i + 1], scale=scale) for i in range(L)]
        rows_ms = ms(rows)
        print(f"{name}: sdpa_rows (8 single-row MLX SDPA calls) eval8 {rows_ms:.4f} ms, pipelined {pipelined(rows):.4f}",
              flush=True)
        default = mq.default_splits(n, hkv)
        for old in (True, False):
            merges(old)
            for prefetch, tiles in ((False, 2), (True, 2), (True, 1), (False, 1)):
                if d > mq.PAIR_MAX_HEAD_DIM and tiles == 2:
                    continue
                configure(prefetch, tiles)
                for splits in ((default, 33, 49, 128) if not old else (default,)):
                    call = lambda: mq.multi_query_causal(q, k, v, scale=scale, splits=splits, arm="cuda")
                    t = ms(call)
                    extra = f", pipelined {pipelined(call):.4f}" if splits == default else ""
                    print(f"  merge={'old' if old else 'new'} PREFETCH={int(prefetch)} TILES={tiles} splits={splits:3d}: "
                          f"eval8 {t:.4f} ms ({2 * k.nbytes / t / 1e9:.2f} TB/s), sdpa_rows / this {rows_ms / t:.2f}x{extra}",
                          flush=True)
        merges(False)
        for prefetch, tiles in ((False, 2), (True, 1)):
            configure(prefetch, tiles)
            if d > mq.PAIR_MAX_HEAD_DIM and tiles == 2:
                continue
            s_t = mx.array([scale], dtype=q.dtype)
            part = mq.partial_launch(q, k, v, s_t, default)
            op, mp, lp = part.run("cuda")
            mx.eval(op, mp, lp)
            new_merge = ms(lambda: mq.merge_launch(op, mp, lp, q.dtype, hq, L).run("cuda")[0])
            mq.MERGE = dataclasses.replace(NEW_MQ, source=OLD_MQ_MERGE, name="multi_query_merge_old")
            old_merge = ms(lambda: mq.merge_launch(op, mp, lp, q.dtype, hq, L).run("cuda")[0])
            mq.MERGE = NEW_MQ
            print(f"  breakdown PREFETCH={int(prefetch)} TILES={tiles}: partial alone "
                  f"{ms(lambda: part.run('cuda')[0]):.4f} ms; merge alone new {new_merge:.4f} / old {old_merge:.4f}; "
                  f"call at N=64 {ms(lambda: mq.multi_query_causal(q, k[:, :, :64], v[:, :, :64], scale=scale, arm='cuda')):.4f}",
                  flush=True)

    print("== (3) paged and kvq4 with the old / new merge", flush=True)
    for shape in (DecodeShape(32, 8, 1, 128, 32768), DecodeShape(16, 8, 1, 256, 131072)):
        group = paged_group(shape, ["cuda"])
        x = group.inputs()
        scale = shape.head_dim ** -0.5
        table = x["table"] if isinstance(x["table"], BlockTable) else BlockTable.of(x["table"])
        want = paged.paged_attention_gather(x["q"], x["storage"], table, shape.length, scale=scale)
        sdpa = lambda: mx.fast.scaled_dot_product_attention(x["q"], x["k"], x["v"], scale=scale)
        mbytes = 2 * shape.hkv * shape.length * shape.head_dim * 2 / 1e6
        print(f"paged {shape}: MLX SDPA eval8 {ms(sdpa):.4f} pipelined {pipelined(sdpa):.4f} ms", flush=True)
        for old in (True, False, True, False):
            merges(old)
            call = lambda: paged.paged_attention(x["q"], x["storage"], table, shape.length, scale=scale, arm="cuda")
            err = mx.abs(call().astype(mx.float32) - want.astype(mx.float32)).max().item()
            t = ms(call)
            print(f"  merge={'old' if old else 'new'}: eval8 {t:.4f} ms ({mbytes / t / 1e3:.2f} TB/s), pipelined "
                  f"{pipelined(call):.4f}; max|out - gather| {err:.2e}", flush=True)
        group.release()
    for shape in (DecodeShape(32, 8, 1, 256, 32768), DecodeShape(8, 1, 1, 256, 32768)):
        group = kvq4_group(shape, ["cuda"])
        x = group.inputs()
        scale = 256 ** -0.5
        control = [c for c in group.cases if c.kernel == "dequantize_sdpa"][0]
        ctl = ms(control.build())
        print(f"kvq4 {shape}: dequantize+SDPA eval8 {ctl:.4f} ms", flush=True)
        for old in (True, False, True, False):
            merges(old)
            for body in ("seed", "direct"):
                call = lambda: kvq4.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, body=body, arm="cuda")
                t = ms(call)
                print(f"  merge={'old' if old else 'new'} body={body}: eval8 {t:.4f} ms ({ctl / t:.2f}x), pipelined "
                      f"{pipelined(call):.4f}", flush=True)
        group.release()
