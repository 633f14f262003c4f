#!/bin/bash
# Call B1 (after the two install steps, same command): explore_b.py (kvq4 after the scale fix, paged
# BATCH_TOKENS 8/16, three timing protocols), then ncu on the paged partial + merge (D128, D256) and
# kvq4's direct body at 8/1 (the third call of each: the first compiles).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session4
mkdir -p $OUT/callB1/prof
timeout 200 python3 $D/explore_b.py > $OUT/callB1/explore_b.txt 2>&1; echo "explore_b exit $?"
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats"
for w in paged128 paged256 kvq4_81; do
  timeout 70 /usr/local/cuda/bin/ncu -k regex:"paged_attention|direct_attention" --launch-skip 4 --launch-count 2 $S \
    python3 $D/prof_b.py $w > $OUT/callB1/prof/$w.txt 2>&1; echo "$w exit $?"
done
cat $OUT/callB1/explore_b.txt
grep -hE "^  [a-z_]|DRAM Throughput|Duration|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Compute \(SM\) Throughput|Grid Size" $OUT/callB1/prof/*.txt | head -60
tar czf $OUT/callB1.tgz -C $OUT callB1
