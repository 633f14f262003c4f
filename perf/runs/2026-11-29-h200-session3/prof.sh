#!/bin/bash
# ncu on the H200: the paged partial at 32/8/D128/N32k and 16/8/D256/N128k, kvq4's partial at 32/8/N32k
# (the second call of each: the first compiles). Sections: speed of light, memory, occupancy, warp state.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/prof
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats"
for w in paged128 paged256; do
  timeout 100 /usr/local/cuda/bin/ncu -k regex:paged_attention_partial --launch-skip 1 --launch-count 1 $S \
    python3 perf/runs/2026-11-29-h200-session3/prof.py $w > $OUT/prof/$w.txt 2>&1; echo "$w exit $?"
done
timeout 100 /usr/local/cuda/bin/ncu -k regex:kvq4 --launch-skip 2 --launch-count 2 $S \
  python3 perf/runs/2026-11-29-h200-session3/prof.py kvq4 > $OUT/prof/kvq4.txt 2>&1; echo "kvq4 exit $?"
grep -hE "^  [a-z_]|Memory Throughput|DRAM Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit Registers|Warp Cycles Per Issued|Stall|Compute \(SM\) Throughput|Issue Slots|L2 Hit" $OUT/prof/*.txt | head -90
tar czf $OUT/prof.tgz -C $OUT prof
