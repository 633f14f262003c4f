"""Session 8, call G6: dsmem_probe.py again, with `shared_memory` where MLX 0.32.4 takes it (the constructor,
mx.fast.cuda_kernel(..., shared_memory=bytes)): does a kernel asking for more than 48 KiB of dynamic shared memory
launch (the opt-in an H200 allows up to 227 KiB)? A kernel writes and reads back `extern __shared__` floats."""
import mlx.core as mx

SOURCE = """
  extern __shared__ float buf[];
  const uint n = (uint)count[0];
  for (uint i = threadIdx.x; i < n; i += blockDim.x) buf[i] = float(i);
  __syncthreads();
  float s = 0.0f;
  for (uint i = threadIdx.x; i < n; i += blockDim.x) s += buf[n - 1u - i];
  out[threadIdx.x] = s;
"""
for kib in (16, 47, 48, 64, 96, 160, 227):
    n = kib * 1024 // 4
    try:
        kernel = mx.fast.cuda_kernel(name=f"dsmem_probe_{kib}", input_names=["count"], output_names=["out"],
                                     source=SOURCE, header="typedef unsigned int uint;", shared_memory=kib * 1024)
        (out,) = kernel(inputs=[mx.array([n], dtype=mx.int32)], grid=(128, 1, 1), threadgroup=(128, 1, 1),
                        output_shapes=[(128,)], output_dtypes=[mx.float32])
        total = out.sum().item()
        print(f"{kib:4d} KiB: launched, sum {total:.0f} (expected {n * (n - 1) / 2:.0f})", flush=True)
    except Exception as e:  # noqa: BLE001 - a probe: report what MLX said
        print(f"{kib:4d} KiB: {type(e).__name__}: {str(e)[:300]}", flush=True)
