#!/bin/bash
# The H200 perf run (perf/RESULTS.md), MLX's CUDA backend; everything lands in $OUT.
# 1. the h200 suite with torch's SDPA as a reference -> h200.json (the baseline document);
# 2. stored as this machine's baseline, then a second process reruns the baseline's cases
#    as `make gate` would (--gate: a cross-process A/A check of the regression gate), and times
#    every case twice more in that process (a2, and slowed by 20%) -> calibration.json.
# Needs the MLX CUDA wheel installed into /tmp/site (perf/RESULTS.md).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt 2>&1
python3 -c 'import mlx.core as mx, torch; print(mx.__version__, mx.default_device(), mx.device_info()); print("torch", torch.__version__, torch.cuda.is_available(), torch.version.cuda)' > $OUT/versions.txt 2>&1
timeout ${PERF_TIMEOUT:-110} python3 -m perf.run --suite h200 --device gpu --torch --no-baseline \
  --results $OUT/results.jsonl --fresh --save $OUT/h200.json 2>&1 | tee $OUT/log.txt | tail -3
python3 -m perf.baseline update --from $OUT/h200.json
timeout ${GATE_TIMEOUT:-80} python3 -m perf.run --device gpu --gate --results $OUT/gate.jsonl --fresh \
  --calibration $OUT/calibration.json 2>&1 | tee $OUT/gate_log.txt | grep -E "REGRESSED|^perf" | tail -20
