#!/bin/bash
# Session 11, call S12 (after the three install steps): wrapper_probe.py, the public call's host cost piece by piece.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS12
lscpu | grep -E "Model name|MHz" > $OUT/callS12/cpu.txt 2>&1
timeout 200 python3 $D/wrapper_probe.py > $OUT/callS12/wrapper_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callS12/cpu.txt $OUT/callS12/wrapper_probe.txt
tar czf $OUT/callS12.tgz -C $OUT callS12 && rm -rf $OUT/callS12
