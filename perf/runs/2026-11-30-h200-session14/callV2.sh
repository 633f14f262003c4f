#!/bin/bash
# Session 14, call V2 (warm, V1's machine): every paged and kvq4 mutant on the cuda arm alone; the probe on the
# other three shapes.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session14
mkdir -p $OUT/callV2
timeout 250 python3 -m mutants $(python3 -m mutants --list | awk '$1 ~ /^(paged_|kvq4_)/ {print $1}') --device gpu \
  --arm cuda --workers 12 --profile dev --results $OUT/callV2/mutants.jsonl 2>&1 | tee $OUT/callV2/mutants.txt | tail -30
timeout 260 python3 $D/paged_parts_probe.py 5 kv8-32/8/D128/N32k kvq4-32/8/N32k paged-16/8/D256/N128k \
  > $OUT/callV2/paged_parts_probe.txt 2>&1; echo "probe exit $?"
tail -40 $OUT/callV2/paged_parts_probe.txt
