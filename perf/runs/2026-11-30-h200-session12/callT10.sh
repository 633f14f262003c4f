#!/bin/bash
# Session 12, call T10 (after the three install steps): normalized argmax's fused variant with the candidate phase
# (the cuda arm's call on the final tree). Its cuda gates, then every argmax mutant on the cuda arm alone (the four
# cuda-only ones of the fused variant among them).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callT10
MLXGATE_RESULTS=$OUT/callT10/results.jsonl timeout 130 python3 -m pytest parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py parity/test_decode_e2e.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callT10/gates.txt | tail -4
timeout 150 python3 -m mutants $(python3 -m mutants --list | awk '$1 ~ /^argmax_/ {print $1}') --device gpu --arm cuda \
  --workers 10 --profile dev --results $OUT/callT10/mutants.jsonl 2>&1 | tee $OUT/callT10/mutants.txt | tail -14
