# issue 31: the two body mutants that hang (da5ab49e, bdd1f318) under the mutant runner's per-test limit, on the cuda
# arm, in two device calls (the clean run of their families' sets alone takes more than 280 s over 15 processes):
#   bash hangs.sh clean CALL_LIMIT          ->  $OUT/hangs-clean.txt; prints the per-test limit the runner derives
#                                               from it (mutants.runner.hang_limit_after: 10 x slowest + 30 s)
#   bash hangs.sh mutants CALL_LIMIT LIMIT  ->  $OUT/hangs.jsonl, $OUT/hangs.txt
set -x
start=$(date +%s)
case "$1" in
  clean)
    tests=$(python3 -c "from mutants.generated.bodies import TARGET_TESTS as T
print(' '.join(dict.fromkeys(T['paged_attention'] + T['multi_query'])))")
    MLXGATE_PROFILE=dev timeout $(( $2 - 20 )) python3 -m pytest $tests --device gpu -n 15 -q -p no:cacheprovider \
      --durations=12 > "$OUT/hangs-clean.txt" 2>&1
    tail -16 "$OUT/hangs-clean.txt"
    python3 -c "import re, sys
from mutants.runner import hang_limit_after
t = [float(x) for x in re.findall(r'^([0-9.]+)s (?:setup|call|teardown) ', open(sys.argv[1]).read(), re.M)]
print('per-test limit:', round(hang_limit_after(max(t))) if t else 'none: the clean run did not finish')" "$OUT/hangs-clean.txt"
    ;;
  mutants)
    [ -n "$3" ] || { echo "mutants needs the per-test limit hangs.sh clean printed"; exit 4; }
    left=$(( $2 - ($(date +%s) - start) - 10 ))
    timeout "$left" python3 -m mutants.generated --bodies --ids impl/multi_query/ring_stager_loop.metal:bdd1f318:relational:1 \
      impl/paged_attention/merge.metal:da5ab49e:relational:1 --device gpu --arm cuda --workers 2 --inner-workers 7 \
      --test-limit "$3" --timeout "$left" --no-clean-check --profile dev --results /tmp/hangs.jsonl > "$OUT/hangs.txt" 2>&1
    cp /tmp/hangs.jsonl "$OUT/hangs.jsonl"
    tail -8 "$OUT/hangs.txt"
    ;;
  *) echo "usage: bash hangs.sh clean CALL_LIMIT | mutants CALL_LIMIT LIMIT"; exit 2 ;;
esac
