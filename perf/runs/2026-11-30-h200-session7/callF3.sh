#!/bin/bash
# Session 7, call F3 (after the two install steps): host_split.py on the tree with the memo of validated calls
# (impl/recent_calls.py) and the argmax reshapes skipped for [B, V]; the cuda tests of every public kernel function.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session7
mkdir -p $OUT/callF3
timeout 120 python3 $D/host_split.py > $OUT/callF3/host_split.txt 2>&1; echo "host_split exit $?"
cat $OUT/callF3/host_split.txt
MLXGATE_RESULTS=$OUT/callF3/results.jsonl timeout 300 python3 -m pytest impl/test_recent_calls.py parity/test_multi_query.py \
  parity/test_kvq4_decode.py parity/test_paged_attention.py parity/test_normalized_argmax.py \
  properties/test_multi_query_props.py properties/test_kvq4_decode_props.py properties/test_paged_attention_props.py \
  properties/test_normalized_argmax_props.py -k "cuda or recent" --device gpu -n 14 -q -rfE -p no:cacheprovider \
  2>&1 | tee $OUT/callF3/gates.txt | tail -8
tar czf $OUT/callF3.tgz -C $OUT callF3 && rm -rf $OUT/callF3
