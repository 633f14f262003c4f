#!/bin/bash
# Session 7, call F7 (after the two install steps): the pooled baseline of this tree (perf/pooled.sh: 3 processes, a
# 4th gating against the pool, the calibration).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callF7/pooled
OUT=$OUT/callF7/pooled POOL_TIMEOUT=80 GATE_TIMEOUT=85 bash perf/pooled.sh 2>&1 | tail -25
tar czf $OUT/callF7.tgz -C $OUT callF7 && rm -rf $OUT/callF7
