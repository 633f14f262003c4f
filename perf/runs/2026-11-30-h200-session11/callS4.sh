#!/bin/bash
# Session 11, call S4 (after the three install steps): the ring's whole-word conversion (chunk_to_half) against the
# body before it (convert_probe.py), ncu on the new ring partial (session 10's prof_r.py), the multi-query cuda gates,
# and the ring mutants on the cuda arm.
export PYTHONPATH=/tmp/site:$PWD:$PWD/perf/runs/2026-11-30-h200-session11 PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session11
mkdir -p $OUT/callS4/prof
timeout 200 python3 $D/convert_probe.py > $OUT/callS4/convert_probe.txt 2>&1; echo "probe exit $?"
cat $OUT/callS4/convert_probe.txt
NCU=/usr/local/cuda/bin/ncu
S="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section SourceCounters"
timeout 100 $NCU -k regex:"partial" --launch-skip 3 --launch-count 1 $S -o $OUT/callS4/prof/ring \
  python3 perf/runs/2026-11-30-h200-session10/prof_r.py ring > $OUT/callS4/prof/ring.log 2>&1; echo "ncu exit $?"
$NCU -i $OUT/callS4/prof/ring.ncu-rep --print-details all > $OUT/callS4/prof/ring.txt 2>&1
$NCU -i $OUT/callS4/prof/ring.ncu-rep --page source --print-source sass --csv > $OUT/callS4/prof/ring.sass.csv 2>&1
rm -f $OUT/callS4/prof/ring.ncu-rep
grep -hE "Duration|Registers Per Thread|Achieved Occupancy|Instructions Executed  |Issued Warp Per Scheduler  " $OUT/callS4/prof/ring.txt | sort -u
MLXGATE_RESULTS=$OUT/callS4/results.jsonl timeout 220 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py impl/kernels/test_cuda_compile_decode.py -k cuda --device gpu -n 14 -q \
  -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callS4/gates.txt | tail -4
timeout 150 python3 -m mutants multi_query_ring_packs_pairs_high_first multi_query_ring_converts_the_slot_being_filled \
  --device gpu --arm cuda --workers 2 --results $OUT/callS4/mutants.jsonl 2>&1 | tee $OUT/callS4/mutants.txt | tail -4
tar czf $OUT/callS4.tgz -C $OUT callS4 && rm -rf $OUT/callS4
