#!/usr/bin/env bash
# The ring partial with its wait before the combine, and the pool's read ceiling in the ring's copy pattern: what ran
# on the H100 (README.md), one device call per phase, from the repository root with MLX's CUDA wheel installed
# (PYTHONPATH holding it and the root); each phase writes at most 8 files under $OUT (what a device call returns).
#   bash records/h100-cuda/ring-ceiling/run.sh ceiling   kernel time: pure reads in the ring's copy pattern (pool,
#     pool in physical order, dense K / V; one and four KV heads per threadgroup), launch-geometry variants of the
#     paged kernels, MLX SDPA (ceiling.py)
#   bash records/h100-cuda/ring-ceiling/run.sh ring      test_paged_attention.py's cuda and ring cases (the sanitizer
#     test among them); the suite's sanitizer test on the two race mutants (sanitize_mutants.py)
#   bash records/h100-cuda/ring-ceiling/run.sh mutants   three ring mutants earlier runs had not run or the wait
#     changed, the catalog's ring mutants
#   bash records/h100-cuda/ring-ceiling/run.sh gates     the rest of the paged / kvq4 / block-table cuda gates
#   bash records/h100-cuda/ring-ceiling/run.sh perf      (on the H200) three perf.run processes pooled into
#     perf/baselines/cuda-NVIDIA_H200.json, then the ring against register loads beside MLX SDPA (sweep.py)
here=records/h100-cuda/ring-ceiling
p=impl/paged_attention
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt"
case "$1" in
  ceiling)
    timeout 200 python3 $here/ceiling.py 12 2 "$OUT/ceiling.json" > "$OUT/ceiling.txt" 2>&1
    grep -v Warn "$OUT/ceiling.txt" | cut -c1-110 | tail -30 ;;
  ring)
    MLXGATE_RESULTS=$OUT/gates.jsonl timeout 200 python3 -m pytest parity/test_paged_attention.py -k "cuda or ring" \
      --device gpu -n 8 -q -rfEs -p no:cacheprovider > "$OUT/gates.txt" 2>&1 &
    timeout 200 python3 $here/sanitize_mutants.py "$OUT" $p/ring_fetch.metal:6bf13eff:barrier:0 \
      $p/ring_prologue.metal:dd894642:relational:0 > "$OUT/sanitize-mutants.txt" 2>&1
    wait; (cd "$OUT" && tar czf data.tgz *.jsonl mutant*.txt && rm *.jsonl mutant*.txt)
    tail -n 3 "$OUT/gates.txt" "$OUT/sanitize-mutants.txt" ;;
  mutants)
    timeout 280 python3 -m mutants.generated --bodies --ids $p/ring_prologue.metal:4244d939:relational:1 \
      $p/ring_prologue.metal:9b0ff9ea:relational:1 $p/ring_osh.metal:0ea474f2:barrier:0 --device gpu --arm cuda \
      --workers 3 --inner-workers 3 --timeout 270 --no-clean-check --test-limit 200 --profile dev \
      --results "$OUT/generated.jsonl" > "$OUT/generated.txt" 2>&1 &
    timeout 280 python3 -m mutants paged_ring_read_unswizzled paged_ring_tail_v_unclamped \
      paged_ring_copies_into_the_next_slot paged_matrix_next_block_not_read --device gpu --arm cuda --workers 2 \
      --profile dev --results "$OUT/catalog.jsonl" > "$OUT/catalog.txt" 2>&1
    wait; tail -n 8 "$OUT/generated.txt" "$OUT/catalog.txt" ;;
  gates)
    MLXGATE_RESULTS=$OUT/gates2.jsonl timeout 480 python3 -m pytest properties/test_paged_attention_props.py \
      parity/test_small_inputs.py parity/test_decode_e2e.py parity/test_kv_attend.py properties/test_block_table.py \
      parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py impl/kernels/test_cuda_compile_decode.py \
      impl/kernels/test_cuda_compile.py -k "cuda or ring" --device gpu -n 14 -q -rfEs -p no:cacheprovider \
      > "$OUT/gates2.txt" 2>&1
    gzip "$OUT/gates2.jsonl"; tail -n 3 "$OUT/gates2.txt" ;;
  perf)
    for i in 1 2 3; do
      timeout 150 python3 -m perf.run --suite h200 --device gpu --no-baseline --save "$OUT/p$i.json" > "$OUT/p$i.log" 2>&1
      echo "process $i: $?"
    done
    python3 -m perf.baseline update --from "$OUT/p1.json" --from "$OUT/p2.json" --from "$OUT/p3.json" \
      --gate-floor-ms 0.25 > "$OUT/pool.txt" 2>&1; echo "pool: $?"
    for f in perf/baselines/*.json; do [ "$f" -nt "$OUT/p1.json" ] && cp "$f" "$OUT/"; done
    python3 -c "import mlx.core as mx, torch; print('mlx', mx.__version__, 'torch', torch.__version__)" \
      > "$OUT/versions.txt" 2>&1
    (cd "$OUT" && tar czf perf-logs.tgz p?.log pool.txt versions.txt && rm p?.log pool.txt versions.txt)
    timeout 90 python3 $here/sweep.py 12 2 "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1; tail -4 "$OUT/sweep.txt" ;;
  *) echo "usage: run.sh ceiling | ring | mutants | gates | perf"; exit 2 ;;
esac
