#!/bin/bash
# Session 5, call C2 (after the two install steps, same command): explore_d.py (multi-query's committed body
# against ORDER_BEFORE and PLANES_IN_TURN, tiles at NQ 64, splits), then the cuda-arm tests of every kernel
# (the same selection as session 4's callB2).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session5
mkdir -p $OUT/callC2
timeout 170 python3 $D/explore_d.py > $OUT/callC2/explore_d.txt 2>&1; echo "explore_d exit $?"
cat $OUT/callC2/explore_d.txt
MLXGATE_RESULTS=$OUT/callC2/results.jsonl timeout ${TEST_TIMEOUT:-380} python3 -m pytest impl/kernels \
  parity/test_paged_attention.py properties/test_paged_attention_props.py properties/test_block_table.py \
  parity/test_kv_attend.py parity/test_decode_e2e.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  parity/test_normalized_argmax.py properties/test_normalized_argmax_props.py parity/test_multi_query.py \
  properties/test_multi_query_props.py \
  -k "cuda or compile or translation" --device gpu -n 14 -q -rfE --durations=8 -p no:cacheprovider \
  2>&1 | tee $OUT/callC2/gates.txt | tail -25
tar czf $OUT/callC2.tgz -C $OUT callC2
