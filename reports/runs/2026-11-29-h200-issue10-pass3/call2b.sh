#!/bin/bash
# Call 2b: the cuda-arm gates of every kernel (multi-query included), then every kernel-body mutant
# against the cuda arm alone (the compiled body must kill it, not the graph mirror).
export PYTHONPATH=/tmp/site:$PWD MLXGATE_RESULTS=$OUT/work2b/results.jsonl PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/work2b
git rev-parse HEAD > $OUT/work2b/commit.txt 2>/dev/null
timeout ${TEST_TIMEOUT:-280} python3 -m pytest impl/kernels parity/test_paged_attention.py \
  properties/test_paged_attention_props.py properties/test_block_table.py parity/test_kv_attend.py parity/test_decode_e2e.py \
  parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py parity/test_multi_query.py properties/test_multi_query_props.py \
  -k "cuda or compile or translation" --device gpu -n 12 -q -rfE --durations=5 -p no:cacheprovider \
  2>&1 | tee $OUT/work2b/gates.txt | tail -14
timeout ${MUTANT_TIMEOUT:-270} python3 -m mutants --device gpu --arm cuda --workers 8 --profile dev \
  --results $OUT/work2b/mutants.jsonl 2>&1 | tee $OUT/work2b/mutants.txt | tail -45
tar czf $OUT/call2b.tgz -C $OUT work2b
