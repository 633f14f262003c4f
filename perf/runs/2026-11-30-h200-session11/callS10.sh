#!/bin/bash
# Session 11, call S10 (after the three install steps): multi-query's time per round against its calls per round
# (scaling_probe.py). nsys, for a timeline of a round, is not on the device image (a first try of this call found none).
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS10
timeout 200 python3 $D/scaling_probe.py > $OUT/callS10/scaling_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callS10/scaling_probe.txt
tar czf $OUT/callS10.tgz -C $OUT callS10 && rm -rf $OUT/callS10
