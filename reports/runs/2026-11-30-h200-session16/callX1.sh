#!/bin/bash
# Session 16, call X1 (after the three install steps, README): argument checks were added to the Python around the
# kernels (KernelSpec / Launch, normalized argmax's launch helpers, the geometry helpers of paged attention, kvq4 and
# multi-query, the KV helpers). No kernel string changed. The cuda gates of every kernel family, the nvcc units, and
# the new check tests on the GPU device.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callX1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callX1/gpu.txt 2>&1
MLXGATE_RESULTS=$OUT/callX1/results.jsonl timeout 480 python3 -m pytest impl/ parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py parity/test_paged_attention.py properties/test_paged_attention_props.py \
  parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py parity/test_multi_query.py \
  properties/test_multi_query_props.py parity/test_decode_e2e.py parity/test_kv_attend.py parity/test_kv_bad_input.py \
  parity/test_masks.py -k "cuda or bad or check or numpy or helper or spec or launch or window" --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callX1/gates.txt | tail -8
