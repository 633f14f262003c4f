#!/bin/bash
# Session 10, call R6 (after the two install steps): the prologue change (q and the scale read by the tiles only)
# against the body before (prologue_probe.py), ncu on the new ring partial (prof_r.py), the multi-query cuda gates.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session10 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session10
mkdir -p $OUT/callR6/prof
timeout 200 python3 $D/prologue_probe.py > $OUT/callR6/prologue_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callR6/prologue_probe.txt
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters"
timeout 100 $NCU -k regex:"partial" --launch-skip 3 --launch-count 1 $S -o $OUT/callR6/prof/ring python3 $D/prof_r.py ring \
  > $OUT/callR6/prof/ring.log 2>&1; echo "ncu exit $?"
$NCU -i $OUT/callR6/prof/ring.ncu-rep --print-details all > $OUT/callR6/prof/ring.txt 2>&1
$NCU -i $OUT/callR6/prof/ring.ncu-rep --page source --print-source sass --csv > $OUT/callR6/prof/ring.sass.csv 2>&1
rm -f $OUT/callR6/prof/ring.ncu-rep
grep -hE "Duration|Registers Per Thread|Achieved Occupancy|Block Limit Registers" $OUT/callR6/prof/ring.txt | sort -u
MLXGATE_RESULTS=$OUT/callR6/results.jsonl timeout 200 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py impl/kernels/test_cuda_compile_decode.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callR6/gates.txt | tail -4
tar czf $OUT/callR6.tgz -C $OUT callR6 && rm -rf $OUT/callR6
