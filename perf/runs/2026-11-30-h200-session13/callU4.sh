#!/bin/bash
# Session 13, call U4 (after the three install steps): outputs_probe.py (what one more custom-kernel output costs
# the host); and mq_q_probe.py again with MLX_MAX_OPS_PER_BUFFER=4 (MLX's CUDA backend commits its graph every
# 20 ops by default, so perf's eval8 round of 16 kernels starts on the GPU only after the host encoded all of
# them: how much of eval8 is that? informational: a deployment setting, not the kernels').
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session13
mkdir -p $OUT/callU4
timeout 150 python3 $D/outputs_probe.py 6 > $OUT/callU4/outputs_probe.txt 2>&1; echo "outputs probe exit $?"
cat $OUT/callU4/outputs_probe.txt
MLX_MAX_OPS_PER_BUFFER=4 timeout 150 python3 $D/mq_q_probe.py 4 > $OUT/callU4/mq_q_probe_ops4.txt 2>&1; echo "ops4 exit $?"
tail -11 $OUT/callU4/mq_q_probe_ops4.txt
