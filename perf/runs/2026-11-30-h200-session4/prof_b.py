"""One profiled call per kernel of interest (run under ncu by callB1.sh): build inputs, warm up (JIT),
then the calls ncu captures. argv[1]: paged128 / paged256 (paged partial + merge) or kvq4_81 (kvq4's
direct body at 8/1/N32k)."""
import sys

import mlx.core as mx

from impl.block_table import BlockTable
from impl.kvq4_decode import kvq4_decode
from impl.paged_attention import paged_attention
from perf.cases import kvq4_group, paged_group
from perf.shapes import DecodeShape

which = sys.argv[1]
if which.startswith("paged"):
    shape = DecodeShape(32, 8, 1, 128, 32768) if which == "paged128" else DecodeShape(16, 8, 1, 256, 131072)
    x = paged_group(shape, ["cuda"]).inputs()
    table = x["table"] if isinstance(x["table"], BlockTable) else BlockTable.of(x["table"])
    call = lambda: paged_attention(x["q"], x["storage"], table, shape.length, scale=shape.head_dim ** -0.5, arm="cuda")
else:
    shape = DecodeShape(8, 1, 1, 256, 32768)
    x = kvq4_group(shape, ["cuda"]).inputs()
    call = lambda: kvq4_decode(x["q"], x["keys"], x["values"], scale=shape.head_dim ** -0.5, arm="cuda")
for _ in range(3):
    mx.eval(call())
