#!/bin/bash
# Session 12, call T9 (after the three install steps): one launch with the raw-logit scan's candidate phase
# (fused_light_probe.py), two processes.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session12
mkdir -p $OUT/callT9
for i in 1 2; do
  timeout 100 python3 $D/fused_light_probe.py > $OUT/callT9/fused_light_probe_$i.txt 2>&1; echo "probe $i exit $?"
  cat $OUT/callT9/fused_light_probe_$i.txt
done
