#!/bin/bash
# Call 4: the final tree's host-code changes on the GPU (kernel names now digest the preludes; kvq4's
# compiled call per input signature): the cuda-arm parity tests of every kernel, once more.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/work4 && git rev-parse HEAD > $OUT/work4/commit.txt 2>/dev/null
timeout ${TEST_TIMEOUT:-150} python3 -m pytest parity/test_paged_attention.py parity/test_kvq4_decode.py \
  parity/test_normalized_argmax.py parity/test_multi_query.py parity/test_kv_attend.py properties/test_block_table.py \
  -k "cuda" --device gpu -n 12 -q -rfE -p no:cacheprovider 2>&1 | tee $OUT/work4/gates.txt | tail -6
