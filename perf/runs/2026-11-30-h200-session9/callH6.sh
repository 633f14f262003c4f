#!/bin/bash
# Session 9, call H6 (after the two install steps): the quantized paged pools' partitions (quant_sweep.py).
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session9 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session9
mkdir -p $OUT/callH6
timeout 300 python3 $D/quant_sweep.py > $OUT/callH6/quant_sweep.txt 2>&1; echo "sweep exit $?"
cat $OUT/callH6/quant_sweep.txt
tar czf $OUT/callH6.tgz -C $OUT callH6 && rm -rf $OUT/callH6
