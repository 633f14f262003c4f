#!/bin/bash
# Session 7, call F2 (after the two install steps): a CUPTI timeline of eval8 rounds (trace_f2.py), and env_f2.py
# under MLX's defaults and three diagnostic settings of its CUDA graph batching.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session7
mkdir -p $OUT/callF2
timeout 150 python3 $D/trace_f2.py $OUT/callF2/trace.json > $OUT/callF2/trace_run.txt 2>&1; echo "trace exit $?"
tail -3 $OUT/callF2/trace_run.txt; ls -la $OUT/callF2
gzip $OUT/callF2/trace.json
for setting in "" "MLX_USE_CUDA_GRAPHS=0" "MLX_MAX_MB_PER_BUFFER=100000" "MLX_MAX_OPS_PER_BUFFER=4"; do
  env $setting timeout 60 python3 $D/env_f2.py >> $OUT/callF2/env.txt 2>&1
done
cat $OUT/callF2/env.txt
tar czf $OUT/callF2.tgz -C $OUT callF2 && rm -rf $OUT/callF2
