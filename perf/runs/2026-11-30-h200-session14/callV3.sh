#!/bin/bash
# Session 14, call V3 (warm, right after V2): the pooled baseline of the tree (perf/pooled.sh, distinct inputs):
# paged attention's partial (bf16, KV4 / KV8, kvq4's direct body) writing one packed output.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callV3/pooled
OUT=$OUT/callV3/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callV3.tgz -C $OUT callV3 && rm -rf $OUT/callV3
