# issue 31: the new cases against their mutants, the multi-query sample's rest, a long pass over merge 32f9ca5a
set -x
IDS=$(cat "$(dirname "$0")/reruns-ids.txt")
timeout 480 python3 -m mutants.generated --bodies --ids $IDS --device gpu --arm cuda --workers 5 --inner-workers 3 \
  --timeout 460 --no-clean-check --profile dev --results $OUT/reruns.jsonl > $OUT/reruns.txt 2>&1
tail -40 $OUT/reruns.txt
