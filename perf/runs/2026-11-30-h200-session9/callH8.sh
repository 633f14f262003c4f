#!/bin/bash
# Session 9, call H8 (the machine still warm after H7): the pooled baseline of the final tree with each call of a
# round on its own input set (perf.run's new default, --inputs distinct), perf/pooled.sh.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callH8/pooled
OUT=$OUT/callH8/pooled POOL_TIMEOUT=140 GATE_TIMEOUT=140 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callH8.tgz -C $OUT callH8 && rm -rf $OUT/callH8
