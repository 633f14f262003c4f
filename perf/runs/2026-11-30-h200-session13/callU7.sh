#!/bin/bash
# Session 13, call U7 (after the three install steps; the last of the device time): mq_parts_probe.py in two more
# processes, for the spread of multi-query L8 D128's interleaved ratio on the final kernels (U5 had one process).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session13
mkdir -p $OUT/callU7
for i in 1 2; do
  timeout 100 python3 $D/mq_parts_probe.py 5 > $OUT/callU7/mq_parts_probe_$i.txt 2>&1; echo "probe $i exit $?"
  grep -A5 "Hq32" $OUT/callU7/mq_parts_probe_$i.txt
done
