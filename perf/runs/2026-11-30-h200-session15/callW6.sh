#!/bin/bash
# Session 15, call W6 (after the three install steps): kernel names now cover the argument names, output dtypes and
# input ranks, so every kernel compiles under a new name (same source). A cuda pass over every kernel family.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callW6
MLXGATE_RESULTS=$OUT/callW6/results.jsonl timeout 400 python3 -m pytest impl/kernels/ parity/test_normalized_argmax.py \
  parity/test_kvq4_decode.py parity/test_multi_query.py parity/test_paged_attention.py parity/test_kv_attend.py \
  -k cuda --device gpu -n 14 -q -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callW6/gates.txt | tail -5
