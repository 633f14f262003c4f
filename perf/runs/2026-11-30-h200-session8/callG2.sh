#!/bin/bash
# Session 8, call G2 (after the two install steps): multi-query's split counts swept with the one-pass merge
# (splits_sweep.py); the cuda tests of multi-query and kvq4 (the merge is shared) and the three merge body mutants on
# the cuda arm.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session8
mkdir -p $OUT/callG2
MLXGATE_RESULTS=$OUT/callG2/results.jsonl timeout 200 python3 -m pytest parity/test_multi_query.py \
  parity/test_kvq4_decode.py properties/test_multi_query_props.py properties/test_kvq4_decode_props.py \
  impl/kernels/test_cuda_compile_decode.py -k cuda --device gpu -n 14 -q -rfE -p no:cacheprovider \
  2>&1 | tee $OUT/callG2/gates.txt | tail -6
timeout 120 python3 -m mutants kvq4_combine_without_max_rescale kvq4_gqa_head_map_modulo \
  multi_query_merge_without_max_rescale --device gpu --arm cuda --workers 3 --profile dev \
  --results $OUT/callG2/mutants.jsonl 2>&1 | tee $OUT/callG2/mutants.txt | tail -5
timeout 200 python3 $D/splits_sweep.py > $OUT/callG2/splits_sweep.txt 2>&1; echo "sweep exit $?"
cat $OUT/callG2/splits_sweep.txt
tar czf $OUT/callG2.tgz -C $OUT callG2 && rm -rf $OUT/callG2
