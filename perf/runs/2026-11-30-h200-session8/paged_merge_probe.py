"""Session 8, call G3: paged attention's merge, the two-pass body of commit ec2a4c7 (A, its text in
paged_merge_before.txt: a thread per output dim, 8 slices, the max of every partition first, then the sums) against
this tree's one-pass body (B: a lane per 4 dims, running max), interleaved block by block in one process: the whole
call (the partial + merge as one mx.compile'd function, as paged_attention runs it) in eval8 and pipelined, and
max |B - A| / max |A|. Shapes: the H200 suite's paged bf16 / KV4 / KV8 cases."""
import statistics
import sys
import time
from pathlib import Path

import mlx.core as mx

import impl.paged_attention as paged
from impl.kernels import KernelSpec, Launch
from perf.cases import paged_group
from perf.shapes import DecodeShape

OLD = KernelSpec("paged_attention_merge_probe_a", ("parts", "normal", "geometry"), ("out",),
                 Path(__file__).with_name("paged_merge_before.txt").read_text())


def merge_a(parts, normal, geometry, dtype):
    hq, n, _, dv = parts.shape
    return Launch(OLD, (parts, normal, geometry), (("OutT", dtype), ("DV", dv)),
                  grid=(-(-dv // 32) * 32, hq * n * 8, 1), threadgroup=(32, 8, 1),
                  output_shapes=((1, hq, n, dv),), output_dtypes=(dtype,)).run("cuda")[0]


def merge_b(parts, normal, geometry, dtype):
    return paged.merge_launch(parts, normal, geometry, dtype).run("cuda")[0]


def eval8(f, rounds):
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        mx.eval([f() for _ in range(8)])
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) / 8 * 1e6


def pipelined(f, rounds):
    start, previous = time.perf_counter(), None
    for _ in range(rounds):
        outs = [f() for _ in range(8)]
        mx.async_eval(outs)
        if previous is not None:
            mx.eval(previous)
        previous = outs
    mx.eval(previous)
    return (time.perf_counter() - start) / rounds / 8 * 1e6


def main(blocks=8, rounds=12):
    print(mx.default_device(), mx.__version__)
    for dims, bits in (((32, 8, 1, 128, 32768), None), ((32, 8, 1, 128, 32768), 4), ((32, 8, 1, 128, 32768), 8),
                       ((16, 8, 1, 256, 131072), None), ((16, 8, 1, 256, 131072), 4)):
        shape = DecodeShape(*dims)
        x = paged_group(shape, ["cuda"], bits=bits).inputs()
        storage = x["storage"]
        planes = () if storage.quantization is None else (storage.key_scales, storage.key_biases,
                                                          storage.value_scales, storage.value_biases)
        launch = paged.partial_launch(x["q"], storage, x["table"], shape.length, shape.head_dim ** -0.5, planes)

        def pair(merge):
            def f(*inputs):
                parts, normal = Launch(launch.spec, inputs, launch.template, launch.grid, launch.threadgroup,
                                       launch.output_shapes, launch.output_dtypes).run("cuda")
                return merge(parts, normal, inputs[4], x["q"].dtype)
            compiled = mx.compile(f)
            return lambda: compiled(*launch.inputs)

        a, b = pair(merge_a), pair(merge_b)
        out_a, out_b = a(), b()
        err = (mx.abs(out_b.astype(mx.float32) - out_a.astype(mx.float32)).max()
               / mx.abs(out_a.astype(mx.float32)).max()).item()
        for f in (a, b):
            for _ in range(3):
                mx.eval([f() for _ in range(8)])
        res = {k: [] for k in ("A eval8", "B eval8", "A pipelined", "B pipelined")}
        for _ in range(blocks):
            for tag, f in (("A", a), ("B", b)):
                res[f"{tag} eval8"].append(eval8(f, rounds))
                res[f"{tag} pipelined"].append(pipelined(f, rounds))
        partitions = launch.output_shapes[0][2]
        print(f"\n## {'bf16' if bits is None else f'KV{bits}'} {shape.hq}/{shape.hkv}/D{shape.head_dim}/N{shape.length} "
              f"({partitions} partition buffers): max|B-A|/max|A| = {err:.3g}, bit-identical: "
              f"{mx.array_equal(out_a, out_b).item()}")
        print("  ".join(f"{k} {statistics.median(v):7.1f} (min {min(v):6.1f})" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    sys.exit(main())
