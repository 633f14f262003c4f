# issue 31: the body mutants an ids file names, on the cuda arm, each on its family's whole test set (first failure)
#   bash ids.sh IDS_FILE WORKERS INNER_WORKERS TIMEOUT CALL_LIMIT NAME   ->  $OUT/NAME.jsonl, $OUT/NAME.txt
# TIMEOUT: seconds per mutant; CALL_LIMIT: seconds for the whole run (the device call's limit, less its setup).
set -x
ids=$(cat "$1")
timeout "$5" python3 -m mutants.generated --bodies --ids $ids --device gpu --arm cuda --workers "$2" \
  --inner-workers "$3" --timeout "$4" --no-clean-check --profile dev --results "/tmp/$6.jsonl" > "$OUT/$6.txt" 2>&1
cp "/tmp/$6.jsonl" "$OUT/$6.jsonl"
tail -14 "$OUT/$6.txt"
