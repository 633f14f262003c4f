#!/bin/bash
# Session 13, call U6 (right after U5, warm): the pooled baseline of the tree (perf/pooled.sh, distinct inputs):
# the tree with multi-query (and kvq4 seed) partials writing one packed output.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callU6/pooled
OUT=$OUT/callU6/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callU6.tgz -C $OUT callU6 && rm -rf $OUT/callU6
