#!/usr/bin/env bash
# The ring fetch as the cuda arm's default on the H200 (README.md): one device call per phase, from the repository
# root with MLX's CUDA wheel installed (PYTHONPATH holding it and the root); each phase writes at most 8 files under
# $OUT (what a device call returns).
#   bash records/h200-cuda/ring-default/run.sh ceiling   kernel time: the pool's read ceiling in the ring's copy
#     pattern and over four KV heads per threadgroup, launch-geometry variants, MLX SDPA (ceiling.py)
#   bash records/h200-cuda/ring-default/run.sh correct   every paged gate on the cuda arm (racecheck and memcheck
#     among them: test_ring_under_compute_sanitizer); at
#     the same time the ring mutants earlier runs left (the gates on three, the suite's compute-sanitizer test on
#     four: sanitize_mutants.py) and the catalog's ring mutants
#   bash records/h200-cuda/ring-default/run.sh perf      three perf.run processes pooled into perf/baselines/, then
#     the ring against register loads beside MLX SDPA (sweep.py)
#   bash records/h200-cuda/ring-default/run.sh one       perf, then the ring's gates and its two race mutants
here=records/h200-cuda/ring-default
p=impl/paged_attention
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt"
case "$1" in
  ceiling)
    timeout 200 python3 $here/ceiling.py 12 2 "$OUT/ceiling.json" > "$OUT/ceiling.txt" 2>&1
    grep -v Warn "$OUT/ceiling.txt" | cut -c1-110 | tail -30 ;;
  correct)
    MLXGATE_RESULTS=$OUT/gates.jsonl timeout 500 python3 -m pytest parity/test_paged_attention.py \
      properties/test_paged_attention_props.py parity/test_small_inputs.py parity/test_decode_e2e.py \
      parity/test_kv_attend.py properties/test_block_table.py parity/test_kvq4_decode.py \
      properties/test_kvq4_decode_props.py impl/kernels/test_cuda_compile_decode.py impl/kernels/test_cuda_compile.py \
      -k "cuda or ring" --device gpu -n 8 -q -rfEs -p no:cacheprovider > "$OUT/gates.txt" 2>&1 &
    timeout 500 python3 $here/sanitize_mutants.py "$OUT" $p/ring_fetch.metal:6bf13eff:barrier:0 \
      $p/ring_prologue.metal:dd894642:relational:0 $p/ring_prologue.metal:4244d939:relational:0 \
      $p/ring_prologue.metal:9b0ff9ea:relational:0 > "$OUT/sanitize-mutants.txt" 2>&1 &
    timeout 500 python3 -m mutants.generated --bodies --ids $p/ring_prologue.metal:4244d939:relational:1 \
      $p/ring_prologue.metal:9b0ff9ea:relational:1 $p/ring_osh.metal:0ea474f2:barrier:0 --device gpu --arm cuda \
      --workers 3 --inner-workers 2 --timeout 480 --no-clean-check --test-limit 280 --profile dev \
      --results "$OUT/generated.jsonl" > "$OUT/generated.txt" 2>&1 &
    timeout 500 python3 -m mutants paged_ring_read_unswizzled paged_ring_tail_v_unclamped \
      paged_ring_copies_into_the_next_slot paged_matrix_next_block_not_read --device gpu --arm cuda --workers 2 \
      --profile dev --results "$OUT/catalog.jsonl" > "$OUT/catalog.txt" 2>&1
    wait; (cd "$OUT" && tar czf data.tgz *.jsonl mutant*.txt && rm *.jsonl mutant*.txt)
    tail -n 4 "$OUT/gates.txt" "$OUT/generated.txt" "$OUT/catalog.txt" \
      "$OUT/sanitize-mutants.txt" ;;
  perf)
    for i in 1 2 3; do
      timeout 90 python3 -m perf.run --suite h200 --device gpu --no-baseline --save "$OUT/p$i.json" > "$OUT/p$i.log" 2>&1
      echo "process $i: $?"
    done
    python3 -m perf.baseline update --from "$OUT/p1.json" --from "$OUT/p2.json" --from "$OUT/p3.json" \
      --gate-floor-ms 0.25 > "$OUT/pool.txt" 2>&1; echo "pool: $?"
    for f in perf/baselines/*.json; do [ "$f" -nt "$OUT/p1.json" ] && cp "$f" "$OUT/"; done
    (cd "$OUT" && tar czf perf-logs.tgz p?.log pool.txt && rm p?.log pool.txt)
    timeout 90 python3 $here/sweep.py 12 2 "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1; tail -4 "$OUT/sweep.txt" ;;
  one)  # what one call can hold: perf, then the ring's gates (its sanitizer test among them) and its race mutants
    bash $here/run.sh perf
    (cd "$OUT" && tar czf perf-runs.tgz p?.json perf-logs.tgz && rm p?.json perf-logs.tgz)
    MLXGATE_RESULTS=$OUT/gates.jsonl timeout 180 python3 -m pytest parity/test_paged_attention.py -k "cuda or ring" \
      --device gpu -n 8 -q -rfEs -p no:cacheprovider > "$OUT/gates.txt" 2>&1 &
    timeout 180 python3 $here/sanitize_mutants.py "$OUT" $p/ring_fetch.metal:6bf13eff:barrier:0 \
      $p/ring_prologue.metal:dd894642:relational:0 > "$OUT/sanitize-mutants.txt" 2>&1
    wait; (cd "$OUT" && tar czf data.tgz *.jsonl mutant*.txt && rm *.jsonl mutant*.txt)
    tail -n 3 "$OUT/gates.txt" "$OUT/sanitize-mutants.txt" ;;
  *) echo "usage: run.sh ceiling | correct | perf | one"; exit 2 ;;
esac
