#!/bin/bash
# Session 6, call E3 (after the two install steps): explore_g.py (multi-query: two stages + ldmatrix.x4 + the skipped
# rescale against the committed module: bit-identical outputs, then timings), ncu on the new partial, the cuda-arm
# tests of multi-query, kvq4 and the simdgroup probe, then the multi-query and kvq4 mutants on the cuda arm.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session6
mkdir -p $OUT/callE3/prof
timeout 170 python3 $D/explore_g.py > $OUT/callE3/explore_g.txt 2>&1; echo "explore_g exit $?"
cat $OUT/callE3/explore_g.txt
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section SourceCounters"
timeout 80 $NCU -k regex:"multi_query" --launch-skip 4 --launch-count 2 $S -o $OUT/callE3/prof/now python3 $D/prof_f.py now \
  > $OUT/callE3/prof/now.log 2>&1; echo "ncu exit $?"
$NCU -i $OUT/callE3/prof/now.ncu-rep --print-details all > $OUT/callE3/prof/now.txt 2>&1
$NCU -i $OUT/callE3/prof/now.ncu-rep --page source --print-source sass --csv > $OUT/callE3/prof/now.sass.csv 2>&1
rm -f $OUT/callE3/prof/now.ncu-rep
grep -hE "multi_query_(partial|merge)|Duration|DRAM Throughput|Registers Per|Issue Slots Busy" $OUT/callE3/prof/now.txt
MLXGATE_RESULTS=$OUT/callE3/results.jsonl timeout 200 python3 -m pytest impl/kernels parity/test_multi_query.py \
  properties/test_multi_query_props.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  -k "cuda or compile or translation" --device gpu -n 14 -q -rfE --durations=5 -p no:cacheprovider \
  2>&1 | tee $OUT/callE3/gates.txt | tail -8
M=$(python3 -m mutants --list 2>/dev/null | awk '{print $1}' | grep -E "^(multi_query|kvq4)_" | grep -v trace | tr '\n' ' ')
timeout 200 python3 -m mutants $M --device gpu --arm cuda --workers 8 --profile dev \
  --results $OUT/callE3/mutants.jsonl 2>&1 | tee $OUT/callE3/mutants.txt | tail -22
tar czf $OUT/callE3.tgz -C $OUT callE3 && rm -rf $OUT/callE3
