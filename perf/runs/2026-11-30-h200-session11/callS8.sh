#!/bin/bash
# Session 11, call S8 (after the three install steps): every kernel-body mutant of the catalog on the cuda arm alone,
# on the final tree (the ring's whole-word conversion; S4 ran the multi-query gates on it and the two ring mutants).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
mkdir -p $OUT/callS8
timeout 400 python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev --results $OUT/callS8/mutants.jsonl \
  2>&1 | tee $OUT/callS8/mutants.txt | tail -6
tar czf $OUT/callS8.tgz -C $OUT callS8 && rm -rf $OUT/callS8
