"""Session 7, call F2: multi-query 32/8/L8/D128/N32k (public function and compiled call), its control and an empty
kernel in eval8 and pipelined, under the MLX CUDA environment this process was started with (the call prints it):
how MLX's graph batching (MLX_MAX_OPS_PER_BUFFER, MLX_MAX_MB_PER_BUFFER, MLX_USE_CUDA_GRAPHS) moves the protocol's
fixed cost. Diagnostic only: perf's runs use MLX's defaults."""
import os
import sys
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import host_split as hs  # noqa: E402
import mlx.core as mx  # noqa: E402

print({k: v for k, v in os.environ.items() if k.startswith("MLX_")})
launches = hs.mq_launches(32768)
for name in ("mq public", "mq compiled", "sdpa_rows (control)", "noop x2"):
    launch = launches[name]
    mx.eval(launch())
    print(f"{name:24s} eval8 {hs.eval8_us(launch):7.1f}  pipelined {hs.pipelined_us(launch):7.1f} us", flush=True)
