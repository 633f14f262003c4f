"""Session 13, call U4: what does one more output of a custom kernel cost the host?

multi-query's partial writes three outputs (opart, mpart, lpart), paged attention's two (parts, normal), the fused
argmax two (ids, lse). MLX's ``CustomKernel::eval_gpu`` allocates each output and registers it with the command
encoder; a call's Python side makes one array per output. If that is ~1 us per output on the H200's host, packing
mpart and lpart into opart's buffer would be worth trying for multi-query L8 D128 (3.87-3.96x of the 4x target,
U2 / U3). Stand-ins: an empty kernel at multi-query 32/8/L8/D128/N32k's grid (32 splits x 8 KV heads, 128 threads)
writing 1, 2, 3 or 4 outputs, the first [32, 8, 32, 128] float32 and the others [32, 8, 32] float32 (each thread
writes one element of each), interleaved (perf.interleaved; us per call)."""
import sys

import mlx.core as mx

from perf.interleaved import interleaved, ratios, table

mx.set_default_device(mx.gpu)
SPLITS, KVH, NQ, D, THREADS = 32, 8, 32, 128, 128
NAMES = ("o", "a", "b", "c")


def kernel(outputs):
    writes = "\n".join(f"  {name}[i] = 1.0f;" if name == "o" else f"  if (i < SMALL) {name}[i] = 1.0f;"
                       for name in NAMES[:outputs])
    source = ("  const size_t i = (size_t)(blockIdx.y * gridDim.x + blockIdx.x) * THREADS + threadIdx.x;\n"
              f"  constexpr size_t SMALL = {SPLITS * KVH * NQ};\n{writes}\n")
    k = mx.fast.cuda_kernel(name=f"u4_outputs{outputs}", input_names=["x"], output_names=list(NAMES[:outputs]),
                            source=source)
    shapes = [(SPLITS, KVH, NQ, D)] + [(SPLITS, KVH, NQ)] * (outputs - 1)

    def call(x):
        return k(inputs=[x], template=[("THREADS", THREADS)], grid=(THREADS * SPLITS, KVH, 1),
                 threadgroup=(THREADS, 1, 1), output_shapes=shapes, output_dtypes=[mx.float32] * outputs)[0]
    return mx.compile(call)


x = mx.zeros((8,), mx.float32)
mx.eval(x)
calls = {f"{n} output{'s' if n > 1 else ''}": (lambda f=kernel(n): f(x)) for n in (1, 2, 3, 4)}
results = interleaved(calls, blocks=int(sys.argv[1]) if len(sys.argv) > 1 else 6, rounds=30)
print(table(results))
print(ratios(results, "1 output"))
