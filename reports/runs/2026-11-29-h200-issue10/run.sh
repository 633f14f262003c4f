#!/bin/bash
# Issue 10 on the H200: the gates of every kernel on the cuda arm (dev Hypothesis profile), then
# every kernel-body mutant against the cuda arm alone (`--arm cuda`: the compiled body must kill
# it, not the graph mirror). Results recorded by the gate API into $OUT/results.jsonl.
set -o pipefail
export PYTHONPATH=/tmp/site:$PWD MLXGATE_RESULTS=$OUT/results.jsonl PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt
git rev-parse HEAD > $OUT/commit.txt 2>/dev/null
timeout ${TEST_TIMEOUT:-230} python3 -m pytest impl/kernels parity/test_paged_attention.py \
  properties/test_paged_attention_props.py parity/test_kv_attend.py parity/test_decode_e2e.py \
  parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py parity/test_multi_query.py properties/test_multi_query_props.py \
  -k "cuda or compile or translation" --device gpu -n 12 -q -rfE --durations=10 --junitxml=$OUT/junit.xml \
  2>&1 | tee $OUT/log.txt | tail -25
timeout ${MUTANT_TIMEOUT:-230} python3 -m mutants --device gpu --arm cuda --workers 6 --profile dev \
  --results $OUT/mutants.jsonl 2>&1 | tee $OUT/mutants.txt | tail -30
mkdir -p $OUT/kvq4 && OUT=$OUT/kvq4 timeout ${KVQ4_TIMEOUT:-100} bash perf/runs/2026-11-29-h200-issue10/kvq4.sh 2>&1 | tee $OUT/kvq4/kvq4.txt | tail -25
