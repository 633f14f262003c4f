#!/bin/bash
# Session 15, call W1 (after the three install steps): the fixed cost of kvq4's call at 8/1/D256/N32k
# (floor_probe.py: the tree's compiled call against the same call with its kernel bodies emptied).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session15
mkdir -p $OUT/callW1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callW1/gpu.txt 2>&1
timeout 400 python3 $D/floor_probe.py 6 > $OUT/callW1/floor_probe.txt 2>&1; echo "probe exit $?"
tail -30 $OUT/callW1/floor_probe.txt
