#!/bin/bash
# Session 13, call U1 (after the three install steps): session 12's open items and one question.
# 1. the rescale mutant at its new killers (V 32000, 151936), cuda arm alone;
# 2. normalized argmax's public call (fused) against the same wrapper around two launches, and the control;
# 3. onekernel_probe.py: what a one-kernel call (init_value zeroing a counter, last threadgroup merging) costs.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session13
mkdir -p $OUT/callU1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callU1/gpu.txt 2>&1
timeout 120 python3 -m mutants argmax_fused_lse_misses_the_rescale --device gpu --arm cuda --workers 4 --profile dev \
  --results $OUT/callU1/mutants.jsonl 2>&1 | tee $OUT/callU1/mutants.txt | tail -6
timeout 150 python3 $D/argmax_public_probe.py 8 > $OUT/callU1/argmax_public_probe.txt 2>&1; echo "argmax probe exit $?"
tail -12 $OUT/callU1/argmax_public_probe.txt
timeout 200 python3 $D/onekernel_probe.py 5 20 > $OUT/callU1/onekernel_probe.txt 2>&1; echo "onekernel probe exit $?"
tail -25 $OUT/callU1/onekernel_probe.txt
