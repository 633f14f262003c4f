#!/bin/bash
# Session 11, call S1 (step 2 of the device procedure: MLX installed into /tmp/site before this runs):
# probe_s11.py (multi-query split counts, kvq4 8/1 partitions and SIMD groups, argmax against its control, all
# interleaved), and ncu on kvq4 8/1's direct partial and merge.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS1/prof
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $OUT/callS1/gpu.txt 2>&1
timeout 330 python3 $D/probe_s11.py > $OUT/callS1/probe_s11.txt 2>&1; echo "probe exit $?"
cat $OUT/callS1/probe_s11.txt
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
timeout 90 $NCU -k regex:"paged_attention|direct_attention" --launch-skip 4 --launch-count 2 $S -o $OUT/callS1/prof/kvq4 \
  python3 $D/prof_kvq4.py > $OUT/callS1/prof/kvq4.log 2>&1; echo "ncu exit $?"
$NCU -i $OUT/callS1/prof/kvq4.ncu-rep --print-details all > $OUT/callS1/prof/kvq4.txt 2>&1
rm -f $OUT/callS1/prof/kvq4.ncu-rep
grep -hE "  [a-z_]+.*\(|Duration|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Block Limit|Memory Throughput|DRAM Throughput|Issued Warp Per Scheduler" $OUT/callS1/prof/kvq4.txt | head -40
tar czf $OUT/callS1.tgz -C $OUT callS1 && rm -rf $OUT/callS1
