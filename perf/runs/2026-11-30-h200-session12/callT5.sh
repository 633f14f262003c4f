#!/bin/bash
# Session 12, call T5 (after the three install steps): the row kernel scanning raw logits (light_probe.py).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session12
mkdir -p $OUT/callT5
timeout 240 python3 $D/light_probe.py > $OUT/callT5/light_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callT5/light_probe.txt
