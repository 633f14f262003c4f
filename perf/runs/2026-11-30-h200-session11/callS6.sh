#!/bin/bash
# Session 11, call S6 (after the three install steps): the pooled baseline of the final tree (the ring partial's
# whole-word conversion), perf/pooled.sh, distinct inputs (perf.run's default).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callS6/pooled
OUT=$OUT/callS6/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callS6.tgz -C $OUT callS6 && rm -rf $OUT/callS6
