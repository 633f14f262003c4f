#!/bin/bash
# Session 9, call H4 (after the two install steps): kvq4's block (both bodies) and paged attention's partition,
# swept with one call per round as well as 8 (defaults_sweep.py).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session9
mkdir -p $OUT/callH4
timeout 450 python3 $D/defaults_sweep.py > $OUT/callH4/defaults_sweep.txt 2>&1; echo "sweep exit $?"
cat $OUT/callH4/defaults_sweep.txt
tar czf $OUT/callH4.tgz -C $OUT callH4 && rm -rf $OUT/callH4
