#!/bin/bash
# Session 9, call H9 (after the two install steps): every H200 case of the final tree pipelined with 8 calls per
# round (each on its own input set) and with one call per round, one process each (perf.run --no-baseline --save).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callH9
timeout 200 python3 -m perf.run --suite h200 --device gpu --no-baseline --protocol pipelined \
  --save $OUT/callH9/pipelined8.json > $OUT/callH9/pipelined8.log 2>&1; echo "pipelined8 exit $?"
tail -n 1 $OUT/callH9/pipelined8.log
timeout 200 python3 -m perf.run --suite h200 --device gpu --no-baseline --protocol pipelined --batch 1 \
  --save $OUT/callH9/pipelined1.json > $OUT/callH9/pipelined1.log 2>&1; echo "pipelined1 exit $?"
tail -n 1 $OUT/callH9/pipelined1.log
tar czf $OUT/callH9.tgz -C $OUT callH9 && rm -rf $OUT/callH9
