#!/bin/bash
# Session 12, call T1 (after the three install steps): normalized argmax's fused variant. The probe (its lse
# against mx.logsumexp, variants should it differ; interleaved timing against the two-launch kernel and the
# control), then the argmax cuda gates.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session12
mkdir -p $OUT/callT1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callT1/gpu.txt 2>&1
timeout 240 python3 $D/fused_probe.py 6 > $OUT/callT1/fused_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callT1/fused_probe.txt
MLXGATE_RESULTS=$OUT/callT1/results.jsonl timeout 200 python3 -m pytest parity/test_normalized_argmax.py \
  properties/test_normalized_argmax_props.py parity/test_decode_e2e.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callT1/gates.txt | tail -15
tar czf $OUT/callT1.tgz -C $OUT callT1 && rm -rf $OUT/callT1
