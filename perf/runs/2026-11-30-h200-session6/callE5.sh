#!/bin/bash
# Session 6, call E5: the pooled baseline of the final tree (the multi-query kernel of call E4; every other kernel as
# committed): pooled.sh, timeouts trimmed to the device time left.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callE5/pooled
OUT=$OUT/callE5/pooled POOL_TIMEOUT=80 GATE_TIMEOUT=85 bash perf/runs/2026-11-29-h200-pooled/pooled.sh 2>&1 | tail -22
tar czf $OUT/callE5.tgz -C $OUT callE5
