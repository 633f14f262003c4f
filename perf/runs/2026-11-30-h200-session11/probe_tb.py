"""Session 11, call S2: the direct attention body with fewer tokens per SIMD-group step (template TB) and, for one KV
head, more query rows per threadgroup (R), against the defaults, interleaved (perf.interleaved; us per call).

Call S1's ncu on kvq4 8/1/N32k's partial: 219 registers (2 threadgroups per SM at most), one warp per scheduler
issuing every 2.8 cycles, 3% of DRAM bandwidth, 15.6 M warp instructions per call (~1900 per SIMD group per 8-token
step): the body is bound by its instructions' latency at low occupancy, not by memory. nvcc (-Xptxas -v, this
kernel): TB 4 needs 158 registers (3 threadgroups per SM); R 8 (one threadgroup per partition for 8 query heads, not
two row chunks dequantizing the same K/V) needs 247 at TB 4 and 215 at TB 2, no spills.
"""
import dataclasses
import math
import sys
import traceback

import mlx.core as mx

import impl.kvq4_decode as kvq4
import impl.paged_attention as pa
from impl.kvq4_decode import QuantizedKV, kvq4_decode
from impl.kernels import Launch
from perf.cases import kvq4_group, paged_group
from perf.interleaved import in_turn, interleaved, table
from perf.shapes import DecodeShape
from probe_s11 import control, ratios

COPIES = 8
SIMD = 32


def overridden(template, grid, threadgroup, hk, over):
    """(template, grid, threadgroup) of the partial with template values ``over`` (R, TB, SG) replaced."""
    values = dict(template)
    values.update(over)
    rows_total = (values["HQ"] // values["HK"]) * values["N"]
    chunks = -(-rows_total // values["R"])
    parts = grid[0] // threadgroup[0]
    threads = SIMD * values["SG"]
    return tuple((k, values[k]) for k, _ in template), (threads * parts, hk * chunks, 1), (threads, 1, 1)


def kvq4_variant(scale_in, block, over):
    def call(q, kp, ks, kb, vp, vs, vb):
        cache = kvq4._cache(QuantizedKV(kp, ks, kb), QuantizedKV(vp, vs, vb))
        launch = pa.strided_partial_launch(mx.contiguous(q), cache, kp.shape[2], scale_in, block)
        template, grid, threadgroup = overridden(launch.template, launch.grid, launch.threadgroup, kp.shape[1], over)
        launch = dataclasses.replace(launch, template=template, grid=grid, threadgroup=threadgroup)
        parts, normal = launch.run("cuda")
        return pa.merge_launch(parts, normal, launch.inputs[4], q.dtype).run("cuda")[0]
    return mx.compile(call)


def check(name, got, want):
    diff = mx.max(mx.abs(got.astype(mx.float32) - want.astype(mx.float32))).item()
    scale = mx.max(mx.abs(want.astype(mx.float32))).item()
    print(f"  {name}: max |out - default| = {diff:.3g} (max |out| {scale:.3g})")


def kvq4_sweep(shape, settings, blocks=4, rounds=20):
    group = kvq4_group(shape, ["cuda"], copies=COPIES)
    sets = group.inputs()
    scale = 1.0 / math.sqrt(shape.head_dim)
    scale_in = kvq4._in_dtype(scale, mx.bfloat16)
    args = lambda x: (x["q"], *x["keys"][:3], *x["values"][:3])
    x0 = sets[0]
    default = pa.partition_span(x0["q"], kvq4._cache(x0["keys"], x0["values"]), shape.length, None)
    print(f"\n## kvq4 {shape}  ({len(sets)} input sets); default partition {default}")
    want = kvq4_decode(x0["q"], x0["keys"], x0["values"], scale=scale, arm="cuda")
    calls = {"default": in_turn(sets, lambda x: kvq4_decode(x["q"], x["keys"], x["values"], scale=scale, arm="cuda"))}
    for block, over in settings:
        fn = kvq4_variant(scale_in, block, over)
        name = f"partition {block} " + " ".join(f"{k} {v}" for k, v in over.items())
        check(name, fn(*args(x0)), want)
        calls[name] = in_turn(sets, lambda x, fn=fn: fn(*args(x)))
    calls["dequantize_sdpa (control)"] = control(group, "dequantize_sdpa")
    results = interleaved(calls, blocks=blocks, rounds=rounds)
    print(table(results))
    print(ratios(results, "dequantize_sdpa (control)", [n for n in calls if "control" not in n]))
    group.release()


def paged_sweep(shape, bits, overs, control_name, blocks=4, rounds=20):
    group = paged_group(shape, ["cuda"], bits=bits, copies=COPIES)
    sets = group.inputs()
    scale = 1.0 / math.sqrt(shape.head_dim)
    x0 = sets[0]
    st = x0["storage"]
    hq, n = shape.hq, shape.rows
    hk, d = st.keys.shape[1], st.head_dim
    quant = pa._quant_key(st.quantization)
    span = pa._span_of(hq, n, hk, st.v_head_dim, shape.length, None, quant is not None)
    base = pa._partial_shape(hq, n, hk, d, st.v_head_dim, st.block_size, st.dtype, quant, shape.length, span, pa.PAGED)
    geometry = pa._geometry(scale, shape.length, span)
    planes = lambda s: () if s.quantization is None else tuple(getattr(s, p) for p in pa._PLANE_NAMES)
    print(f"\n## paged bits={bits} {shape}  ({len(sets)} input sets); partition {span}, template "
          f"{dict(base.template)}")
    want = pa.paged_attention(x0["q"], st, x0["table"], shape.length, scale=scale, arm="cuda")
    calls = {"default": in_turn(sets, lambda x: pa.paged_attention(x["q"], x["storage"], x["table"], shape.length,
                                                                   scale=scale, arm="cuda"))}
    for over in overs:
        template, grid, threadgroup = overridden(base.template, base.grid, base.threadgroup, hk, over)
        pair = pa._compiled_pair("cuda", base.spec, template, grid, threadgroup, base.output_shapes, st.dtype)
        run = lambda x, pair=pair: pair(x["q"], x["storage"].keys, x["storage"].values, x["table"].padded, geometry,
                                        *planes(x["storage"]))
        name = " ".join(f"{k} {v}" for k, v in over.items())
        check(name, run(x0), want)
        calls[name] = in_turn(sets, run)
    calls[f"{control_name} (control)"] = control(group, control_name)
    results = interleaved(calls, blocks=blocks, rounds=rounds)
    print(table(results))
    print(ratios(results, f"{control_name} (control)", [c for c in calls if "control" not in c]))
    group.release()


def guarded(fn, *args, **kwargs):
    """One section; a failure is printed and the next section still runs."""
    try:
        fn(*args, **kwargs)
    except Exception:
        traceback.print_exc(file=sys.stdout)


def main():
    print(mx.default_device(), mx.__version__)
    guarded(kvq4_sweep, DecodeShape(8, 1, 1, 256, 32768),
               [(512, {"TB": 4}), (256, {"TB": 4}), (512, {"R": 8, "TB": 2}), (256, {"R": 8, "TB": 2}),
                (512, {"R": 8, "TB": 4}), (256, {"R": 8, "TB": 4})])
    guarded(kvq4_sweep, DecodeShape(32, 8, 1, 256, 32768), [(512, {"TB": 4}), (1024, {"TB": 4})], blocks=3)
    guarded(paged_sweep, DecodeShape(32, 8, 1, 128, 32768), 4, [{"TB": 4}], "gather_dequantize_sdpa", blocks=3)
    guarded(paged_sweep, DecodeShape(32, 8, 1, 128, 32768), 8, [{"TB": 4}], "gather_dequantize_sdpa", blocks=3)
    guarded(paged_sweep, DecodeShape(32, 8, 1, 128, 32768), None, [{"TB": 4}], "sdpa", blocks=3)
    guarded(paged_sweep, DecodeShape(16, 8, 1, 256, 131072), None, [{"TB": 4}], "sdpa", blocks=3)


if __name__ == "__main__":
    main()
