#!/bin/bash
# Session 5, call C1 (after the two install steps, same command): explore_c.py (multi-query PREFETCH x TILES
# correctness and timings, the unrolled merges against the old ones in paged / kvq4 / multi-query), then ncu on
# multi-query's partial and merge, old kernel (PREFETCH=0, TILES=2) against PREFETCH=1 with TILES 1 and 2.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session5
mkdir -p $OUT/callC1/prof
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > $OUT/callC1/gpu.txt
timeout 120 python3 $D/explore_c.py correct > $OUT/callC1/correct.txt 2>&1; echo "correct exit $?"
tail -3 $OUT/callC1/correct.txt
timeout 260 python3 $D/explore_c.py time > $OUT/callC1/time.txt 2>&1; echo "time exit $?"
cat $OUT/callC1/time.txt
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats"
for cfg in "0 2" "1 2" "1 1"; do
  tag=$(echo $cfg | tr ' ' _)
  timeout 60 /usr/local/cuda/bin/ncu -k regex:"multi_query" --launch-skip 6 --launch-count 2 $S \
    python3 $D/prof_c.py $cfg > $OUT/callC1/prof/mq_$tag.txt 2>&1; echo "prof $tag exit $?"
done
grep -hE "multi_query_(partial|merge)|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Stall|Theoretical Occupancy" $OUT/callC1/prof/*.txt | head -60
tar czf $OUT/callC1.tgz -C $OUT callC1
