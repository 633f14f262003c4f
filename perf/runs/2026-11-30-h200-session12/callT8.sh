#!/bin/bash
# Session 12, call T8 (after the three install steps): normalized argmax like for like (public_probe.py), run twice
# (two processes).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session12
mkdir -p $OUT/callT8
for i in 1 2; do
  timeout 100 python3 $D/public_probe.py 10 > $OUT/callT8/public_probe_$i.txt 2>&1; echo "probe $i exit $?"
  cat $OUT/callT8/public_probe_$i.txt
done
