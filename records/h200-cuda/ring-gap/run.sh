#!/usr/bin/env bash
# Where the ring partial's time past its read goes at 32/8/D128 (README.md): one device call per phase, from the
# repository root with MLX's CUDA wheel installed (PYTHONPATH holding it and the root); at most 8 files under $OUT.
#   bash records/h200-cuda/ring-gap/run.sh lengths   the pool read, the paged kernels and MLX SDPA at four lengths
#     (../../h100-cuda/ring-ceiling/ceiling.py's length mode); candidate changes to the partial (variants.py)
#   bash records/h200-cuda/ring-gap/run.sh ncu       ncu of the paged kernels and MLX SDPA at N128k (stall reasons,
#     per-instruction samples of the partial)
#   bash records/h200-cuda/ring-gap/run.sh sanitizer the suite's compute-sanitizer test of the ring
#   bash records/h200-cuda/ring-gap/run.sh all       lengths, sanitizer, ncu, in one call
#   bash records/h200-cuda/ring-gap/run.sh staging   the q-staging and scale edits against the kept ring (variants.py),
#     both edits' SASS with its scoreboards, then the shared body with both (staged-body.patch): ncu at N128k and the
#     paged cuda gates (ring-ceiling's run.sh ring)
#   bash records/h200-cuda/ring-gap/run.sh reads     the ring's reads ahead of its copies against the kept ring, two
#     rounds (variants.py)
#   bash records/h200-cuda/ring-gap/run.sh bulk      bulk copies (bulk/) under compute-sanitizer (memcheck, racecheck),
#     then bulk copies and the reads ahead of the copies against the kept ring, two rounds (variants.py)
here=records/h200-cuda/ring-gap
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv > "$OUT/gpu.txt"
phase() {
case "$1" in
  lengths)
    timeout 120 python3 records/h100-cuda/ring-ceiling/ceiling.py 12 2 "$OUT/lengths.json" 131072 65536 32768 16384 \
      > "$OUT/lengths.txt" 2>&1
    grep -v Warn "$OUT/lengths.txt" | cut -c1-100 | tail -24
    timeout 150 python3 $here/variants.py 12 2 "$OUT/variants.json" > "$OUT/variants.txt" 2>&1
    grep -v Warn "$OUT/variants.txt" | cut -c1-120 | tail -30 ;;
  ncu)
    timeout 180 ncu --profile-from-start off --clock-control none --set full -o "$OUT/n128k" \
      python3 records/h200-cuda/ncu-partial/ncu_profile.py 32 8 128 131072 > "$OUT/ncu-log.txt" 2>&1
    ncu -i "$OUT/n128k.ncu-rep" --page details --csv > "$OUT/ncu-details.csv" 2>&1
    ncu -i "$OUT/n128k.ncu-rep" --page source --csv --print-source sass -k regex:matrix_partial_ring \
      > "$OUT/ncu-sass.csv" 2>&1
    (cd "$OUT" && gzip ncu-sass.csv && tar czf data.tgz *.json ncu-log.txt n128k.ncu-rep && rm -f *.json ncu-log.txt \
      n128k.ncu-rep)
    grep -i "Duration\|DRAM Throughput\|Warp Cycles Per Issued\|Issued Warp\|Registers\|Achieved Occ" \
      "$OUT/ncu-details.csv" | cut -c1-160 | head -40 ;;
  sanitizer)
    timeout 110 python3 -m pytest parity/test_paged_attention.py -k "sanitizer and cuda" --device gpu -q -rfEs \
      -p no:cacheprovider > "$OUT/sanitizer.txt" 2>&1; tail -3 "$OUT/sanitizer.txt" ;;
  staging)
    timeout 150 python3 $here/variants.py 12 2 "$OUT/staging.json" "q first" "scale staged" "q first, scale staged" \
      "merge 16 slices" > "$OUT/staging.txt" 2>&1
    grep -v Warn "$OUT/staging.txt" | cut -c1-120 | tail -16
    mkdir -p "$OUT/sass" && timeout 100 python3 $here/variants.py scoreboards "$OUT/sass" kept "q first, scale staged" \
      > "$OUT/sass/log.txt" 2>&1; (cd "$OUT/sass" && tar czf ../sass.tgz *.sass.txt log.txt) ; rm -rf "$OUT/sass"
    git apply $here/staged-body.patch  # the shared body as the two staging edits leave it (README: not kept)
    timeout 150 ncu --profile-from-start off --clock-control none --set full -o "$OUT/staged" \
      python3 records/h200-cuda/ncu-partial/ncu_profile.py 32 8 128 131072 > /dev/null 2>&1
    ncu -i "$OUT/staged.ncu-rep" --page source --csv --print-source sass -k regex:matrix_partial_ring \
      > "$OUT/staged-sass.csv" 2>&1
    ncu -i "$OUT/staged.ncu-rep" --page details --csv > "$OUT/staged-details.csv" 2>&1
    (cd "$OUT" && gzip staged-sass.csv staged-details.csv && rm -f staged.ncu-rep)
    bash records/h100-cuda/ring-ceiling/run.sh ring ;;
  reads)
    timeout 150 python3 $here/variants.py 12 2 "$OUT/reads.json" "copies before reads" \
      > "$OUT/reads.txt" 2>&1
    grep -v Warn "$OUT/reads.txt" | cut -c1-120 | tail -20 ;;
  bulk)
    for tool in memcheck racecheck; do
      timeout 150 compute-sanitizer --tool $tool python3 $here/variants.py sanitize "bulk copies" \
        > "$OUT/bulk-$tool.txt" 2>&1; grep -v Warn "$OUT/bulk-$tool.txt" | tail -4 | cut -c1-160
    done
    timeout 240 python3 $here/variants.py 12 2 "$OUT/bulk.json" "bulk copies" "copies before reads" \
      > "$OUT/bulk.txt" 2>&1
    grep -v Warn "$OUT/bulk.txt" | cut -c1-140 | tail -24 ;;
  all) phase lengths; phase sanitizer; phase ncu ;;
  *) echo "usage: run.sh lengths | ncu | sanitizer | all | staging | reads | bulk"; exit 2 ;;
esac
}
phase "$1"
