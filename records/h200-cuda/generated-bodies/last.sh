# issue 31: rest.sh's mutants left undetermined there (cut by its call's end), 8 at a time x 2 xdist processes
set -x
D=$(dirname "$0")
timeout 545 python3 -m mutants.generated --bodies --ids $(cat "$D/last-ids.txt") --device gpu --arm cuda --workers 8 \
  --inner-workers 2 --timeout 530 --no-clean-check --profile dev --results /tmp/last.jsonl > $OUT/last.txt 2>&1
cp /tmp/last.jsonl $OUT/last.jsonl
tail -14 $OUT/last.txt
