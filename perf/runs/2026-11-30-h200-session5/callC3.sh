#!/bin/bash
# Session 5, call C3: every kernel-body mutant against the cuda arm alone (the compiled body must kill it), then
# ncu on multi-query's partial and sliced merge as committed (32/8/L8/D128/N32k; call C1 profiled the bodies before).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session5
mkdir -p $OUT/callC3/prof
timeout ${MUTANT_TIMEOUT:-300} python3 -m mutants --device gpu --arm cuda --workers 10 --profile dev \
  --results $OUT/callC3/mutants.jsonl 2>&1 | tee $OUT/callC3/mutants.txt | tail -45
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
timeout 60 /usr/local/cuda/bin/ncu -k regex:"multi_query" --launch-skip 6 --launch-count 2 $S \
  python3 $D/prof_c.py 0 2 > $OUT/callC3/prof/mq_tree.txt 2>&1; echo "prof exit $?"
grep -hE "multi_query_(partial|merge)|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp" $OUT/callC3/prof/*.txt | head -30
tar czf $OUT/callC3.tgz -C $OUT callC3
