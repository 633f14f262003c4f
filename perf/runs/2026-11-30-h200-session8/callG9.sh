#!/bin/bash
# Session 8, call G9 (after the two install steps): the pooled baseline of this tree (multi-query TARGET_THREADGROUPS 256) (perf/pooled.sh: 3 processes, a
# 4th gating against the pool, the calibration).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callG9/pooled
OUT=$OUT/callG9/pooled POOL_TIMEOUT=80 GATE_TIMEOUT=85 bash perf/pooled.sh 2>&1 | tail -25
tar czf $OUT/callG9.tgz -C $OUT callG9 && rm -rf $OUT/callG9
