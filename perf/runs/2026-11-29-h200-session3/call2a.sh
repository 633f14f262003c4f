#!/bin/bash
# Call 2a: multi-query (helper's script: correctness, splits sweep, its cuda tests), then explore2.py.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/work2a
OUT=$OUT/work2a timeout 200 bash perf/runs/2026-11-29-h200-session3/multi_query.sh > /dev/null 2>&1
cat $OUT/work2a/multi_query.txt | grep -v "^  *$" | tail -60
timeout 90 python3 perf/runs/2026-11-29-h200-session3/explore2.py 2>&1 | tee $OUT/work2a/explore2.txt
tar czf $OUT/call2a.tgz -C $OUT work2a
