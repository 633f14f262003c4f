#!/bin/bash
# Call 5: multi-query's compiled call (scale + partial + merge as one mx.compile'd function per input
# signature) on the GPU: its cuda parity tests, then its timing against the eight single-row calls.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
mkdir -p $OUT/work5
timeout 100 python3 -m pytest parity/test_multi_query.py -k cuda --device gpu -n 12 -q -rfE -p no:cacheprovider \
  2>&1 | tee $OUT/work5/gates.txt | tail -3
timeout 60 python3 - <<'PY' 2>&1 | tee $OUT/work5/timing.txt
from perf.cases import multi_query_group
from perf.harness import batched, time_call
from perf.shapes import DecodeShape
for shape in (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768)):
    group = multi_query_group(shape, ["cuda"])
    for case in group.cases:
        call = case.build()
        r = sorted(x / 8 for x in time_call(batched(call, "mlx", 8), rounds=20, warmup=3))
        print(f"{shape} {case.kernel}[{case.arm}]: {r[len(r) // 2] * 1e3:.4f} ms (8/eval, median of 20)", flush=True)
    group.release()
PY
