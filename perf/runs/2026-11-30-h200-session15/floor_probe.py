"""Session 15, call W1: the fixed cost of kvq4's call at 8/1/D256/N32k, issue 10's one unmet target not excluded by a
bound (>= 3x dequantize + SDPA; 1.42-1.58x across pools).

Session 11 (S1) had the call at ~90 us eval8 and ~45-55 us pipelined8, and the partial alone at ~76 / ~38: the host's
share of a call is of the order of the GPU's. This probe measures that share at this shape: the tree's compiled call
(``impl.kvq4_decode._compiled_direct``) rebuilt here, then the same call with its kernels' bodies emptied (the same
inputs, template, strides and outputs, so MLX marshals and launches exactly what it does for the real call; the
bodies return at once), at their own grids and at one threadgroup, and one empty kernel alone (what any one-kernel
call costs at least). Also the public call at N = 64 (almost no GPU work). Interleaved in one process
(perf.interleaved; us per call; 8 input sets taken in turn)."""
import dataclasses
import math
import re
import sys

import mlx.core as mx

import impl.kvq4_decode as kvq4
import impl.paged_attention as direct
from perf.cases import kvq4_group
from perf.interleaved import in_turn, interleaved, ratios, table
from perf.shapes import DecodeShape

ARM = "cuda"
blocks = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def emptied(launch, one_threadgroup, output=None):
    """``launch`` with a body that returns at once. The body names every ``<input>_shape`` / ``<input>_strides`` the
    real body reads (in a comment: MLX passes those arrays whenever the source names them), so the host does the
    same work per call."""
    names = sorted(set(re.findall(r"\b(\w+_(?:shape|strides))\b", launch.spec.source)))
    spec = dataclasses.replace(launch.spec, name=launch.spec.name + "_empty", source="// " + " ".join(names) + "\n")
    changes = {"spec": spec}
    if one_threadgroup:
        changes["grid"] = launch.threadgroup
    if output is not None:
        changes["output_shapes"], changes["output_dtypes"] = (output.shape,), (output.dtype,)
    return dataclasses.replace(launch, **changes)


def compiled(scale, partial_mode, merge_mode):
    """kvq4's direct call as ``_compiled_direct`` builds it; a mode is "real", "empty" (same grid) or "empty1" (one
    threadgroup); merge_mode None: no merge (an "empty1" partial then writes the call's output shape: one kernel)."""

    def call(q, kp, ks, kb, vp, vs, vb):
        cache = kvq4._cache(kvq4.QuantizedKV(kp, ks, kb), kvq4.QuantizedKV(vp, vs, vb))
        launch = direct.strided_partial_launch(mx.contiguous(q), cache, kp.shape[2], scale, None)
        if partial_mode != "real":
            launch = emptied(launch, partial_mode == "empty1", q if merge_mode is None else None)
        (parts,) = launch.run(ARM)
        if merge_mode is None:
            return parts
        merge = direct.merge_launch(parts, launch.inputs[4], q.dtype)
        if merge_mode != "real":
            merge = emptied(merge, merge_mode == "empty1")
        return merge.run(ARM)[0]

    return mx.compile(call)


def planes(x):
    return (x["q"], *x["keys"][:3], *x["values"][:3])


print(mx.default_device(), mx.__version__, flush=True)
shape, small = DecodeShape(8, 1, 1, 256, 32768), DecodeShape(8, 1, 1, 256, 64)
group, small_group = kvq4_group(shape, [ARM], copies=8), kvq4_group(small, [ARM], copies=8)
sets, small_sets = group.inputs(), small_group.inputs()
scale = 1 / math.sqrt(shape.head_dim)
in_t = kvq4._in_dtype(scale, mx.bfloat16)
public = lambda x: kvq4.kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, arm=ARM)  # noqa: E731
rebuilt = compiled(in_t, "real", "real")
for x in sets:
    assert mx.array_equal(public(x), rebuilt(*planes(x))).item(), "the rebuilt call must give the public call's bytes"

VARIANTS = {
    "partial + merge (the tree's compiled call)": ("real", "real"),
    "partial alone": ("real", None),
    "empty partial + empty merge, their grids": ("empty", "empty"),
    "empty partial + empty merge, one threadgroup each": ("empty1", "empty1"),
    "real partial + empty merge, one threadgroup": ("real", "empty1"),
    "one empty kernel, one threadgroup": ("empty1", None),
}
calls = {"kvq4_decode N32k (public)": in_turn(sets, public)}
for name, modes in VARIANTS.items():
    f = compiled(in_t, *modes)
    calls[name] = in_turn(sets, lambda x, f=f: f(*planes(x)))
calls["kvq4_decode N64 (public)"] = in_turn(small_sets, public)
(case,) = [c for c in group.cases if c.kernel == "dequantize_sdpa"]
calls["dequantize_sdpa N32k (control)"] = case.build()
results = interleaved(calls, blocks=blocks, rounds=20)
print(f"\n## kvq4 {shape} (8 input sets)")
print(table(results))
print(ratios(results, "dequantize_sdpa N32k (control)"), flush=True)
