#!/bin/bash
# Session 8, call G4 (after the two install steps): on the final tree (the one-pass multi-query merge; paged's merge
# back to the committed two-pass body): the new Dv-42 paged parity case on the cuda arm, the pooled baseline
# (perf/pooled.sh: 3 processes, a 4th gating against the pool, the calibration), every kernel-body mutant of the
# catalog on the cuda arm alone.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/callG4/pooled
MLXGATE_RESULTS=$OUT/callG4/results.jsonl timeout 60 python3 -m pytest parity/test_paged_attention.py -k "cuda and Dv42" \
  --device gpu -q -rfE -p no:cacheprovider 2>&1 | tee $OUT/callG4/gates.txt | tail -2
OUT=$OUT/callG4/pooled POOL_TIMEOUT=80 GATE_TIMEOUT=85 bash perf/pooled.sh 2>&1 | tail -12
timeout 200 python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev \
  --results $OUT/callG4/mutants.jsonl 2>&1 | tee $OUT/callG4/mutants.txt | tail -4
tar czf $OUT/callG4.tgz -C $OUT callG4 && rm -rf $OUT/callG4
