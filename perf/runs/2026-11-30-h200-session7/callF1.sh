#!/bin/bash
# Session 7, call F1 (after the two install steps): host_split.py (where eval8's time goes), and the same under nsys.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session7
mkdir -p $OUT/callF1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv > $OUT/callF1/gpu.txt 2>&1
timeout 200 python3 $D/host_split.py > $OUT/callF1/host_split.txt 2>&1; echo "host_split exit $?"
cat $OUT/callF1/host_split.txt
NSYS=$(ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
[ -z "$NSYS" ] && NSYS=$(command -v nsys)
echo "nsys: $NSYS"
if [ -n "$NSYS" ]; then
  timeout 120 $NSYS profile -t cuda,nvtx,osrt -s none --cpuctxsw=none -o $OUT/callF1/trace python3 $D/trace_f1.py > $OUT/callF1/trace_run.txt 2>&1
  echo "nsys exit $?"; tail -5 $OUT/callF1/trace_run.txt
  for r in cuda_gpu_trace cuda_api_trace cuda_api_sum cuda_gpu_kern_sum nvtx_sum; do
    timeout 60 $NSYS stats -r $r --format csv -o $OUT/callF1/$r $OUT/callF1/trace.nsys-rep > /dev/null 2>&1
  done
  ls $OUT/callF1; head -30 $OUT/callF1/cuda_api_sum*.csv
fi
tar czf $OUT/callF1.tgz -C $OUT callF1 && rm -rf $OUT/callF1
