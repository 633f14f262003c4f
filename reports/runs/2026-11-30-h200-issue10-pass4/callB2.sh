#!/bin/bash
# Call B2 (after the two install steps, same command): the cuda-arm tests of paged attention (wide loads,
# lane maps, the STRIDED / ROUND_Q constants), kvq4 (both bodies, the default rule), multi-query (two
# tiles, folded scale), the compile and simdgroup-probe tests.
export PYTHONPATH=/tmp/site:$PWD MLXGATE_RESULTS=$OUT/callB2/results.jsonl PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callB2
timeout ${TEST_TIMEOUT:-480} python3 -m pytest impl/kernels parity/test_paged_attention.py \
  properties/test_paged_attention_props.py properties/test_block_table.py parity/test_kv_attend.py \
  parity/test_decode_e2e.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  parity/test_normalized_argmax.py properties/test_normalized_argmax_props.py parity/test_multi_query.py \
  properties/test_multi_query_props.py \
  -k "cuda or compile or translation" --device gpu -n 14 -q -rfE --durations=8 -p no:cacheprovider \
  2>&1 | tee $OUT/callB2/gates.txt | tail -25
tar czf $OUT/callB2.tgz -C $OUT callB2
