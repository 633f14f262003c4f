#!/bin/bash
# Session 14, call V6 (warm, right after V5): the pooled baseline of the tree (perf/pooled.sh, distinct inputs):
# V3's tree with the fused argmax kernel of the call writing the ids only.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callV6/pooled
OUT=$OUT/callV6/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callV6.tgz -C $OUT callV6 && rm -rf $OUT/callV6
