#!/bin/bash
# Call A (after the two install steps, same command): kvq4 on the direct body (timings, partition and
# rows sweep, each variant checked against the seed body); the paged partial's wide loads / lane maps
# (helper script paged_wide.sh: correctness per variant, then timings against MLX SDPA); multi-query's
# two-tile pack (helper script multi_query_pack.sh).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session4
mkdir -p $OUT/callA
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callA/gpu.txt 2>&1
timeout 150 python3 $D/kvq4_direct.py > $OUT/callA/kvq4_direct.txt 2>&1
OUT=$OUT/callA timeout 150 bash $D/paged_wide.sh > $OUT/callA/paged_wide.log 2>&1
OUT=$OUT/callA timeout 150 bash $D/multi_query_pack.sh > /dev/null 2>&1
grep -v "^PASS" $OUT/callA/paged_wide.txt | grep -v "^  *$" | tail -30
grep -v "^  *$" $OUT/callA/multi_query_pack.txt | grep -v "PASS" | tail -40
cat $OUT/callA/kvq4_direct.txt | tail -45
tar czf $OUT/callA.tgz -C $OUT callA
