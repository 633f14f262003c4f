#!/bin/bash
# Session 6, call E6: every H200 case in the pipelined protocol (perf.run --protocol pipelined) on the final tree,
# for the protocol column of perf/RESULTS.md (pass 5's call C5 measured the previous multi-query kernel).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callE6
timeout 110 python3 -m perf.run --suite h200 --device gpu --protocol pipelined --no-baseline \
  --results $OUT/callE6/pipelined.jsonl --save $OUT/callE6/pipelined.json > $OUT/callE6/pipelined.log 2>&1
echo "exit $?"; tail -3 $OUT/callE6/pipelined.log
