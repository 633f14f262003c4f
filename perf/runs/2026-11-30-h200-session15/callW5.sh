#!/bin/bash
# Session 15, call W5 (after the three install steps): the cases this session's later commits added or redrew on the
# cuda arm: paged attention's quantized pool past two default 512-token partitions (len1100), the argmax property
# tests with rounding ties drawn within one thread's chunk half the time, kvq4's props.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callW5
MLXGATE_RESULTS=$OUT/callW5/results.jsonl CI=true timeout 420 python3 -m pytest parity/test_paged_attention.py \
  properties/test_normalized_argmax_props.py parity/test_normalized_argmax.py properties/test_kvq4_decode_props.py \
  -k "cuda and (len1100 or argmax or kvq4 or matches)" --device gpu -n 14 -q -rfEs -p no:cacheprovider 2>&1 \
  | tee $OUT/callW5/gates.txt | tail -6
