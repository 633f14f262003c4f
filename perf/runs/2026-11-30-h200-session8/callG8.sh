#!/bin/bash
# Session 8, call G8 (after the two install steps): multi-query's split counts with one call per round
# (splits_single.py); every H200 case pipelined with one call per round (a decode step's calls back to back), one
# process (perf.run --no-baseline --save).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session8
mkdir -p $OUT/callG8
timeout 150 python3 $D/splits_single.py > $OUT/callG8/splits_single.txt 2>&1; echo "sweep exit $?"
cat $OUT/callG8/splits_single.txt
timeout 200 python3 -m perf.run --suite h200 --device gpu --no-baseline --protocol pipelined --batch 1 --rounds 40 \
  --save $OUT/callG8/pipelined1.json > $OUT/callG8/pipelined1.log 2>&1; echo "pipelined1 exit $?"
tail -n 2 $OUT/callG8/pipelined1.log
tar czf $OUT/callG8.tgz -C $OUT callG8 && rm -rf $OUT/callG8
