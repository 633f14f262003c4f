#!/bin/bash
# Session 8, call G7 (after the two install steps): the new test of multi-query's merge alone against the float64
# oracle reference.attention.split_merge_ref (parity/test_multi_query.py::test_merge_matches_float64_oracle) on the
# cuda arm, and the same test with the merge's rescale removed (the mutant multi_query_merge_without_max_rescale's
# body patch, applied by hand to a copy) to see it fail.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callG7
MLXGATE_RESULTS=$OUT/callG7/results.jsonl timeout 150 python3 -m pytest parity/test_multi_query.py \
  -k "merge_matches and cuda" --device gpu -q -rfE -p no:cacheprovider 2>&1 | tee $OUT/callG7/gates.txt | tail -4
sed -i 's/w = metal::exp(ms - next);/w = 1.0f;/' impl/multi_query.py && grep -c "w = 1.0f;" impl/multi_query.py
timeout 150 python3 -m pytest parity/test_multi_query.py -k "merge_matches and cuda" --device gpu -q -p no:cacheprovider \
  2>&1 | tee $OUT/callG7/broken.txt | tail -3
tar czf $OUT/callG7.tgz -C $OUT callG7 && rm -rf $OUT/callG7
