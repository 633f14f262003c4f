#!/bin/bash
# Session 10, call R2 (after the two install steps): multi-query's tiling with the ring (tiles_sweep.py).
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session10 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session10
mkdir -p $OUT/callR2
timeout 300 python3 $D/tiles_sweep.py > $OUT/callR2/tiles_sweep.txt 2>&1; echo "sweep exit $?"
cat $OUT/callR2/tiles_sweep.txt
tar czf $OUT/callR2.tgz -C $OUT callR2 && rm -rf $OUT/callR2
