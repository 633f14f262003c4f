#!/usr/bin/env bash
# Multi-query (impl/multi_query.py) after the "pack" change (commit fbf9880 and later): two 8-row query tiles per
# SIMD group as ONE 16-row tensor-core mma (impl/kernels/metal_simdgroup.cuh: simdgroup_multiply_accumulate_rows16),
# and the softmax scale folded into the partial kernel's q load (no separate multiply kernel).
# Switch back: impl/multi_query.py TILES_PER_SIMDGROUP = 1 (the kernel measured in perf/runs/2026-11-29-h200-session3).
# Issue 10 target: sdpa_rows / multi_query_causal >= 4.00 at 32/8/L8/D128/N32768 bf16.
# Runs from the repo root, ~2 minutes. Writes $OUT/multi_query_pack.txt (same as stdout).
set -u
OUT=${OUT:-/tmp/mq_pack_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
{
echo "=== [1/2] correctness vs the float64 oracle: cuda arm with TILES_PER_SIMDGROUP=2 (new default),"
echo "          TILES_PER_SIMDGROUP=1 (the flip-back), and the emulated fallback (MLXGATE_SIMDGROUP_EMULATE, both tilings)"
timeout 70 "$PY" - <<'EOF'
import dataclasses
import mlx.core as mx, numpy as np
import impl.kernels.compile as compile_mod
import impl.multi_query as mq
from parity.gates import Gate, GateFailure
from properties.strategies import build_multi_query_case, decode_error_floor, multi_query_oracles, working_dtype

print("mlx", mx.__version__, "default device", mx.default_device(), "cuda available", mx.cuda.is_available())
# (H, KVH, L, N, D, dtype, splits, layout): the list of /tmp/device_requests/multi_query.sh.
SHAPES = [(32, 8, 8, 4096, 128, "bfloat16", None, "slice"), (32, 8, 1, 1000, 128, "float16", None, "contiguous"),
          (32, 8, 3, 777, 64, "float32", None, "contiguous"), (16, 8, 8, 1001, 256, "bfloat16", None, "contiguous"),
          (8, 2, 5, 300, 256, "float16", 37, "window"), (64, 8, 8, 2000, 128, "bfloat16", None, "window"),
          (16, 16, 2, 33, 64, "bfloat16", None, "transposed"), (4, 2, 8, 8, 64, "float32", None, "contiguous"),
          (12, 2, 7, 4099, 80, "float16", None, "heads")]
gate = Gate(test_id="device_request/multi_query_pack", sink=lambda r: None)
cases = []
for h, kvh, L, n, d, dtype, splits, layout in SHAPES:
    case = build_multi_query_case(np.random.default_rng(n + L), dtype=dtype, h=h, kvh=kvh, L=L, n=n, d=d,
                                  splits=splits, layout=layout)
    cases.append((case, splits, mq.multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale,
                                                       splits=splits, arm="graph")))

def check(tag, case, splits, graph):
    out = mq.multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, splits=splits, arm="cuda")
    ref, base = multi_query_oracles(case)
    work = working_dtype(case.dtype)
    floor, why = decode_error_floor(ref, work)
    try:
        r = gate.error_ratio(out, ref, base, floor=floor, dtype=work, why="parity gate: " + why, kernel="multi_query",
                             case=case.id)
        ok = r["passed"]
    except GateFailure as e:
        r, ok = e.record, False
    diff = float(mx.max(mx.abs(out.astype(mx.float32) - graph.astype(mx.float32))))
    nq = case.q_mx.shape[1] // case.k_mx.shape[1] * case.q_mx.shape[2]
    print(f"  {tag:22s} {case.id:50s} tiles/sg {mq.tiles_per_simdgroup(nq, case.q_mx.shape[3])}  "
          f"max|out-ref| {r['measured']:.3e} bound {r['threshold']:.3e} |cuda-graph| {diff:.2e}  "
          f"{'PASS' if ok else 'FAIL'}")
    return ok

def configure(tiles):
    mq.TILES_PER_SIMDGROUP = tiles
    mq._compiled_call.cache_clear()

fails = 0
for tiles in (2, 1):
    configure(tiles)
    for case, splits, graph in cases:
        fails += not check(f"tensor TILES={tiles}", case, splits, graph)
compile_mod.CUDA_PRELUDE = "#define MLXGATE_SIMDGROUP_EMULATE\n" + compile_mod.CUDA_PRELUDE
mq.PARTIAL = dataclasses.replace(mq.PARTIAL, header="// emulated fallback\n" + mq.PARTIAL.header)
for tiles in (2, 1):
    configure(tiles)
    for case, splits, graph in [cases[i] for i in (0, 2, 5, 8)]:
        fails += not check(f"EMULATED TILES={tiles}", case, splits, graph)
print(f"correctness: {'ALL PASS' if not fails else f'{fails} FAILED'}")
EOF

echo
echo "=== [2/2] timings, perf/harness.py's method: 3 warm-up rounds, 20 rounds of 8 calls + one mx.eval, median / 8 (ms per call)"
timeout 90 "$PY" - <<'EOF'
import math, time
import mlx.core as mx, numpy as np
import impl.multi_query as mq

def per_call_ms(call, rounds=20, warmup=3, batch=8):
    samples = []
    for r in range(warmup + rounds):
        t = time.perf_counter()
        mx.eval([call() for _ in range(batch)])
        if r >= warmup:
            samples.append((time.perf_counter() - t) / batch)
    return 1e3 * float(np.median(samples))

def configure(tiles):
    mq.TILES_PER_SIMDGROUP = tiles
    mq._compiled_call.cache_clear()

for hq, hkv, L, d, n in ((32, 8, 8, 128, 32768), (16, 8, 8, 256, 32768)):
    mx.random.seed(0)
    q, k, v = ((0.5 * mx.random.normal(s)).astype(mx.bfloat16) for s in ((1, hq, L, d), (1, hkv, n, d), (1, hkv, n, d)))
    mx.eval(q, k, v)
    scale = 1.0 / math.sqrt(d)
    name = f"{hq}/{hkv}/L{L}/D{d}/N{n} bf16"
    rows_ms = per_call_ms(lambda: [mx.fast.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :n - L + i + 1],
                                   v[:, :, :n - L + i + 1], scale=scale) for i in range(L)])
    print(f"{name}: sdpa_rows[mlx] (8 single-row MLX SDPA calls) {rows_ms:.3f} ms")
    default = mq.default_splits(n, hkv)
    # Tunables: TILES_PER_SIMDGROUP (2 = new default, 1 = the previous kernel; D256 always runs 1 tile) x splits.
    for tiles in ((2, 1) if d <= mq.PAIR_MAX_HEAD_DIM else (2,)):
        configure(tiles)
        for splits in sorted({default, 32, 48, 128}):
            ms = per_call_ms(lambda: mq.multi_query_causal(q, k, v, scale=scale, splits=splits, arm="cuda"))
            tag = "  <- default" if (splits == default and tiles == 2) else ""
            print(f"  multi_query_causal[cuda] TILES_PER_SIMDGROUP={tiles} splits={splits:3d}: {ms:.3f} ms, "
                  f"{2 * k.nbytes / ms / 1e9:.2f} TB/s of K+V, sdpa_rows / this = {rows_ms / ms:.2f}x{tag}")
    # Where the time goes (default tiling and splits): the partial kernel alone and the merge alone, each launched
    # uncompiled 8 per eval (host Python per launch included), and the full call on a tiny cache (N = 64: fixed cost).
    configure(2)
    s_t = mx.array([scale], dtype=q.dtype)
    part = mq.partial_launch(q, k, v, s_t, default)
    op, mp, lp = part.run("cuda")
    mx.eval(op, mp, lp)
    print(f"  breakdown: partial alone {per_call_ms(lambda: part.run('cuda')[0]):.3f} ms; merge alone "
          f"{per_call_ms(lambda: mq.merge_launch(op, mp, lp, q.dtype, hq, L).run('cuda')[0]):.3f} ms; full call at "
          f"N=64 (fixed per-call cost) {per_call_ms(lambda: mq.multi_query_causal(q, k[:, :, :64], v[:, :, :64], scale=scale, arm='cuda')):.3f} ms")
print("previous kernel (perf/runs/2026-11-29-h200-session3/call5): 0.163 ms vs sdpa_rows 0.437 ms at 32/8/L8/D128 (2.7x)")
print("target (issue 10): sdpa_rows / multi_query_causal >= 4.00 at 32/8/L8/D128/N32768")
EOF
} 2>&1 | tee "$OUT/multi_query_pack.txt"
