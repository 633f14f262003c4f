#!/bin/bash
# Session 9, call H5 (after the two install steps): call H4's sweep with each call of a round on its own input set
# (defaults_sweep2.py), multi-query's splits too.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session9 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session9
mkdir -p $OUT/callH5
timeout 500 python3 $D/defaults_sweep2.py > $OUT/callH5/defaults_sweep2.txt 2>&1; echo "sweep exit $?"
cat $OUT/callH5/defaults_sweep2.txt
tar czf $OUT/callH5.tgz -C $OUT callH5 && rm -rf $OUT/callH5
