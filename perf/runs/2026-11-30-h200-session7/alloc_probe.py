"""Session 7, call F6: does a large output cost eval8 time by itself? An empty kernel (one thread writes one value)
whose single float32 output holds 128 KiB ... 32 MiB (multi-query's partial O at 32/8/L8/D128: 8 MiB at 64
splits), us per call of build and eval8 (uncompiled), and the same kernel with two outputs of that size."""
import sys
import pathlib

import mlx.core as mx

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import host_split as hs  # noqa: E402

a = mx.zeros((4,))
mx.eval(a)
ONE = mx.fast.cuda_kernel(name="alloc_one", input_names=["a"], output_names=["o"],
                          source="if (threadIdx.x == 0 && blockIdx.x == 0) o[0] = a[0];")
TWO = mx.fast.cuda_kernel(name="alloc_two", input_names=["a"], output_names=["o", "p"],
                          source="if (threadIdx.x == 0 && blockIdx.x == 0) { o[0] = a[0]; p[0] = a[0]; }")
launches = {}
for mib in (0.125, 1, 8, 32):
    n = int(mib * 2**20 / 4)
    launches[f"one output, {mib} MiB"] = (lambda n=n: ONE(inputs=[a], grid=(32, 1, 1), threadgroup=(32, 1, 1),
                                                           output_shapes=[(n,)], output_dtypes=[mx.float32])[0])
    launches[f"two outputs, {mib} MiB each"] = (lambda n=n: TWO(inputs=[a], grid=(32, 1, 1), threadgroup=(32, 1, 1),
                                                                 output_shapes=[(n,), (n,)],
                                                                 output_dtypes=[mx.float32] * 2)[0])
for rep in range(2):
    hs.table(f"empty kernels, outputs by size (round {rep})", launches)
