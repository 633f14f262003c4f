#!/bin/bash
# Session 12, call T4 (after the three install steps): the row kernel's footprint (rowvar_probe.py).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session12
mkdir -p $OUT/callT4
timeout 240 python3 $D/rowvar_probe.py > $OUT/callT4/rowvar_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callT4/rowvar_probe.txt
