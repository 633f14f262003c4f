#!/bin/bash
# Call A2 (right after A): the cuda-arm tests of paged attention (its body gained the STRIDED / ROUND_Q
# template constants), kvq4 (both bodies), multi-query (two tiles) and the compile/probe tests.
export PYTHONPATH=/tmp/site:$PWD MLXGATE_RESULTS=$OUT/callA2/results.jsonl PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callA2
timeout ${TEST_TIMEOUT:-500} python3 -m pytest impl/kernels parity/test_paged_attention.py \
  properties/test_paged_attention_props.py parity/test_kv_attend.py parity/test_decode_e2e.py \
  parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py parity/test_multi_query.py \
  properties/test_multi_query_props.py \
  -k "cuda or compile or translation" --device gpu -n 12 -q -rfE --durations=8 -p no:cacheprovider \
  2>&1 | tee $OUT/callA2/gates.txt | tail -30
tar czf $OUT/callA2.tgz -C $OUT callA2
