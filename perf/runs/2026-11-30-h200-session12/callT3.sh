#!/bin/bash
# Session 12, call T3 (after the three install steps): where normalized argmax's GPU time goes (pieces_probe.py).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session12
mkdir -p $OUT/callT3
timeout 240 python3 $D/pieces_probe.py > $OUT/callT3/pieces_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callT3/pieces_probe.txt
