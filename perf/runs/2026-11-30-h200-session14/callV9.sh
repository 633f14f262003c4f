#!/bin/bash
# Session 14, call V9 (after the three install steps): the final tree's paged partial strings (a comment in the
# partial body corrected after V1: it named `partial_row` for `partial_shape`; kernel names follow the source, so
# these are new instantiations): the paged attention, kvq4 and decode end-to-end cuda gates and the nvcc units.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callV9
MLXGATE_RESULTS=$OUT/callV9/results.jsonl timeout 250 python3 -m pytest parity/test_paged_attention.py \
  properties/test_paged_attention_props.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  parity/test_decode_e2e.py impl/kernels/ -k cuda --device gpu -n 14 -q -rfEs -p no:cacheprovider 2>&1 \
  | tee $OUT/callV9/gates.txt | tail -4
