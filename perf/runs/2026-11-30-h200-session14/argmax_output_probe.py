"""Session 14, call V5: normalized argmax's public call with the fused kernel writing the ids only (``FUSED``)
against the same call as the thirteenth pass ran it (the kernel also writing the lse, for the gate alone:
``argmax_lse_output.py`` = ``git show 6af3e20:impl/normalized_argmax.py``) and the control; 64 x 151936 and
64 x 32000 bfloat16, 8 input sets taken in turn, interleaved (perf.interleaved; us per call)."""

import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
import argmax_lse_output  # noqa: E402

from impl import normalized_argmax as am  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402

mx.set_default_device(mx.gpu)
blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 8
for vocab in (151936, 32000):
    sets = []
    for s in range(8):
        mx.random.seed(100 + s)
        logits = (4.0 * mx.random.normal((64, vocab))).astype(mx.bfloat16)
        mx.eval(logits)
        sets.append(logits)
    for x in sets:
        native = am.normalized_argmax_native(x)
        assert mx.array_equal(am.normalized_argmax(x, arm="cuda"), native).item()
        assert mx.array_equal(argmax_lse_output.normalized_argmax(x, arm="cuda"), native).item()
    calls = {
        "ids only (FUSED)": in_turn(sets, lambda x: am.normalized_argmax(x, arm="cuda")),
        "ids and lse (before)": in_turn(sets, lambda x: argmax_lse_output.normalized_argmax(x, arm="cuda")),
        "control": in_turn(sets, am.normalized_argmax_native),
    }
    results = interleaved(calls, blocks=blocks, rounds=30)
    print(f"\n## 64 x {vocab} bfloat16")
    print(table(results))
    print(ratios(results, "control"), flush=True)
