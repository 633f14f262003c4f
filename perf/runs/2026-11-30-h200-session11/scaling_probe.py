"""Session 11, call S10 (nsys is not on the device image, so no timeline): how multi-query 32/8/L8/D128/N32k's time per
round grows with the calls in it, eval<B> and pipelined<B> for B = 1, 2, 4, 8, 16, interleaved (perf.interleaved; us
per round = per call x B). The slope is what one more call adds to a round: the GPU time per call where calls run
one after another, less where the GPU overlaps them; the intercept the round's fixed cost."""
import math

import mlx.core as mx

from impl.multi_query import multi_query_causal
from perf.cases import multi_query_group
from perf.interleaved import in_turn, interleaved, table
from perf.shapes import DecodeShape
from probe_s11 import control

shape = DecodeShape(32, 8, 8, 128, 32768)
group = multi_query_group(shape, ["cuda"], copies=8)
sets = group.inputs()
scale = 1 / math.sqrt(shape.head_dim)
calls = {"multi_query": in_turn(sets, lambda x: multi_query_causal(x["q"], x["k"], x["v"], scale=scale, arm="cuda")),
         "sdpa_rows (control)": control(group, "sdpa_rows")}
protocols = [f"{kind}{b}" for kind in ("eval", "pipelined") for b in (1, 2, 4, 8, 16)]
results = interleaved(calls, protocols=protocols, blocks=3, rounds=15)
print(mx.default_device(), mx.__version__)
print(table(results))
