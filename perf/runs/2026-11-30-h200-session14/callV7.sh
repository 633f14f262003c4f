#!/bin/bash
# Session 14, call V7 (after the three install steps): the paged merge alone against the float64 oracle (the new
# test_merge_matches_float64_oracle, partials packed by pack_partials with NaN past the call's partitions), and the
# two mutants of the packed merge on the cuda arm alone (their killers now include that test).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callV7
MLXGATE_RESULTS=$OUT/callV7/results.jsonl timeout 120 python3 -m pytest parity/test_paged_attention.py \
  -k "merge or layout" --device gpu -n 8 -q -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callV7/gates.txt | tail -5
timeout 150 python3 -m mutants paged_merge_reads_the_sum_as_the_max paged_merge_without_max_rescale --device gpu \
  --arm cuda --workers 4 --profile dev --results $OUT/callV7/mutants.jsonl 2>&1 | tee $OUT/callV7/mutants.txt | tail -6
