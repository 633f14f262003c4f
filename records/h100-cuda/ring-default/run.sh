#!/usr/bin/env bash
# The ring fetch as the cuda arm's default (MATRIX_RING 3): what ran on the H100 (README.md), one device call per phase,
# from the repository root with MLX's CUDA wheel installed (PYTHONPATH holding it and the root); each phase writes
# under $OUT.
#   bash records/h100-cuda/ring-default/run.sh sweep     kernel time: the partial's prologue order, registers, SDPA
#   bash records/h100-cuda/ring-default/run.sh check     every paged gate on the cuda arm, racecheck and memcheck
#   bash records/h100-cuda/ring-default/run.sh mutants   the ring files' generated mutants and the catalog's ring ones
#     (the generated ones without their own clean check: `check` ran their whole test set on this tree just before)
#   bash records/h100-cuda/ring-default/run.sh rerun     the generated mutants `mutants` left as errors, 2 workers each
#   bash records/h100-cuda/ring-default/run.sh baseline  three perf.run processes for perf/baselines/ (not run here)
here=records/h100-cuda/ring-default
case "$1" in
  sweep)
    timeout 150 python3 $here/sweep.py 12 3 "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1; tail -4 "$OUT/sweep.txt" ;;
  check)
    sanitize=records/h200-cuda/matrix-partial-ring/sanitize.py
    timeout 300 compute-sanitizer --tool racecheck python3 $sanitize > "$OUT/racecheck.txt" 2>&1 &
    timeout 300 compute-sanitizer --tool memcheck python3 $sanitize > "$OUT/memcheck.txt" 2>&1 &
    MLXGATE_RESULTS=$OUT/results.jsonl timeout 400 python3 -m pytest parity/test_paged_attention.py \
      properties/test_paged_attention_props.py parity/test_small_inputs.py parity/test_decode_e2e.py \
      parity/test_kv_attend.py properties/test_block_table.py parity/test_kvq4_decode.py \
      properties/test_kvq4_decode_props.py impl/kernels/test_cuda_compile_decode.py impl/kernels/test_cuda_compile.py \
      -k "cuda or ring" --device gpu -n 12 -q -rfEs -p no:cacheprovider > "$OUT/gates.txt" 2>&1
    wait; tail -n 3 "$OUT/gates.txt" "$OUT/racecheck.txt" "$OUT/memcheck.txt" ;;
  mutants)
    timeout 400 python3 -m mutants.generated --bodies --files impl/paged_attention/ring_prologue.metal \
      impl/paged_attention/ring_fetch.metal impl/paged_attention/ring_osh.metal --device gpu --arm cuda --workers 4 \
      --inner-workers 3 --timeout 300 --no-clean-check --test-limit 120 --profile dev --results "$OUT/generated.jsonl" > "$OUT/generated.txt" 2>&1 &
    timeout 400 python3 -m mutants paged_ring_read_unswizzled paged_ring_tail_v_unclamped \
      paged_ring_copies_into_the_next_slot paged_matrix_next_block_not_read --device gpu --arm cuda --workers 2 \
      --profile dev --results "$OUT/catalog.jsonl" > "$OUT/catalog.txt" 2>&1
    wait; tail -n 6 "$OUT/generated.txt" "$OUT/catalog.txt" ;;
  rerun)
    p=impl/paged_attention
    timeout 400 python3 -m mutants.generated --bodies --ids $p/ring_fetch.metal:6bf13eff:barrier:0 \
      $p/ring_prologue.metal:dd894642:relational:0 $p/ring_prologue.metal:174f082b:bound:0 \
      $p/ring_prologue.metal:174f082b:relational:1 $p/ring_prologue.metal:174f082b:relational:0 \
      $p/ring_prologue.metal:1d89ff4c:minmax:0 --device gpu --arm cuda --workers 6 --inner-workers 2 --timeout 380 \
      --no-clean-check --test-limit 90 --profile dev --results "$OUT/rerun.jsonl" > "$OUT/rerun.txt" 2>&1
    tail -n 4 "$OUT/rerun.txt" ;;
  baseline)
    for i in 1 2 3; do
      timeout 170 python3 -m perf.run --suite h200 --device gpu --no-baseline --save "$OUT/p$i.json" > "$OUT/p$i.log" 2>&1
      echo "process $i: $?"
    done
    python3 -m perf.baseline update --from "$OUT/p1.json" --from "$OUT/p2.json" --from "$OUT/p3.json" \
      --gate-floor-ms 0.25 > "$OUT/pool.txt" 2>&1; echo "pool: $?"
    for f in perf/baselines/*.json; do [ "$f" -nt "$OUT/p1.json" ] && cp "$f" "$OUT/"; done ;;
  *) echo "usage: run.sh sweep | check | mutants | rerun | baseline"; exit 2 ;;
esac
