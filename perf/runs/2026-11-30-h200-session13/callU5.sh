#!/bin/bash
# Session 13, call U5 (after the three install steps): multi-query's partial (and kvq4's seed partial, whose merge
# is multi-query's) write one packed output. The cuda gates of both; every multi-query and kvq4 kernel-body mutant
# on the cuda arm alone; mq_parts_probe.py (one output against three, like for like).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session13
mkdir -p $OUT/callU5
MLXGATE_RESULTS=$OUT/callU5/results.jsonl timeout 240 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  parity/test_decode_e2e.py impl/kernels/test_cuda_compile_decode.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callU5/gates.txt | tail -4
timeout 240 python3 -m mutants $(python3 -m mutants --list | awk '$1 ~ /^(multi_query_|kvq4_)/ {print $1}') --device gpu \
  --arm cuda --workers 12 --profile dev --results $OUT/callU5/mutants.jsonl 2>&1 | tee $OUT/callU5/mutants.txt | tail -26
timeout 150 python3 $D/mq_parts_probe.py 6 > $OUT/callU5/mq_parts_probe.txt 2>&1; echo "probe exit $?"
tail -16 $OUT/callU5/mq_parts_probe.txt
