#!/bin/bash
# Session 7, call F9 (after the two install steps; session 5's call C5 on this tree): every H200 case under the
# other two protocols, one process each (perf.run --no-baseline --save): pipelined (8 calls submitted per round,
# the previous round awaited) and eval with 32 calls per mx.eval.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callF9
timeout 140 python3 -m perf.run --suite h200 --device gpu --no-baseline --protocol pipelined \
  --save $OUT/callF9/pipelined.json > $OUT/callF9/pipelined.log 2>&1; echo "pipelined exit $?"
timeout 140 python3 -m perf.run --suite h200 --device gpu --no-baseline --batch 32 --rounds 10 \
  --save $OUT/callF9/eval32.json > $OUT/callF9/eval32.log 2>&1; echo "eval32 exit $?"
tail -n 2 $OUT/callF9/pipelined.log $OUT/callF9/eval32.log
tar czf $OUT/callF9.tgz -C $OUT callF9 && rm -rf $OUT/callF9
