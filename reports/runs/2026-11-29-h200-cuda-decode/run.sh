#!/bin/bash
# The H200 run of issue 5 part A (kvq4 decode, multi-query causal decode): every
# arm that runs there (graph and cuda; metal is skipped with its reason), the
# Hypothesis profile $PROFILE (default ci), results recorded by the gate API into
# $OUT/results.jsonl. MLX's on-disk PTX cache is pointed at an uncreatable
# path, so every kernel is compiled by NVRTC in this run (nothing cached across
# runs or xdist workers). SMOKE=0 skips smoke.py (compile/run times, perf.jsonl).
set -o pipefail
export CI=true MLXGATE_PROFILE=${PROFILE:-ci} MLXGATE_RESULTS=$OUT/results.jsonl PYTHONUNBUFFERED=1 \
  MLX_PTX_CACHE_DIR=/proc/no-ptx-cache
HERE=reports/runs/2026-11-29-h200-cuda-decode
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt
(command -v nvcc && nvcc --version | tail -2) > $OUT/nvcc.txt 2>&1
if [ "${SMOKE:-1}" != 0 ]; then python3 $HERE/smoke.py 2>&1 | tee $OUT/smoke.txt || exit 1; fi
timeout ${TEST_TIMEOUT:-420} python3 -m pytest impl/kernels/test_cuda_compile_decode.py \
  properties/test_kvq4_decode_props.py properties/test_multi_query_props.py \
  parity/test_kvq4_decode.py parity/test_multi_query.py \
  --device gpu -n ${WORKERS:-8} -q -rfE --durations=15 --junitxml=$OUT/junit.xml 2>&1 | tee $OUT/log.txt | tail -40
