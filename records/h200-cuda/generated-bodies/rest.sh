# issue 31: the reruns' 12 undetermined multi-query / matrix mutants, 5 at a time x 3 xdist processes
set -x
D=$(dirname "$0")
timeout 535 python3 -m mutants.generated --bodies --ids $(cat "$D/rest-ids.txt") --device gpu --arm cuda --workers 5 \
  --inner-workers 3 --timeout 515 --no-clean-check --profile dev --results /tmp/rest.jsonl > $OUT/rest.txt 2>&1
cp /tmp/rest.jsonl $OUT/rest.jsonl
tail -20 $OUT/rest.txt
