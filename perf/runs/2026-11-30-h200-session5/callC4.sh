#!/bin/bash
# Session 5, call C4: the pooled H200 baseline of this tree (3 separate perf.run processes, pooled, then a 4th
# process gating against it, calibration), via the committed pooled.sh.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/pooled
OUT=$OUT/pooled POOL_TIMEOUT=${POOL_TIMEOUT:-125} GATE_TIMEOUT=${GATE_TIMEOUT:-150} bash perf/runs/2026-11-29-h200-pooled/pooled.sh 2>&1 | tail -40
tar czf $OUT/callC4.tgz -C $OUT pooled
