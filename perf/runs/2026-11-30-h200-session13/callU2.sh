#!/bin/bash
# Session 13, call U2 (the machine warm after U1): multi-query's partial reads q through its strides (no
# mx.contiguous(q) node). Its cuda gates; every multi-query kernel-body mutant on the cuda arm alone (the new
# multi_query_reads_q_as_contiguous among them); mq_q_probe.py, before / after like for like.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session13
mkdir -p $OUT/callU2
MLXGATE_RESULTS=$OUT/callU2/results.jsonl timeout 200 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py parity/test_decode_e2e.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callU2/gates.txt | tail -4
timeout 200 python3 -m mutants $(python3 -m mutants --list | awk '$1 ~ /^multi_query_/ {print $1}') --device gpu \
  --arm cuda --workers 10 --profile dev --results $OUT/callU2/mutants.jsonl 2>&1 | tee $OUT/callU2/mutants.txt | tail -16
timeout 150 python3 $D/mq_q_probe.py 6 > $OUT/callU2/mq_q_probe.txt 2>&1; echo "probe exit $?"
tail -12 $OUT/callU2/mq_q_probe.txt
