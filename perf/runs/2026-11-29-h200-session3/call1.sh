#!/bin/bash
# Third H200 session, call 1: the knob sweep (explore.py), then the cuda-arm gates of every kernel
# (the previous session's body changes had not run on a GPU). Outputs tarred: the device returns few files.
export PYTHONPATH=/tmp/site:$PWD MLXGATE_RESULTS=$OUT/work/results.jsonl PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/work
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/work/gpu.txt
git rev-parse HEAD > $OUT/work/commit.txt 2>/dev/null
timeout ${EXPLORE_TIMEOUT:-200} python3 perf/runs/2026-11-29-h200-session3/explore.py 2>&1 | tee $OUT/work/explore.txt
timeout ${TEST_TIMEOUT:-280} python3 -m pytest impl/kernels parity/test_paged_attention.py \
  properties/test_paged_attention_props.py properties/test_block_table.py parity/test_kv_attend.py parity/test_decode_e2e.py \
  parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py \
  -k "cuda or compile or translation" --device gpu -n 12 -q -rfE --durations=10 -p no:cacheprovider \
  2>&1 | tee $OUT/work/gates.txt | tail -30
tar czf $OUT/call1.tgz -C $OUT work
