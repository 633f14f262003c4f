#!/bin/bash
# Session 12, call T7 (right after T6, warm): the pooled baseline of the final tree (normalized argmax's raw-logit
# scan), perf/pooled.sh, distinct inputs (perf.run's default).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callT7/pooled
OUT=$OUT/callT7/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callT7.tgz -C $OUT callT7 && rm -rf $OUT/callT7
