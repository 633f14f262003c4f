#!/usr/bin/env bash
# Generated mutants that had not run on a GPU (README.md), on the cuda arm, from the repository root with MLX's CUDA
# wheel installed (PYTHONPATH holding it and the root); each phase writes under $OUT.
#   bash records/h100-cuda/generated-unrun/run.sh first   the ring prologue's two argued ones, multi-query's start check
#   bash records/h100-cuda/generated-unrun/run.sh rerun   the start check's again, after the "both planes" case
# No clean check: the paged bodies are those whose gates passed in the committed GPU records, and multi-query's passed
# every gate on the cuda arm in records/h100-cuda/vector-start/ (`rerun` runs its new cases first).
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
p=impl/paged_attention/ring_prologue.metal
mutants() {  # the ids, then the results' name
  timeout 420 python3 -m mutants.generated --bodies --ids "${@:1:$#-1}" --device gpu --arm cuda --workers 3 \
    --inner-workers 4 --timeout 400 --no-clean-check --test-limit 120 --profile dev --results "$OUT/${@: -1}.jsonl" \
    > "$OUT/${@: -1}.txt" 2>&1
  tail -n 6 "$OUT/${@: -1}.txt"
}
case "$1" in
  first)
    mutants $p:4244d939:relational:0 $p:9b0ff9ea:relational:0 impl/multi_query/multi_query.h:cad7ab89:relational:0 \
      generated ;;
  rerun)
    MLXGATE_RESULTS=$OUT/clean.jsonl timeout 120 python3 -m pytest parity/test_multi_query.py \
      -k "vector_grid and cuda" --device gpu -q -rfEs -p no:cacheprovider > "$OUT/clean.txt" 2>&1
    tail -n 2 "$OUT/clean.txt"
    mutants impl/multi_query/multi_query.h:cad7ab89:relational:0 rerun ;;
esac
