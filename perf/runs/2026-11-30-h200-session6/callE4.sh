#!/bin/bash
# Session 6, call E4 (after the two install steps): explore_h.py (16x8x16 products and the bfloat16 load: checks
# against the committed module, timings), ncu on the partial, the cuda-arm tests of multi-query, kvq4 and the probes,
# the multi-query and kvq4 mutants on the cuda arm.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session6
mkdir -p $OUT/callE4/prof
timeout 150 python3 $D/explore_h.py > $OUT/callE4/explore_h.txt 2>&1; echo "explore_h exit $?"
cat $OUT/callE4/explore_h.txt
NCU=/usr/local/cuda/bin/ncu
timeout 60 $NCU -k regex:"multi_query" --launch-skip 4 --launch-count 2 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy python3 $D/prof_f.py now > $OUT/callE4/prof/now.txt 2>&1; echo "ncu exit $?"
grep -hE "multi_query_(partial|merge)|Duration|DRAM Throughput|Registers Per" $OUT/callE4/prof/now.txt
MLXGATE_RESULTS=$OUT/callE4/results.jsonl timeout 170 python3 -m pytest impl/kernels parity/test_multi_query.py \
  properties/test_multi_query_props.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  -k "cuda or compile or translation" --device gpu -n 14 -q -rfE --durations=3 -p no:cacheprovider \
  2>&1 | tee $OUT/callE4/gates.txt | tail -6
M=$(python3 -m mutants --list 2>/dev/null | awk '{print $1}' | grep -E "^(multi_query|kvq4)_" | grep -v trace | tr '\n' ' ')
timeout 150 python3 -m mutants $M --device gpu --arm cuda --workers 8 --profile dev \
  --results $OUT/callE4/mutants.jsonl 2>&1 | tee $OUT/callE4/mutants.txt | tail -4
tar czf $OUT/callE4.tgz -C $OUT callE4 && rm -rf $OUT/callE4
