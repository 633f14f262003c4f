#!/bin/bash
# Session 11, call S11 (after the three install steps): host_probe.py, the host's share of a multi-query call.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS11
timeout 200 python3 $D/host_probe.py > $OUT/callS11/host_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callS11/host_probe.txt
tar czf $OUT/callS11.tgz -C $OUT callS11 && rm -rf $OUT/callS11
