#!/bin/bash
# Session 7, call F5 (after the two install steps): alloc_probe.py.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session7
mkdir -p $OUT/callF6
timeout 100 python3 $D/alloc_probe.py 2>&1 | tee $OUT/callF6/alloc_probe.txt
tar czf $OUT/callF6.tgz -C $OUT callF6 && rm -rf $OUT/callF6
