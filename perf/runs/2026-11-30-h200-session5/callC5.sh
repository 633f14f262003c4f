#!/bin/bash
# Session 5, call C5 (session 4's call E on this pass's kernels): every H200 case under the other two protocols, one process each (perf.run --no-baseline --save):
# pipelined (8 calls submitted per round, the previous round awaited: host time overlaps device time) and
# eval with 32 calls per mx.eval. Beside the pooled eval8 baseline they split a call's time into host,
# per-eval and device parts (perf/RESULTS.md, fifth pass).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callC5
timeout 140 python3 -m perf.run --suite h200 --device gpu --no-baseline --protocol pipelined \
  --save $OUT/callC5/pipelined.json > $OUT/callC5/pipelined.log 2>&1; echo "pipelined exit $?"
timeout 140 python3 -m perf.run --suite h200 --device gpu --no-baseline --batch 32 --rounds 10 \
  --save $OUT/callC5/eval32.json > $OUT/callC5/eval32.log 2>&1; echo "eval32 exit $?"
tail -3 $OUT/callC5/pipelined.log $OUT/callC5/eval32.log
tar czf $OUT/callC5.tgz -C $OUT callC5
