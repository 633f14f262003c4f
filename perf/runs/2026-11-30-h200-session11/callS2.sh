#!/bin/bash
# Session 11, call S2 (after the three install steps): probe_tb.py, the direct body's tokens per step (TB) and rows
# per threadgroup (R) against the defaults, interleaved.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS2
timeout 400 python3 $D/probe_tb.py > $OUT/callS2/probe_tb.txt 2>&1; echo "probe exit $?"
cat $OUT/callS2/probe_tb.txt
tar czf $OUT/callS2.tgz -C $OUT callS2 && rm -rf $OUT/callS2
