#!/bin/bash
# Session 7, call F8 (after the two install steps): every kernel-body mutant of the catalog on the cuda arm alone
# (the last whole-catalog run was pass 5's; pass 6 ran the multi-query and kvq4 ones).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callF8
timeout ${MUTANT_TIMEOUT:-280} python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev \
  --results $OUT/callF8/mutants.jsonl 2>&1 | tee $OUT/callF8/mutants.txt | tail -6
tar czf $OUT/callF8.tgz -C $OUT callF8 && rm -rf $OUT/callF8
