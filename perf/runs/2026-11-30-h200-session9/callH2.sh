#!/bin/bash
# Session 9, call H2 (the machine still warm after H1): the pooled baseline of this tree (perf/pooled.sh), with
# more time for process 1 than session 8's G9 gave it (its JIT compiles on a fresh machine cut it at 80 s).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callH2/pooled
OUT=$OUT/callH2/pooled POOL_TIMEOUT=125 GATE_TIMEOUT=110 bash perf/pooled.sh 2>&1 | tail -14
tar czf $OUT/callH2.tgz -C $OUT callH2 && rm -rf $OUT/callH2
