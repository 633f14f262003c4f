# What the ring fetch still needs before MATRIX_RING can be 3 on the cuda arm (README, "Not yet run"), one device
# call each, from the repository root with MLX's CUDA wheel installed:
#   bash records/h200-cuda/matrix-partial-ring/next.sh gates     ->  $OUT/gates.txt, $OUT/results.jsonl
#   bash records/h200-cuda/matrix-partial-ring/next.sh sanitize  ->  $OUT/racecheck.txt, $OUT/memcheck.txt
#   bash records/h200-cuda/matrix-partial-ring/next.sh mutants   ->  $OUT/mutants.txt, $OUT/mutants.jsonl
set -x
case "$1" in
  gates)  # every paged / kvq4 gate the cuda arm runs, with the ring as its fetch (conftest's --matrix-ring)
    MLXGATE_RESULTS=$OUT/results.jsonl timeout 570 python3 -m pytest parity/test_paged_attention.py \
      properties/test_paged_attention_props.py parity/test_small_inputs.py parity/test_decode_e2e.py \
      parity/test_kv_attend.py impl/kernels/test_cuda_compile_decode.py -k cuda --matrix-ring 3 --device gpu -n 14 \
      -q -rfEs -p no:cacheprovider > "$OUT/gates.txt" 2>&1
    tail -5 "$OUT/gates.txt" ;;
  sanitize)
    cd records/h200-cuda/matrix-partial-ring || exit 2
    timeout 280 compute-sanitizer --tool racecheck python3 sanitize.py > "$OUT/racecheck.txt" 2>&1
    timeout 280 compute-sanitizer --tool memcheck python3 sanitize.py > "$OUT/memcheck.txt" 2>&1
    tail -3 "$OUT/racecheck.txt" "$OUT/memcheck.txt" ;;
  mutants)  # the ring files' generated mutants (cuda only); test_dense_pool_ring is their killer
    timeout 570 python3 -m mutants.generated --bodies --files impl/paged_attention/ring_prologue.metal \
      impl/paged_attention/ring_fetch.metal impl/paged_attention/ring_osh.metal --device gpu --arm cuda --workers 2 \
      --inner-workers 7 --timeout 560 --profile dev --results /tmp/mutants.jsonl > "$OUT/mutants.txt" 2>&1
    cp /tmp/mutants.jsonl "$OUT/mutants.jsonl"; tail -8 "$OUT/mutants.txt" ;;
  *) echo "usage: next.sh gates | sanitize | mutants"; exit 2 ;;
esac
