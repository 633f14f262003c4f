"""Session 14, call V2: paged attention's partial writes one output (``parts``: rows of Dv values, then the
partition's max and sum) instead of two (values; [max, sum]), after session 13's U4 measured ~1.5-3 us of the H200
host's time per custom-kernel output. Like for like, in one process (perf.interleaved, 8 input sets taken in turn,
us per call): ``two outputs`` is the module as the thirteenth pass ran it (``paged_two_outputs.py``: ``git show
fb82a73:impl/paged_attention.py``; ``kvq4_two_outputs.py`` is kvq4's module of that commit reading it), ``one
output`` the tree's; both public calls, each shape against its issue-10 control."""
import math
import sys
from pathlib import Path

import mlx.core as mx

sys.path.insert(0, str(Path(__file__).parent))
import kvq4_two_outputs  # noqa: E402
import paged_two_outputs  # noqa: E402

import impl.kvq4_decode as kvq4  # noqa: E402
import impl.paged_attention as paged  # noqa: E402
from perf.cases import kvq4_group, paged_group  # noqa: E402
from perf.interleaved import in_turn, interleaved, ratios, table  # noqa: E402
from perf.shapes import DecodeShape  # noqa: E402

blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 5
only = set(sys.argv[2:])


def paged_calls(shape, bits):
    group = paged_group(shape, ["cuda"], bits=bits, copies=8)
    sets = group.inputs()
    scale = 1 / math.sqrt(shape.head_dim)

    def call_of(module):
        return lambda x: module.paged_attention(x["q"], x["storage"], x["table"], shape.length, scale=scale,
                                                arm="cuda")

    for x in sets:
        assert mx.array_equal(call_of(paged)(x), call_of(paged_two_outputs)(x)).item(), "outputs must be bit-identical"
    calls = {"one output": in_turn(sets, call_of(paged)), "two outputs": in_turn(sets, call_of(paged_two_outputs))}
    control = "sdpa" if bits is None else "gather_dequantize_sdpa"
    (case,) = [c for c in group.cases if c.kernel == control]
    calls[f"{control} (control)"] = case.build()
    return group, calls, f"{control} (control)"


def kvq4_calls(shape):
    group = kvq4_group(shape, ["cuda"], copies=8)
    sets = group.inputs()
    scale = 1 / math.sqrt(shape.head_dim)

    def call_of(module):
        return lambda x: module.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, arm="cuda")

    for x in sets:
        assert mx.array_equal(call_of(kvq4)(x), call_of(kvq4_two_outputs)(x)).item(), "outputs must be bit-identical"
    calls = {"one output": in_turn(sets, call_of(kvq4)), "two outputs": in_turn(sets, call_of(kvq4_two_outputs))}
    (case,) = [c for c in group.cases if c.kernel == "dequantize_sdpa"]
    calls["dequantize_sdpa (control)"] = case.build()
    return group, calls, "dequantize_sdpa (control)"


CASES = {
    "paged-32/8/D128/N32k": lambda: paged_calls(DecodeShape(32, 8, 1, 128, 32768), None),
    "kv4-32/8/D128/N32k": lambda: paged_calls(DecodeShape(32, 8, 1, 128, 32768), 4),
    "kvq4-8/1/N32k": lambda: kvq4_calls(DecodeShape(8, 1, 1, 256, 32768)),
    "kv8-32/8/D128/N32k": lambda: paged_calls(DecodeShape(32, 8, 1, 128, 32768), 8),
    "kvq4-32/8/N32k": lambda: kvq4_calls(DecodeShape(32, 8, 1, 256, 32768)),
    "paged-16/8/D256/N128k": lambda: paged_calls(DecodeShape(16, 8, 1, 256, 131072), None),
}
for name, build in CASES.items():
    if only and name not in only:
        continue
    group, calls, control = build()
    results = interleaved(calls, blocks=blocks, rounds=20)
    print(f"\n## {name}", flush=True)
    print(table(results))
    print(ratios(results, control), flush=True)
    group.release()
