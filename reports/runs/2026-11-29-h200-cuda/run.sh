#!/bin/bash
# The H200 run of issue 4 (direct paged attention, normalized argmax): every arm
# that runs there (graph and cuda; metal is skipped with its reason), the ci
# Hypothesis profile, results recorded by the gate API into $OUT/results.jsonl.
# MLX's on-disk PTX cache is pointed at an uncreatable path, so every kernel is
# compiled by NVRTC in this run (nothing cached across runs or xdist workers).
set -o pipefail
export CI=true MLXGATE_RESULTS=$OUT/results.jsonl PYTHONUNBUFFERED=1 MLX_PTX_CACHE_DIR=/proc/no-ptx-cache
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt
python3 reports/runs/2026-11-29-h200-cuda/smoke.py 2>&1 | tee $OUT/smoke.txt || exit 1
timeout ${TEST_TIMEOUT:-400} python3 -m pytest impl/kernels properties/test_paged_attention_props.py \
  properties/test_normalized_argmax_props.py parity/test_paged_attention.py parity/test_normalized_argmax.py \
  --device gpu -n 12 -q -rfE --durations=15 --junitxml=$OUT/junit.xml 2>&1 | tee $OUT/log.txt | tail -60
