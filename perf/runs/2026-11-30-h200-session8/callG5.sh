#!/bin/bash
# Session 8, call G5 (after the two install steps; the tree of G4): every H200 case under the
# other two protocols, one process each (perf.run --no-baseline --save): pipelined (8 calls submitted per round,
# the previous round awaited) and eval with 32 calls per mx.eval.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callG5
timeout 140 python3 -m perf.run --suite h200 --device gpu --no-baseline --protocol pipelined \
  --save $OUT/callG5/pipelined.json > $OUT/callG5/pipelined.log 2>&1; echo "pipelined exit $?"
timeout 140 python3 -m perf.run --suite h200 --device gpu --no-baseline --batch 32 --rounds 10 \
  --save $OUT/callG5/eval32.json > $OUT/callG5/eval32.log 2>&1; echo "eval32 exit $?"
tail -n 2 $OUT/callG5/pipelined.log $OUT/callG5/eval32.log
tar czf $OUT/callG5.tgz -C $OUT callG5 && rm -rf $OUT/callG5
