# issue 31: the two body mutants that hang (da5ab49e, bdd1f318) under the mutant runner's per-test limit, on the cuda
# arm. First the clean per-test times of their families' sets (paged_attention, multi_query), whose slowest test
# sets the limit as the runner derives it from a clean check (mutants.runner.hang_limit_after: 10 x slowest + 30 s).
#   bash hangs.sh CALL_LIMIT   ->  $OUT/hangs-clean.txt, $OUT/hangs.jsonl, $OUT/hangs.txt
set -x
start=$(date +%s)
tests=$(python3 -c "from mutants.generated.bodies import TARGET_TESTS as T
print(' '.join(dict.fromkeys(T['paged_attention'] + T['multi_query'])))")
MLXGATE_PROFILE=dev timeout 280 python3 -m pytest $tests --device gpu -n 15 -q -p no:cacheprovider \
  --durations=12 > "$OUT/hangs-clean.txt" 2>&1
tail -16 "$OUT/hangs-clean.txt"
limit=$(python3 -c "import re, sys
from mutants.runner import hang_limit_after
t = [float(x) for x in re.findall(r'^([0-9.]+)s (?:setup|call|teardown) ', open(sys.argv[1]).read(), re.M)]
print(round(hang_limit_after(max(t))) if t else '')" "$OUT/hangs-clean.txt")
[ -n "$limit" ] || { echo "no per-test times: the clean run did not finish (hangs-clean.txt)"; exit 4; }
left=$(( $1 - ($(date +%s) - start) - 10 ))
echo "limit ${limit} s, ${left} s left"
timeout "$left" python3 -m mutants.generated --bodies --ids impl/multi_query/ring_stager_loop.metal:bdd1f318:relational:1 \
  impl/paged_attention/merge.metal:da5ab49e:relational:1 --device gpu --arm cuda --workers 2 --inner-workers 7 \
  --test-limit "$limit" --timeout "$left" --no-clean-check --profile dev --results /tmp/hangs.jsonl > "$OUT/hangs.txt" 2>&1
cp /tmp/hangs.jsonl "$OUT/hangs.jsonl"
tail -8 "$OUT/hangs.txt"
