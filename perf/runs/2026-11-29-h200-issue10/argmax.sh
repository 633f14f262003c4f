#!/usr/bin/env bash
# Normalized argmax (issue 10): the new one-kernel cuda arm on the H200.
#  1. bit-exact checks of normalized_argmax(arm="cuda") against native argmax(logits - logsumexp)
#     on the perf shapes (B 1/8/64 x V 32000/151936, bf16 and f32, planted ties), the contract's
#     degenerate rows (must return 0), and views that start off the vector alignment;
#  2. timing, bf16: 8 calls then one mx.eval per round, 3 warm-up rounds, 20 rounds, median / 8:
#     native, new, old (the seed's partial + finish pair, from git, if git is here), and the parts
#     of the new one (MLX's logsumexp alone, the row kernel alone on a ready lse).
# Run from the repo root; writes $OUT/argmax_results.json. ARGMAX_ARM=graph dry-runs it on a CPU.
set -euo pipefail
OUT=${OUT:-/tmp/argmax_out}
mkdir -p "$OUT"
export OUT
OLD_COMMIT=38908562fc65be44437d58dd2ea658f232fdbb8e  # last commit with the partial + finish kernels
if git show "$OLD_COMMIT:impl/normalized_argmax.py" > "$OUT/old_normalized_argmax.py" 2>/dev/null; then
  echo "old module: impl/normalized_argmax.py at $OLD_COMMIT"
else
  rm -f "$OUT/old_normalized_argmax.py"
  echo "no git history here: timing new vs native only"
fi
timeout 110 python3 - <<'EOF'
import importlib.util
import json
import os
import statistics
import time

import numpy as np
import mlx.core as mx

from impl.normalized_argmax import normalized_argmax, normalized_argmax_native, row_launch

OUT = os.environ["OUT"]
ARM = os.environ.get("ARGMAX_ARM", "cuda")
print(f"device {mx.default_device()}, arm {ARM}, mlx {mx.__version__}")
old = None
path = os.path.join(OUT, "old_normalized_argmax.py")
if os.path.exists(path):
    spec = importlib.util.spec_from_file_location("old_normalized_argmax", path)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)

SHAPES = [(b, v) for v in (32000, 151936) for b in (1, 8, 64)]
DTYPES = {"bfloat16": mx.bfloat16, "float32": mx.float32}
EPS = {"bfloat16": 2.0**-7, "float32": 2.0**-23}  # one ULP at 1.0


def planted(b, v, dtype, seed):
    """4 * N(0, 1) logits (as perf/cases.py); row 0 carries a tie across threads (ids 5 and 700) above the
    rest; row 1 (B > 1) a rounding tie: ids 2 and V-1 one ULP apart near 0, the larger at the higher id."""
    rng = np.random.default_rng(seed)
    x = (4.0 * rng.standard_normal((b, v))).astype(np.float32)
    x[0, [5, 700]] = x[0].max() + 2.0
    if b > 1:
        x[1] = -np.abs(rng.standard_normal(v)).astype(np.float32) * 0.01 - 0.05
        x[1, [2, v - 1]] = (0.0, EPS[dtype])
    arr = mx.array(x).astype(DTYPES[dtype])
    mx.eval(arr)
    return arr


results = {"checks": [], "timings": []}
failures = 0


def check(name, got, want):
    global failures
    got, want = np.array(got).astype(np.int64), np.array(want).astype(np.int64)
    bad = int(np.count_nonzero(got != want))
    failures += bad > 0
    results["checks"].append({"case": name, "mismatches": bad, "rows": int(got.size)})
    first = "" if not bad else f"  first: row {int(np.flatnonzero(got != want)[0])} got {got.ravel()[np.flatnonzero(got != want)[0]]} want {want.ravel()[np.flatnonzero(got != want)[0]]}"
    print(f"  {'OK  ' if not bad else 'FAIL'} {name}: {bad} of {got.size} rows differ{first}")


print("\n== 1. bit-exact: new cuda arm vs native argmax(logits - logsumexp) (and vs the old arm) ==")
for b, v in SHAPES:
    for dtype in DTYPES:
        x = planted(b, v, dtype, seed=b * v)
        new, native = normalized_argmax(x, arm=ARM), normalized_argmax_native(x)
        check(f"{dtype} B{b} V{v} new == native", new, native)
        if old is not None:
            check(f"{dtype} B{b} V{v} new == old", new, old.normalized_argmax(x, arm=ARM))
        if b > 1:
            check(f"{dtype} B{b} V{v} rounding-tie row takes id 2", np.array(new)[1:2], [2])
        check(f"{dtype} B{b} V{v} tie row takes id 5", np.array(new)[0:1], [5])

print("\n== degenerate rows (contract: 0; native lets NaN win) and off-alignment views ==")
for dtype in DTYPES:
    v = 151936
    x = np.zeros((4, v), np.float32)
    x[0, [7, 9000]] = np.inf          # lse +inf: every score NaN or -inf
    x[1, :] = -np.inf                 # lse -inf
    x[2, 123] = np.nan                # lse NaN
    x[3, :] = np.nan
    check(f"{dtype} V{v} no-finite-score rows -> 0", normalized_argmax(mx.array(x).astype(DTYPES[dtype]), arm=ARM),
          [0, 0, 0, 0])
    flat = planted(1, 3 + 2 * v + 4, dtype, seed=5).reshape(-1)
    for offset in (1, 2, 3, 4):
        view = flat[offset:offset + 2 * v].reshape(2, v)
        check(f"{dtype} V{v} view {offset} elements into its buffer: new == native",
              normalized_argmax(view, arm=ARM), normalized_argmax_native(view))


def timed(fn, rounds=20, warm=3, calls=8):
    """Median over rounds of (graph build + one mx.eval of 8 calls) / 8, and its build and eval parts."""
    for _ in range(warm):
        mx.eval([fn() for _ in range(calls)])
    total, build = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        outs = [fn() for _ in range(calls)]
        t1 = time.perf_counter()
        mx.eval(outs)
        t2 = time.perf_counter()
        total.append((t2 - t0) / calls)
        build.append((t1 - t0) / calls)
    return statistics.median(total) * 1e3, statistics.median(build) * 1e3


print("\n== 2. timing, bf16, ms per call (median of 20 rounds of 8 calls + one eval; 'build' = the Python/graph part) ==")
kernel_only = mx.compile(lambda x, lse: row_launch(x, lse).run(ARM)[0]) if ARM != "graph" else None
print(f"{'B x V':>12} {'native':>8} {'new':>8} {'old':>8} {'native/new':>10} {'old/new':>8} {'lse only':>9} "
      f"{'kernel only':>11} {'build new':>9} {'build native':>12}")
for b, v in SHAPES:
    x = planted(b, v, "bfloat16", seed=1)
    lse = mx.logsumexp(x, axis=-1, keepdims=True)
    mx.eval(lse)
    native, native_build = timed(lambda: normalized_argmax_native(x))
    new, new_build = timed(lambda: normalized_argmax(x, arm=ARM))
    seed = timed(lambda: old.normalized_argmax(x, arm=ARM))[0] if old is not None else float("nan")
    lse_only = timed(lambda: mx.logsumexp(x, axis=-1, keepdims=True))[0]
    kernel = timed(lambda: kernel_only(x, lse))[0] if kernel_only is not None else float("nan")
    row = {"batch": b, "vocab": v, "dtype": "bfloat16", "native_ms": native, "new_ms": new, "old_ms": seed,
           "lse_only_ms": lse_only, "kernel_only_ms": kernel, "new_build_ms": new_build,
           "native_build_ms": native_build, "native_over_new": native / new, "old_over_new": seed / new}
    results["timings"].append(row)
    print(f"{b:>4} x {v:<6} {native:8.4f} {new:8.4f} {seed:8.4f} {native / new:10.2f} {seed / new:8.2f} "
          f"{lse_only:9.4f} {kernel:11.4f} {new_build:9.4f} {native_build:12.4f}")

print(f"\ntarget (issue 10): 64 x 151936 native/new >= 1.5; checks failed: {failures}")
with open(os.path.join(OUT, "argmax_results.json"), "w") as f:
    json.dump(results, f, indent=1)
raise SystemExit(1 if failures else 0)
EOF
