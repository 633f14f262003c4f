"""Session 13, call U2: multi-query's partial reads q through its strides, so the call no longer adds an
``mx.contiguous(q)`` node (session 11, S11: ~2 us of the H200 host's time per call). Like for like, in one process
(perf.interleaved, 8 input sets taken in turn, us per call), 32/8/L8/D128/N32k:

* ``before``: the committed module (``mq_before.py``: ``git show 0011d2d:impl/multi_query.py``, this session's
  start), its public call; ``after``: the tree's public call;
* each with q contiguous, and with q as a decode step has it: computed [1, L, H, D] and transposed (``before``
  copies it: a copy kernel; ``after`` reads the view);
* the control, eight single-row SDPA calls (perf's ``sdpa_rows``)."""
import math
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
import mq_before  # noqa: E402

import impl.multi_query as mq  # noqa: E402
from perf.cases import multi_query_group  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402
from perf.shapes import DecodeShape  # noqa: E402

shape = DecodeShape(32, 8, 8, 128, 32768)
group = multi_query_group(shape, ["cuda"], copies=8)
sets = group.inputs()
for x in sets:  # q as a decode step computes it, [1, L, H, D], then viewed as [1, H, L, D]
    x["q_view"] = mx.contiguous(x["q"].transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    mx.eval(x["q_view"])
scale = 1 / math.sqrt(shape.head_dim)
for x in sets:
    a = mq.multi_query_causal(x["q"], x["k"], x["v"], scale=scale, arm="cuda")
    for f in (mq.multi_query_causal, mq_before.multi_query_causal):
        for q in (x["q"], x["q_view"]):
            assert mx.array_equal(f(q, x["k"], x["v"], scale=scale, arm="cuda"), a).item()
calls = {}
for label, f in (("after", mq.multi_query_causal), ("before", mq_before.multi_query_causal)):
    for qname in ("q", "q_view"):
        calls[f"{label}, {qname}"] = in_turn(sets, lambda x, f=f, qname=qname: f(x[qname], x["k"], x["v"], scale=scale,
                                                                                  arm="cuda"))
(control,) = [c for c in group.cases if c.kernel == "sdpa_rows"]
calls["sdpa_rows (control)"] = control.build()
results = interleaved(calls, blocks=int(sys.argv[1]) if len(sys.argv) > 1 else 6, rounds=20)
print(f"## {shape}")
print(table(results))
print(ratios(results, "sdpa_rows (control)"))
