#!/bin/bash
# Session 12, call T6 (after the three install steps): normalized argmax's raw-logit scan as committed. Its cuda
# gates; every kernel-body mutant of the catalog on the cuda arm alone; the A/B against the row kernel before it.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session12
mkdir -p $OUT/callT6
MLXGATE_RESULTS=$OUT/callT6/results.jsonl timeout 150 python3 -m pytest parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py parity/test_decode_e2e.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callT6/gates.txt | tail -4
timeout 100 python3 $D/final_probe.py 8 > $OUT/callT6/final_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callT6/final_probe.txt
timeout 300 python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev --results $OUT/callT6/mutants.jsonl \
  2>&1 | tee $OUT/callT6/mutants.txt | tail -6
tar czf $OUT/callT6.tgz -C $OUT callT6 && rm -rf $OUT/callT6
