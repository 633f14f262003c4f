#!/bin/bash
# Session 10, call R5 (after the two install steps): ncu on multi-query's partial at 32/8/L8/D128/N32k, the ring and
# the two-stage partial (prof_r.py): speed of light, occupancy, warp states, scheduler, stall sampling per SASS line.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session10
mkdir -p $OUT/callR5/prof
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis --section SourceCounters"
for w in ring two; do
  timeout 120 $NCU -k regex:"partial" --launch-skip 3 --launch-count 1 $S -o $OUT/callR5/prof/$w python3 $D/prof_r.py $w \
    > $OUT/callR5/prof/$w.log 2>&1; echo "ncu $w exit $?"
  $NCU -i $OUT/callR5/prof/$w.ncu-rep --print-details all > $OUT/callR5/prof/$w.txt 2>&1
  $NCU -i $OUT/callR5/prof/$w.ncu-rep --page source --print-source sass --csv > $OUT/callR5/prof/$w.sass.csv 2>&1
  rm -f $OUT/callR5/prof/$w.ncu-rep
done
grep -hE "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issued Warp|Warp Cycles Per Issued|Stall|Dynamic Shared" $OUT/callR5/prof/*.txt | head -60
tar czf $OUT/callR5.tgz -C $OUT callR5 && rm -rf $OUT/callR5
