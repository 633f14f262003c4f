# issue 31: partial.metal:7b5f5435:guard:1 with the whole machine (its killer, kvq4's
# test_q_times_scale_is_formed_in_the_dtype, is late in the paged family's set)
set -x
timeout 330 python3 -m mutants.generated --bodies --ids impl/paged_attention/partial.metal:7b5f5435:guard:1 \
  --device gpu --arm cuda --workers 1 --inner-workers 15 --timeout 320 --no-clean-check --profile dev \
  --results $OUT/guard.jsonl > $OUT/guard.txt 2>&1
tail -5 $OUT/guard.txt
