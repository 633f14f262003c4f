#!/bin/bash
# Call D: is the quantized D128 paged kernel slower than pass 3's? The pooled baseline of this session
# has KV4 32/8/D128/N32k at 0.157 ms against pass 3's 0.135 (process spread 12.4%). Same process,
# interleaved: main at 055778b's paged_attention (the module embedded in paged_wide.sh, pass 3's kernels)
# against this tree's, KV4 and KV8, plus the gather + dequantize + SDPA control. ms per call, 8 calls per
# eval, median of 15 rounds, three alternations.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/site/mlx || { echo "MLX not installed on this host: repeat steps 1 and 2"; exit 3; }
D=perf/runs/2026-11-30-h200-session4
mkdir -p $OUT/callD
sed -n '/^cat > "\$WORK\/paged_base.py"/,/^PAGED_BASE_EOF/p' $D/paged_wide.sh | sed '1d;$d' > $OUT/callD/paged_base.py
timeout 150 python3 - $OUT/callD/paged_base.py <<'PY' 2>&1 | tee $OUT/callD/quantized_ab.txt
import importlib.util, sys
import mlx.core as mx
import impl.paged_attention as P
from impl.block_table import BlockTable
from perf.cases import paged_group
from perf.harness import batched, time_call
from perf.shapes import DecodeShape
spec = importlib.util.spec_from_file_location("paged_base", sys.argv[1])
B = importlib.util.module_from_spec(spec); spec.loader.exec_module(B)
def ms(call):
    r = sorted(x / 8 for x in time_call(batched(call, "mlx", 8), rounds=15, warmup=2))
    return r[len(r) // 2] * 1e3
shape = DecodeShape(32, 8, 1, 128, 32768)
for bits in (4, 8):
    group = paged_group(shape, ["cuda"], bits=bits)
    x = group.inputs()
    table = x["table"] if isinstance(x["table"], BlockTable) else BlockTable.of(x["table"])
    scale = 128 ** -0.5
    calls = {name: (lambda m=m: m.paged_attention(x["q"], x["storage"], table, shape.length, scale=scale, arm="cuda"))
             for name, m in (("pass3 (055778b)", B), ("this tree", P))}
    a, b = (calls[k]().astype(mx.float32) for k in calls)
    print(f"KV{bits} {shape}: max|pass3 - now| {mx.abs(a - b).max().item():.2e}", flush=True)
    control = next(c for c in group.cases if c.arm == "mlx" and "dequantize" in c.kernel).build()
    for rep in range(3):
        row = {name: ms(call) for name, call in calls.items()}
        row["control"] = ms(control)
        print(f"KV{bits} round {rep}: " + ", ".join(f"{k} {v:.4f} ms" for k, v in row.items())
              + f"; control / this tree {row['control'] / row['this tree']:.2f}x", flush=True)
    group.release()
PY
tar czf $OUT/callD.tgz -C $OUT callD
