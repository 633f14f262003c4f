#!/bin/bash
# Session 14, call V1 (after the three install steps): paged attention's partial writes one packed output
# (``parts``: rows of Dv values, then max and sum), and the decode layouts gained "reversed" (a negative token
# stride). The cuda gates of paged attention, kvq4 and multi-query (and the nvcc units); the probe on the three
# shapes of the targets nearest their lines.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat the install steps"; exit 3; }
D=perf/runs/2026-11-30-h200-session14
mkdir -p $OUT/callV1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/callV1/gpu.txt 2>&1
MLXGATE_RESULTS=$OUT/callV1/results.jsonl timeout 330 python3 -m pytest parity/test_paged_attention.py \
  properties/test_paged_attention_props.py parity/test_kvq4_decode.py properties/test_kvq4_decode_props.py \
  parity/test_multi_query.py properties/test_multi_query_props.py parity/test_decode_e2e.py impl/kernels/ \
  -k cuda --device gpu -n 14 -q -rfEs -p no:cacheprovider 2>&1 | tee $OUT/callV1/gates.txt | tail -6
timeout 220 python3 $D/paged_parts_probe.py 5 paged-32/8/D128/N32k kv4-32/8/D128/N32k kvq4-8/1/N32k \
  > $OUT/callV1/paged_parts_probe.txt 2>&1; echo "probe exit $?"
tail -40 $OUT/callV1/paged_parts_probe.txt
