#!/bin/bash
# Session 9, call H7 (after the two install steps): the new defaults (plain paged pools aim at 512 threadgroups;
# affine pools and kvq4's direct body keep partitions of >= 512 tokens; kvq4 runs the direct body with one KV head
# too): the cuda gates of paged attention and kvq4, then every kernel-body mutant of the catalog on the cuda arm.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callH7
MLXGATE_RESULTS=$OUT/callH7/results.jsonl timeout 260 python3 -m pytest parity/test_paged_attention.py \
  parity/test_kvq4_decode.py properties/test_paged_attention_props.py properties/test_kvq4_decode_props.py \
  impl/kernels/test_cuda_compile.py -k cuda --device gpu -n 14 -q -rfEs -p no:cacheprovider \
  2>&1 | tee $OUT/callH7/gates.txt | tail -6
timeout 300 python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev \
  --results $OUT/callH7/mutants.jsonl 2>&1 | tee $OUT/callH7/mutants.txt | tail -4
tar czf $OUT/callH7.tgz -C $OUT callH7 && rm -rf $OUT/callH7
