#!/bin/bash
# Session 14, call V8 (after the three install steps): the two merge gates (multi-query's, paged attention's) now draw
# their partials from one strategy, properties.strategies.split_partials (new draws for both): their cuda cases, and
# the two mutants whose first killers they are.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callV8
MLXGATE_RESULTS=$OUT/callV8/results.jsonl timeout 120 python3 -m pytest parity/test_paged_attention.py \
  parity/test_multi_query.py -k "merge_matches and cuda" --device gpu -n 8 -q -rfEs -p no:cacheprovider 2>&1 \
  | tee $OUT/callV8/gates.txt | tail -4
timeout 120 python3 -m mutants paged_merge_reads_the_sum_as_the_max multi_query_merge_reads_l_from_m --device gpu \
  --arm cuda --workers 4 --profile dev --results $OUT/callV8/mutants.jsonl 2>&1 | tee $OUT/callV8/mutants.txt | tail -5
