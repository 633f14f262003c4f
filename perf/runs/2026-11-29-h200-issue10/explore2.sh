#!/bin/bash
# Issue 10, second H200 look: the pipelined body + compiled pair; gates of the paged parity file on cuda.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-29-h200-issue10
timeout 150 python3 $D/sweep.py 1024x4 2048x4 512x4 2>&1 | tee $OUT/sweep2.txt
timeout 200 python3 -m pytest -q -x -p no:cacheprovider --device gpu -k cuda parity/test_paged_attention.py \
  2>&1 | tee $OUT/gates2.txt | tail -15
