#!/bin/bash
# The pooled baseline of a GPU and the regression gate's calibration (perf/regression.py, perf/RESULTS.md
# "Calibration"). Run from the repo root on the GPU machine (PYTHONPATH has MLX-CUDA and the repo); everything
# lands in $OUT (with a copy of this script, as it ran); the committed baseline is never touched.
#
#   processes 1-3: python -m perf.run --suite h200 --save $OUT/pN.json  (each a separate process)
#   pool:          python -m perf.baseline update --from p1 --from p2 --from p3 --dir $OUT/baselines
#   process 4:     python -m perf.run --gate --baseline <that pooled file> --calibration (what make gate
#                  runs, against the pooled baseline; plus a2 and +20% slowed timings per case)
#   calibration:   python -m perf.regression <pooled> <calibration.json>: A/A leave-one-process-out over
#                  the 4 processes, the one-process rule on the same data, +20% slowed against the pool
#
# Expected ~4-6 min on the H200 (per process mostly building inputs and compiling kernels). POOL_TIMEOUT (default
# 125 s per pool process) and GATE_TIMEOUT (175 s for the 4th) keep the whole under 10 min; git is not consulted
# for what ran (the device's copy of the tree may carry a stale .git): the caller records the commit.
# RUN_ARGS (default empty) goes to every perf.run: e.g. "--no-kernel-time" (kernel time is measured by default
# where torch can profile CUDA: 20 traced calls per case after its call time, which the timeouts must allow for).
set -u
: "${OUT:?OUT must name the output folder}"
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
SUITE=${SUITE:-h200} DEVICE=${DEVICE:-gpu} FLOOR_MS=${FLOOR_MS:-0.25}  # SUITE=cpu DEVICE=cpu: a dry run on a CPU
read -r -a RUN_ARGS <<< "${RUN_ARGS:-}"
began=$(date +%s)
cp "$0" "$OUT/pooled.sh" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$OUT/gpu.txt" 2>&1
"$PY" -c 'import mlx.core as mx; print("mlx", mx.__version__, mx.default_device(), mx.device_info())' > "$OUT/versions.txt" 2>&1
KEY=$("$PY" -c "from impl import arms; arms.use_device('$DEVICE'); from perf.baseline import device_key; print(device_key())")
echo "device key: $KEY (versions in versions.txt)"

for i in 1 2 3; do
  t0=$(date +%s)
  timeout "${POOL_TIMEOUT:-125}" "$PY" -m perf.run --suite "$SUITE" --device "$DEVICE" --no-baseline "${RUN_ARGS[@]}" --save "$OUT/p$i.json" \
    > "$OUT/p$i.log" 2>&1
  status=$?
  echo "process $i of 3 (pool): exit $status after $(( $(date +%s) - t0 )) s; last line: $(tail -1 "$OUT/p$i.log")"
  [ $status -eq 0 ] || echo "  (exit 124 = cut by the timeout: p$i.json then lacks the last cases and pooling will refuse it)"
done

if ! "$PY" -m perf.baseline update --from "$OUT/p1.json" --from "$OUT/p2.json" --from "$OUT/p3.json" \
     --gate-floor-ms "$FLOOR_MS" --dir "$OUT/baselines" 2>&1 | tee "$OUT/pool.log" | grep -q "wrote"; then
  echo "POOLING FAILED (pool.log):"; cat "$OUT/pool.log"; exit 1
fi
POOLED="$OUT/baselines/$KEY.json"
echo "pooled baseline: $POOLED"
"$PY" -m perf.baseline show --dir "$OUT/baselines" "$KEY" > "$OUT/pooled_show.txt" 2>&1
echo "  the largest process spreads (max/min - 1 of the 3 process medians; the full list: pooled_show.txt):"
"$PY" - "$POOLED" <<'PYEOF'
import json, statistics, sys
from perf.baseline import baseline_processes
document = json.load(open(sys.argv[1]))
floor = document["settings"].get("gate_floor_s", 0.0)
rows = []
for case_id, entry in document["benchmarks"].items():
    medians = [statistics.median(p) for p in baseline_processes(entry)]
    gated = "gated" if statistics.median(medians) >= floor else "below the floor"
    rows.append((max(medians) / min(medians) - 1, case_id, statistics.median(medians), gated))
for spread, case_id, median, gated in sorted(rows, reverse=True)[:8]:
    print(f"    {spread:6.1%}  {case_id}  (median {median * 1e3:.4g} ms, {gated})")
PYEOF

t0=$(date +%s)
timeout "${GATE_TIMEOUT:-175}" "$PY" -m perf.run --device "$DEVICE" --gate "${RUN_ARGS[@]}" --baseline "$POOLED" \
  --results "$OUT/gate.jsonl" --fresh --calibration "$OUT/calibration.json" > "$OUT/gate_log.txt" 2>&1
status=$?
echo "process 4 (make gate's rerun against the pooled baseline, + calibration): exit $status after $(( $(date +%s) - t0 )) s" \
     "(0: nothing regressed, 1: something did, 124: timeout)"
grep -E "^perf:" "$OUT/gate_log.txt" | tail -2 | sed 's/^/  /'
echo "  cases flagged REGRESSED by the gate (an unchanged tree: should be none):"
grep "REGRESSED" "$OUT/gate_log.txt" | sed 's/^ */    /' || true
grep -q "REGRESSED" "$OUT/gate_log.txt" || echo "    none"

echo "calibration (python -m perf.regression; written to calibration.txt):"
"$PY" -m perf.regression "$POOLED" "$OUT/calibration.json" > "$OUT/calibration.txt" 2>&1
echo "  exit $? (0: no A/A flag anywhere, 1: some A/A flagged, 2: could not read)"
sed 's/^/  /' "$OUT/calibration.txt"

DAY=$(date -u +%Y-%m-%d)
cat > "$OUT/README.md" <<EOF
# Pooled baseline of $KEY and the gate's calibration ($DAY, pooled.sh)

p1-p3.json: run documents of 3 separate processes (perf.run --suite $SUITE --save; logs pN.log);
baselines/$KEY.json: them pooled (floor $FLOOR_MS ms); gate.jsonl, gate_log.txt: a 4th process, perf.run --gate
against that pooled baseline; calibration.json: that process's a1/a2/slowed samples; calibration.txt:
python -m perf.regression on them; pooled_show.txt, pool.log; gpu.txt, versions.txt; pooled.sh: this script.

To commit, from the repo root, with D = this folder (the run's files) and R = its home under records/
(e.g. records/h200-pooled), then write down which commit's tree ran:

    mkdir -p R && cp -r D/. R/ && rm -r R/baselines
    .venv/bin/python -m perf.baseline update --from R/p1.json --from R/p2.json --from R/p3.json --gate-floor-ms $FLOOR_MS
    make test   # the calibration tests replay records/h200-calibration, which this run does not replace
EOF
echo "total $(( $(date +%s) - began )) s; how to commit these files: $OUT/README.md"
