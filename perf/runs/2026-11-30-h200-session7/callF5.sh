#!/bin/bash
# Session 7, call F5 (after the two install steps): dispatch_probe.py.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session7
mkdir -p $OUT/callF5
timeout 100 python3 $D/dispatch_probe.py 2>&1 | tee $OUT/callF5/dispatch_probe.txt
tar czf $OUT/callF5.tgz -C $OUT callF5 && rm -rf $OUT/callF5
