#!/bin/bash
# Session 10, call R1 (after the two install steps): multi-query's ring partial (RING_SLOTS = 2 the CUDA default)
# through the multi-query cuda gates (the pipelined schedules held bit-identical to one stage among them), then the
# ring sweep (ring_sweep.py).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session10
mkdir -p $OUT/callR1
MLXGATE_RESULTS=$OUT/callR1/results.jsonl timeout 200 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py impl/kernels/test_cuda_compile_decode.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callR1/gates.txt | tail -25
timeout 330 python3 $D/ring_sweep.py > $OUT/callR1/ring_sweep.txt 2>&1; echo "sweep exit $?"
cat $OUT/callR1/ring_sweep.txt
tar czf $OUT/callR1.tgz -C $OUT callR1 && rm -rf $OUT/callR1
