#!/bin/bash
# Issue 6 + 10 closing H200 run: argmax check/timing, the paged sweep (after), then the pooled baseline.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/argmax $OUT/pooled
OUT=$OUT/argmax timeout 75 bash perf/runs/2026-11-29-h200-issue10/argmax.sh > $OUT/argmax/argmax.txt 2>&1; tail -22 $OUT/argmax/argmax.txt
timeout 70 python3 perf/runs/2026-11-29-h200-issue10/sweep.py 1024x4 > $OUT/sweep_after.txt 2>&1; grep -v "target=\|host" $OUT/sweep_after.txt | head -3; grep "target=\|host" $OUT/sweep_after.txt
OUT=$OUT/pooled POOL_TIMEOUT=100 GATE_TIMEOUT=120 timeout 400 bash perf/runs/2026-11-29-h200-pooled/pooled.sh 2>&1 | tail -40
