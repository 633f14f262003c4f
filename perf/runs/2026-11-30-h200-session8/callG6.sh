#!/bin/bash
# Session 8, call G6 (after the two install steps): dsmem_probe2.py (dynamic shared memory past 48 KiB in cuda_kernel).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callG6
timeout 120 python3 perf/runs/2026-11-30-h200-session8/dsmem_probe2.py 2>&1 | tee $OUT/callG6/dsmem_probe2.txt
