#!/bin/bash
# Session 14, call V5 (after the three install steps): the fused argmax kernel of the call writes the ids only
# (FUSED); the gate reads the lse from FUSED_LSE (the same source storing it). The argmax cuda gates and nvcc units;
# every argmax mutant on the cuda arm alone; argmax_output_probe.py. The pool follows in V6.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session14
mkdir -p $OUT/callV5
MLXGATE_RESULTS=$OUT/callV5/results.jsonl timeout 150 python3 -m pytest parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py impl/kernels/test_cuda_compile.py -k "cuda or compile or share" \
  --device gpu -n 14 -q -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callV5/gates.txt | tail -4
timeout 120 python3 -m mutants $(python3 -m mutants --list | awk '$1 ~ /^argmax_/ {print $1}') --device gpu \
  --arm cuda --workers 12 --profile dev --results $OUT/callV5/mutants.jsonl 2>&1 | tee $OUT/callV5/mutants.txt | tail -14
timeout 90 python3 $D/argmax_output_probe.py 8 > $OUT/callV5/argmax_output_probe.txt 2>&1; echo "probe exit $?"
tail -16 $OUT/callV5/argmax_output_probe.txt
