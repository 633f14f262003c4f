#!/usr/bin/env bash
# Three processes of ../ring-ceiling/sweep.py (the ring against register loads beside MLX SDPA at five shapes), each
# its own allocations: MLX SDPA's kernel time at 32/8/D128/N128k moved by 6 us between two processes on one H100
# (178.1 and 184.4 us, README.md), so a ratio to it is read over processes. From the repository root with MLX's CUDA
# wheel installed (PYTHONPATH holding it and the root).
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt"
for i in 1 2 3; do
  timeout 120 python3 records/h100-cuda/ring-ceiling/sweep.py 12 2 "$OUT/sweep$i.json" > "$OUT/sweep$i.txt" 2>&1
  grep -v Warn "$OUT/sweep$i.txt" | grep " us " | cut -c1-70
done
