"""Session 13, call U5: multi-query's partial writes one output (``part``: O, then m, then l) instead of three,
after U4 measured ~1.5-3 us of the H200 host's time per custom-kernel output. Like for like, in one process
(perf.interleaved, 8 input sets taken in turn, us per call): ``three outputs`` is the module as U2 / U3 ran it
(``mq_three_outputs.py``: ``git show c9d8423:impl/multi_query.py``), ``one output`` the tree's; both public calls;
32/8/L8/D128/N32k and 16/8/L8/D256/N32k, each against its control (eight single-row SDPA calls)."""
import math
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
import mq_three_outputs  # noqa: E402

import impl.multi_query as mq  # noqa: E402
from perf.cases import multi_query_group  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402
from perf.shapes import DecodeShape  # noqa: E402

blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 6
for shape in (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768)):
    group = multi_query_group(shape, ["cuda"], copies=8)
    sets = group.inputs()
    scale = 1 / math.sqrt(shape.head_dim)
    for x in sets:
        a = mq.multi_query_causal(x["q"], x["k"], x["v"], scale=scale, arm="cuda")
        b = mq_three_outputs.multi_query_causal(x["q"], x["k"], x["v"], scale=scale, arm="cuda")
        assert mx.array_equal(a, b).item(), "one output must give the three outputs' bytes"
    calls = {label: in_turn(sets, lambda x, f=f: f(x["q"], x["k"], x["v"], scale=scale, arm="cuda"))
             for label, f in (("one output", mq.multi_query_causal),
                              ("three outputs", mq_three_outputs.multi_query_causal))}
    (control,) = [c for c in group.cases if c.kernel == "sdpa_rows"]
    calls["sdpa_rows (control)"] = control.build()
    results = interleaved(calls, blocks=blocks, rounds=20)
    print(f"\n## {shape}")
    print(table(results))
    print(ratios(results, "sdpa_rows (control)"))
    group.release()
