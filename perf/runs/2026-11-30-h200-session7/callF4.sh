#!/bin/bash
# Session 7, call F4 (after the two install steps): host_wrapper.py (the public call's host Python, piece by piece).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session7
mkdir -p $OUT/callF4
timeout 100 python3 $D/host_wrapper.py 2>&1 | tee $OUT/callF4/host_wrapper.txt | head -60
lscpu | head -20 > $OUT/callF4/lscpu.txt
tar czf $OUT/callF4.tgz -C $OUT callF4 && rm -rf $OUT/callF4
