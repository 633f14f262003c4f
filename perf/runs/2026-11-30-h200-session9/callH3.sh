#!/bin/bash
# Session 9, call H3 (after the two install steps): the issue-10 target cases and their controls with a round's 8
# calls on the same inputs (perf's protocol) against 8 different input sets (distinct_probe.py), and call H1's
# stream bounds likewise.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session9 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session9
mkdir -p $OUT/callH3
timeout 400 python3 $D/distinct_probe.py > $OUT/callH3/distinct_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callH3/distinct_probe.txt
tar czf $OUT/callH3.tgz -C $OUT callH3 && rm -rf $OUT/callH3
