#!/bin/bash
# Session 8, call G1 (after the two install steps): multi-query's merge, committed (A) against a one-pass candidate (B),
# interleaved in one process (merge_probe.py); whether cuda_kernel takes > 48 KiB of dynamic shared memory
# (dsmem_probe.py).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session8
mkdir -p $OUT/callG1
timeout 60 python3 $D/dsmem_probe.py > $OUT/callG1/dsmem_probe.txt 2>&1; echo "dsmem exit $?"
timeout 400 python3 $D/merge_probe.py > $OUT/callG1/merge_probe.txt 2>&1; echo "merge exit $?"
cat $OUT/callG1/dsmem_probe.txt $OUT/callG1/merge_probe.txt
