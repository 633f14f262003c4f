#!/bin/bash
# Call C1: every kernel-body mutant against the cuda arm alone (the compiled body must kill it).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callC1
timeout ${MUTANT_TIMEOUT:-420} python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev \
  --results $OUT/callC1/mutants.jsonl 2>&1 | tee $OUT/callC1/mutants.txt | tail -45
tar czf $OUT/callC1.tgz -C $OUT callC1
