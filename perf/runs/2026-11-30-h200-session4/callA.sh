#!/bin/bash
# Call A (after the two install steps, same command): kvq4 on the direct body (timings, partition and
# rows sweep, each variant checked against the seed body), then multi-query's two-tile pack (its script).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session4
mkdir -p $OUT/callA
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callA/gpu.txt 2>&1
timeout 170 python3 $D/kvq4_direct.py 2>&1 | tee $OUT/callA/kvq4_direct.txt
OUT=$OUT/callA timeout 170 bash $D/multi_query_pack.sh > /dev/null 2>&1
grep -v "^  *$" $OUT/callA/multi_query_pack.txt | tail -70
tar czf $OUT/callA.tgz -C $OUT callA
