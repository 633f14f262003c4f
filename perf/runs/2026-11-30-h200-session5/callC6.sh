#!/bin/bash
# Session 5, call C6: multi-query's tile rule back to two tiles per SIMD group at NQ > 8 (call C5 / ncu: one tile
# at NQ 32 was slower on the GPU). The cuda-arm multi-query tests on this tree, then the pooled baseline again
# (pooled.sh, timeouts trimmed to the device time left).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callC6/pooled
MLXGATE_RESULTS=$OUT/callC6/results.jsonl timeout 150 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py -k cuda --device gpu -n 14 -q -rfE -p no:cacheprovider \
  2>&1 | tee $OUT/callC6/gates.txt | tail -4
OUT=$OUT/callC6/pooled POOL_TIMEOUT=80 GATE_TIMEOUT=85 bash perf/runs/2026-11-29-h200-pooled/pooled.sh 2>&1 | tail -22
tar czf $OUT/callC6.tgz -C $OUT callC6
