#!/bin/bash
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
timeout 120 python3 perf/runs/2026-11-29-h200-issue10/overhead.py 2>&1 | tee $OUT/overhead.txt
