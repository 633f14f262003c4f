#!/bin/bash
# Session 11, call S9 (after the three install steps): slots_probe.py, the tiles reading K / V from the ring slots (bf16).
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS9
timeout 400 python3 $D/slots_probe.py > $OUT/callS9/slots_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callS9/slots_probe.txt
tar czf $OUT/callS9.tgz -C $OUT callS9 && rm -rf $OUT/callS9
