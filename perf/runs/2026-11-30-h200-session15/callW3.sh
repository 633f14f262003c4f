#!/bin/bash
# Session 15, call W3 (after the three install steps): the input-hardening changes touched the Python around the
# kernels (paged attention's _validate and partition clamp, kvq4's block clamp and checks, the KV views' attend
# checks, masks), not a kernel string. The cuda gates of everything that calls through them, on the H200.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callW3
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callW3/gpu.txt 2>&1
MLXGATE_RESULTS=$OUT/callW3/results.jsonl timeout 420 python3 -m pytest parity/test_paged_attention.py \
  properties/test_paged_attention_props.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  parity/test_multi_query.py properties/test_multi_query_props.py parity/test_decode_e2e.py parity/test_kv_attend.py \
  parity/test_kv_bad_input.py parity/test_masks.py properties/test_block_table.py impl/kernels/ \
  -k "cuda or bad_input or clamped or partition or numpy or storage_without or attend or usage" --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callW3/gates.txt | tail -8
