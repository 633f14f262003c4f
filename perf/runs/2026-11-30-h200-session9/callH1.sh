#!/bin/bash
# Session 9, call H1 (after the two install steps): the speed-of-light probe (sol_probe.py); the cuda gates of
# multi-query and kvq4 with multi-query's 256-threadgroup default (session 8 changed it after its last gate run).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session9
mkdir -p $OUT/callH1
timeout 200 python3 $D/sol_probe.py > $OUT/callH1/sol_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callH1/sol_probe.txt
MLXGATE_RESULTS=$OUT/callH1/results.jsonl timeout 230 python3 -m pytest parity/test_multi_query.py \
  parity/test_kvq4_decode.py properties/test_multi_query_props.py properties/test_kvq4_decode_props.py \
  impl/kernels/test_cuda_compile_decode.py -k cuda --device gpu -n 14 -q -rfEs -p no:cacheprovider \
  2>&1 | tee $OUT/callH1/gates.txt | tail -8
tar czf $OUT/callH1.tgz -C $OUT callH1 && rm -rf $OUT/callH1
