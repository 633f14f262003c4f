#!/bin/bash
# Session 10, call R3 (after the two install steps): the final tree's multi-query cuda gates (the ring the CUDA
# default; test_pipelined_partials_match_one_stage: two stages and rings 2 / 4 bit-identical to one stage, a view
# whose rows the copies cannot take among them), then every kernel-body mutant of the catalog on the cuda arm (the
# new multi_query_ring_converts_the_slot_being_filled among them).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callR3
MLXGATE_RESULTS=$OUT/callR3/results.jsonl timeout 220 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py impl/kernels/test_cuda_compile_decode.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callR3/gates.txt | tail -8
timeout 330 python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev \
  --results $OUT/callR3/mutants.jsonl 2>&1 | tee $OUT/callR3/mutants.txt | tail -4
tar czf $OUT/callR3.tgz -C $OUT callR3 && rm -rf $OUT/callR3
