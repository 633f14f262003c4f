#!/bin/bash
# Issue 10, first H200 look at the new direct paged kernel: its gates on the cuda arm, then the sweep.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-29-h200-issue10
timeout 200 python3 -m pytest -q -x -p no:cacheprovider --device gpu -k cuda \
  parity/test_paged_attention.py properties/test_paged_attention_props.py parity/test_kv_attend.py \
  2>&1 | tee $OUT/gates.txt | tail -15
timeout 200 python3 $D/sweep.py 1024x4 512x4 2048x4 1024x8 2>&1 | tee $OUT/sweep.txt
