#!/bin/bash
# Session 13, call U3 (right after U2, warm): the pooled baseline of the tree (perf/pooled.sh, distinct inputs):
# the first pool with normalized argmax's fused call (session 12's last change) and multi-query reading q's strides.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callU3/pooled
OUT=$OUT/callU3/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callU3.tgz -C $OUT callU3 && rm -rf $OUT/callU3
