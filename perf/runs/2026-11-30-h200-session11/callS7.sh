#!/bin/bash
# Session 11, call S7 (after the three install steps): pipelined_tiles_probe.py, the software-pipelined tiles.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS7
timeout 400 python3 $D/pipelined_tiles_probe.py > $OUT/callS7/pipelined_tiles_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callS7/pipelined_tiles_probe.txt
tar czf $OUT/callS7.tgz -C $OUT callS7 && rm -rf $OUT/callS7
