#!/bin/bash
# Session 11, call S5 (after the three install steps): tiles_probe.py, variants of the tiles' dependency chains.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS5
timeout 400 python3 $D/tiles_probe.py > $OUT/callS5/tiles_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callS5/tiles_probe.txt
tar czf $OUT/callS5.tgz -C $OUT callS5 && rm -rf $OUT/callS5
