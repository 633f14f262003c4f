#!/usr/bin/env bash
# multi-query's K / V views that start off the 4-element grid, on the cuda arm (README.md): the gates with the start
# check (starts_vector_aligned, impl/multi_query/multi_query.h), then the same test on a copy of the tree without it.
# From the repository root with MLX's CUDA wheel installed (PYTHONPATH holding it and the root); writes under $OUT.
#   bash records/h100-cuda/vector-start/run.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
# Every multi-query gate and property on the cuda arm, the new test among them, and the kernels' nvcc builds.
MLXGATE_RESULTS=$OUT/results.jsonl timeout 330 python3 -m pytest parity/test_multi_query.py \
  properties/test_multi_query_props.py -k cuda --device gpu -n 8 -q -rfEs -p no:cacheprovider > "$OUT/gates.txt" 2>&1
tail -n 3 "$OUT/gates.txt"
# The check removed (kvec / vvec as they were): each case should fail, a misaligned vector load faulting.
root=$PWD; rm -rf /tmp/before && mkdir /tmp/before
tar --exclude=./records --exclude=./.device -cf - . | tar -C /tmp/before -xf -
export PYTHONPATH=${PYTHONPATH/$root//tmp/before}  # the copy's impl, not the tree's
cd /tmp/before && sed -i 's/ && starts_vector_aligned([kv])//' impl/multi_query/partial.metal
grep -c starts_vector_aligned impl/multi_query/partial.metal
for plane in keys values; do
  timeout 120 python3 -m pytest parity/test_multi_query.py -k "vector_grid and cuda and $plane and bfloat16" \
    --device gpu -q -p no:cacheprovider > "$OUT/before-$plane.txt" 2>&1
  echo "$plane without the check: rc $?"; tail -n 2 "$OUT/before-$plane.txt"
done
cd "$root"
