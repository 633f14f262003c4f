#!/bin/bash
# Session 6, call E2 (after the two install steps): explore_f.py (the two-stage multi-query partial against the
# committed module: bit-identical outputs, then timings), ncu on both partials, then the cuda-arm multi-query and kvq4
# tests (kvq4's seed body shares the merge).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session6
mkdir -p $OUT/callE2/prof
timeout 200 python3 $D/explore_f.py > $OUT/callE2/explore_f.txt 2>&1; echo "explore_f exit $?"
cat $OUT/callE2/explore_f.txt
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section SourceCounters"
for w in before now; do
  timeout 90 $NCU -k regex:"multi_query" --launch-skip 4 --launch-count 2 $S -o $OUT/callE2/prof/$w python3 $D/prof_f.py $w \
    > $OUT/callE2/prof/$w.log 2>&1; echo "ncu $w exit $?"
  $NCU -i $OUT/callE2/prof/$w.ncu-rep --print-details all > $OUT/callE2/prof/$w.txt 2>&1
  $NCU -i $OUT/callE2/prof/$w.ncu-rep --page source --print-source sass --csv > $OUT/callE2/prof/$w.sass.csv 2>&1
  rm -f $OUT/callE2/prof/$w.ncu-rep
done
grep -hE "multi_query_(partial|merge)|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Issue Slots Busy" $OUT/callE2/prof/*.txt
MLXGATE_RESULTS=$OUT/callE2/results.jsonl timeout 300 python3 -m pytest impl/kernels parity/test_multi_query.py \
  properties/test_multi_query_props.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  -k "cuda or compile or translation" --device gpu -n 14 -q -rfE --durations=5 -p no:cacheprovider \
  2>&1 | tee $OUT/callE2/gates.txt | tail -15
tar czf $OUT/callE2.tgz -C $OUT callE2 && rm -rf $OUT/callE2
