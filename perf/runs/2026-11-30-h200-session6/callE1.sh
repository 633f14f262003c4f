#!/bin/bash
# Session 6, call E1 (after the two install steps): explore_e.py (launch geometry and KV4 load variants, timed),
# then ncu (speed of light, occupancy, warp states, pipes, instruction mix, stall sampling per SASS line) on the
# partials of multi-query, paged bf16 and paged KV4 at 32/8/D128/N32k.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session6
mkdir -p $OUT/callE1/prof
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv > $OUT/callE1/gpu.txt
timeout 200 python3 $D/explore_e.py > $OUT/callE1/explore_e.txt 2>&1; echo "explore_e exit $?"
cat $OUT/callE1/explore_e.txt
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats --section MemoryWorkloadAnalysis --section SourceCounters"
for w in mq paged q4; do
  timeout 90 $NCU -k regex:"partial" --launch-skip 3 --launch-count 1 $S -o $OUT/callE1/prof/$w python3 $D/prof_e.py $w \
    > $OUT/callE1/prof/$w.log 2>&1; echo "ncu $w exit $?"
  $NCU -i $OUT/callE1/prof/$w.ncu-rep --print-details all > $OUT/callE1/prof/$w.txt 2>&1
  $NCU -i $OUT/callE1/prof/$w.ncu-rep --page source --print-source sass --csv > $OUT/callE1/prof/$w.sass.csv 2>&1
  rm -f $OUT/callE1/prof/$w.ncu-rep
done
grep -hE "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issued Warp|Warp Cycles Per Issued" $OUT/callE1/prof/*.txt
ls -la $OUT/callE1/prof; ls /usr/local/cuda/bin | tr '\n' ' '
tar czf $OUT/callE1.tgz -C $OUT callE1 && rm -rf $OUT/callE1
