#!/bin/bash
# Session 8, call G3 (after the two install steps): paged attention's merge, two-pass (A) against one-pass (B),
# interleaved in one process (paged_merge_probe.py); the cuda tests of paged attention and kvq4 (its direct body
# merges with paged's merge) on this tree.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session8
mkdir -p $OUT/callG3
timeout 150 python3 $D/paged_merge_probe.py > $OUT/callG3/paged_merge_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callG3/paged_merge_probe.txt
MLXGATE_RESULTS=$OUT/callG3/results.jsonl timeout 260 python3 -m pytest parity/test_paged_attention.py \
  parity/test_kvq4_decode.py properties/test_paged_attention_props.py properties/test_kvq4_decode_props.py \
  impl/kernels/test_cuda_compile.py -k cuda --device gpu -n 14 -q -rfE -p no:cacheprovider \
  2>&1 | tee $OUT/callG3/gates.txt | tail -6
tar czf $OUT/callG3.tgz -C $OUT callG3 && rm -rf $OUT/callG3
