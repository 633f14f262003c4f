#!/usr/bin/env bash
# Processes of ratio.py one after another until DEADLINE seconds have passed (each its own allocations and MLX
# state): MLX SDPA's kernel time at 32/8/D128/N128k moves between processes with no code change, so the paged
# kernels' ratio to it is read over processes (README.md). From the repository root with MLX's CUDA wheel installed
# (PYTHONPATH holding it and the root).
#   bash records/h200-perf/reads-first/processes.sh 420
here=records/h200-perf/reads-first
deadline=$((SECONDS + ${1:-420}))
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt"
i=1
# A process took 21-27 s on an H100 (records/h100-cuda/ratio-processes/: eight in 196 s); the first may compile cold
# (NVRTC), so each gets 120 s, and none starts within 60 s of the deadline: the last ends by DEADLINE + 60 at worst
# (420 -> 480 s, inside a call's 600).
while [ $((SECONDS + 60)) -lt $deadline ] && [ $i -le 8 ]; do
  timeout 120 python3 $here/ratio.py 12 3 "$OUT/ratio$i.json" > "$OUT/ratio$i.log" 2>&1
  echo "process $i: $? at ${SECONDS}s"; i=$((i + 1))
done
python3 $here/ratio.py --summary "$OUT"/ratio*.json | tee "$OUT/summary.txt"
# $OUT brings back at most 8 files: the processes' documents and logs travel as one archive
(cd "$OUT" && tar czf ratio.tgz ratio*.json ratio*.log && rm ratio*.json ratio*.log)
