#!/bin/bash
# Session 5, call C4: one re-targeted mutant on the cuda arm, then the pooled H200 baseline of this tree (3 separate perf.run processes, pooled, then a 4th
# process gating against it, calibration), via the committed pooled.sh.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/pooled
# First the one mutant whose substitution moved after call C3 (kvq4's output head map, now in the shared merge).
timeout 90 python3 -m mutants kvq4_gqa_head_map_modulo --device gpu --arm cuda --profile dev \
  --results $OUT/pooled/mutant_kvq4_gqa.jsonl 2>&1 | tee $OUT/pooled/mutant_kvq4_gqa.txt | tail -3
OUT=$OUT/pooled POOL_TIMEOUT=${POOL_TIMEOUT:-125} GATE_TIMEOUT=${GATE_TIMEOUT:-150} bash perf/runs/2026-11-29-h200-pooled/pooled.sh 2>&1 | tail -40
tar czf $OUT/callC4.tgz -C $OUT pooled
