#!/bin/bash
# Session 11, call S3 (after the three install steps): probe_mq_stand_in.py.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS3
timeout 300 python3 $D/probe_mq_stand_in.py > $OUT/callS3/probe_mq_stand_in.txt 2>&1; echo "probe exit $?"
cat $OUT/callS3/probe_mq_stand_in.txt
tar czf $OUT/callS3.tgz -C $OUT callS3 && rm -rf $OUT/callS3
