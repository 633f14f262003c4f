# The record's run, as it ran (from the repo root; OUT the output folder): a seeded sample of 30 of cosmic-ray's
# mutants per impl/ file, each file its own run, 2 at a time, each mutant on its file's whole test set.
: "${OUT:?OUT names the output folder}"
for f in impl/block_table.py impl/masks.py impl/kv/pool.py impl/kv/paged.py impl/kv/rows.py impl/kv/view.py impl/kv/dense.py impl/kv/validation.py impl/kv/quantization.py impl/kv/errors.py impl/paged_attention/graph.py impl/multi_query/graph.py impl/normalized_argmax.py impl/kvq4_decode.py; do
  n=$(echo $f | tr '/.' '__')
  echo "=== $f $(date +%T)"
  PYTHONPATH=. timeout 1500 .venv/bin/python -m mutants.generated --python-mutants --targets $f --sample 30 --seed 5 --workers 2 --no-clean-check --timeout 300 --results $OUT/$n.jsonl > $OUT/$n.txt 2>&1
  echo "exit $?"; grep -E "^impl|killed/ran|SURVIVED" $OUT/$n.txt | tail -4
done
echo ALLDONE $(date +%T)
