#!/usr/bin/env bash
# The ring with its reads ahead of its copies (impl/paged_attention/ring_issue.metal) through the checks the ring
# passed before (README.md), one device call, from the repository root with MLX's CUDA wheel installed (PYTHONPATH
# holding it and the root); at most 8 files under $OUT:
# * the paged cuda and ring gates, the suite's compute-sanitizer test, and the two race mutants under it
#   (../ring-ceiling/run.sh ring: gpu.txt, gates.txt, sanitize-mutants.txt, data.tgz);
# * the catalog's ring mutants on the cuda arm (catalog.txt, catalog.jsonl);
# * the kept ring against its copies-before-reads order, beside MLX SDPA (../../h200-cuda/ring-gap/run.sh reads:
#   reads.txt, reads.json).
bash records/h100-cuda/ring-ceiling/run.sh ring
timeout 200 python3 -m mutants paged_ring_read_unswizzled paged_ring_tail_v_unclamped \
  paged_ring_copies_into_the_next_slot paged_matrix_next_block_not_read --device gpu --arm cuda --workers 2 \
  --profile dev --results "$OUT/catalog.jsonl" > "$OUT/catalog.txt" 2>&1
tail -n 8 "$OUT/catalog.txt"
bash records/h200-cuda/ring-gap/run.sh reads
# Then, in a second call on the same machine (sweep/): ../ring-ceiling/sweep.py, the ring against register loads
# beside MLX SDPA at five shapes:
#   timeout 150 python3 records/h100-cuda/ring-ceiling/sweep.py 12 2 "$OUT/sweep.json" > "$OUT/sweep.txt" 2>&1
