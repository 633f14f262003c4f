#!/bin/bash
# Session 10, call R7 (the machine warm after R6): the pooled baseline of the final tree (the ring partial with its prologue in the tiles. branch; multi-query.s ring partial
# the CUDA default), perf/pooled.sh, distinct inputs (perf.run's default).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callR7/pooled
OUT=$OUT/callR7/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callR7.tgz -C $OUT callR7 && rm -rf $OUT/callR7
