"""Session 7, call F5: what makes a custom kernel's node cost more than an empty one's in eval8. Empty kernels
(one thread writes one value) with multi-query's partial's inputs, outputs, shape/stride arguments and static
shared memory added one at a time, then the partial itself, all at N = 64 (the GPU work is negligible): us per call
of build (8 launches, no eval) and eval8, each uncompiled."""
import math
import sys
import pathlib

import mlx.core as mx

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import host_split as hs  # noqa: E402
import impl.multi_query as mq  # noqa: E402

n = 64
q = mx.random.normal((1, 32, 8, 128)).astype(mx.bfloat16)
k = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
v = mx.random.normal((1, 8, n, 128)).astype(mx.bfloat16)
s_t = mq._scale_array(1 / math.sqrt(128), q.dtype)
mx.eval(q, k, v, s_t)
splits = mq.default_splits(n, 8)
PART_SHAPES = [(splits, 8, 32, 128), (splits, 8, 32), (splits, 8, 32)]
F32 = [mx.float32] * 3


def kernel(name, inputs, outputs, body):
    return mx.fast.cuda_kernel(name=f"probe_{name}", input_names=inputs, output_names=outputs, source=body,
                               ensure_row_contiguous=False)


ONE = "if (threadIdx.x == 0 && blockIdx.x == 0) o[0] = 1.0f;"
THREE = "if (threadIdx.x == 0 && blockIdx.x == 0) { opart[0] = 1.0f; mpart[0] = 1.0f; lpart[0] = 1.0f; }"
variants = {
    "empty 1 in 1 out": (kernel("a", ["a"], ["o"], ONE), [s_t], [(1,)], [mx.float32], (32, 1, 1), (32, 1, 1)),
    "4 ins (q k v scale) 1 out": (kernel("b", ["q", "k", "v", "scale"], ["o"], ONE), [q, k, v, s_t], [(1,)],
                                  [mx.float32], (32, 1, 1), (32, 1, 1)),
    "1 in, 3 partial outs": (kernel("c", ["a"], ["opart", "mpart", "lpart"], THREE), [s_t], PART_SHAPES, F32,
                             (32, 1, 1), (32, 1, 1)),
    "4 ins 3 outs": (kernel("d", ["q", "k", "v", "scale"], ["opart", "mpart", "lpart"], THREE), [q, k, v, s_t],
                     PART_SHAPES, F32, (32, 1, 1), (32, 1, 1)),
    "4 ins 3 outs + shape/strides": (kernel("e", ["q", "k", "v", "scale"], ["opart", "mpart", "lpart"],
                                            THREE.replace("1.0f;", "1.0f + k_shape[2] + k_strides[1] + v_strides[1];")),
                                     [q, k, v, s_t], PART_SHAPES, F32, (32, 1, 1), (32, 1, 1)),
    "+ partial's grid (128 x 64 splits? x 8)": (kernel("f", ["q", "k", "v", "scale"], ["opart", "mpart", "lpart"],
                                                       THREE), [q, k, v, s_t], PART_SHAPES, F32,
                                                (128 * splits, 8, 1), (128, 1, 1)),
    "+ 34816 B static shared": (kernel("g", ["q", "k", "v", "scale"], ["opart", "mpart", "lpart"],
                                       "__shared__ float pad[8704]; pad[threadIdx.x] = 1.0f; __syncthreads();\n"
                                       + THREE.replace("1.0f;", "pad[5];")), [q, k, v, s_t], PART_SHAPES, F32,
                                (128 * splits, 8, 1), (128, 1, 1)),
}


def launcher(spec):
    kern, inputs, shapes, dtypes, grid, tg = spec
    return lambda: kern(inputs=inputs, grid=grid, threadgroup=tg, output_shapes=shapes, output_dtypes=dtypes)[0]


launches = {name: launcher(spec) for name, spec in variants.items()}
stages = mq.pipeline_stages(32, 128, "cuda")
launches["the partial (direct)"] = lambda: mq.partial_launch(q, k, v, s_t, splits, stages).run("cuda")[0]
compiled = mx.compile(lambda q_, k_, v_: mq.partial_launch(q_, k_, v_, s_t, splits, stages).run("cuda")[0])
launches["the partial (compiled)"] = lambda: compiled(q, k, v)
for rep in range(2):
    hs.table(f"N={n}, splits {splits} (round {rep})", launches)
