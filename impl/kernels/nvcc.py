"""Compile rendered CUDA translation units with nvcc, as the CI stand-in for a GPU.

Used by the nvcc compile tests (``test_cuda_compile.py``, ``test_cuda_compile_decode.py``).
MLX's CUDA headers are not on a CPU machine: ``STANDIN_UTILS`` is the minimal
stand-in for ``mlx/backend/cuda/device/utils.cuh``: the CUDA includes MLX's
version makes (cuda_bf16.h, cuda_fp16.h, cuda/std array/limits/tuple) and the
``Shape`` / ``Strides`` types the generated signature uses (``cuda::std::array``
of ``MAX_NDIM`` = 10 int32 / int64), nothing else. The GPU records under
``reports/runs/`` are where the real headers and NVRTC compile the same units.

Units are concatenated into one file per batch (a ``#line`` directive before
each names its kernel in errors; the header guards of
``impl.kernels.compile.full_header`` make that legal) and the batches compile
in parallel. Warnings are errors (``--Werror all-warnings``) except the one the
prelude documents and suppresses (20199-D, ``#pragma clang loop``), so a body
that compiles only with a new warning fails before a GPU run would. After a
successful compile every kernel must have its host stub in the object (``nm``),
so no unit was silently dropped.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .compile import Launch

NVCC = shutil.which("nvcc")
ARCH = "sm_90"  # Hopper (H100/H200): the device of the committed GPU records
SKIP_REASON = "nvcc is not installed: the CUDA compile test needs the CUDA toolkit"

STANDIN_UTILS = """// Stand-in for MLX's mlx/backend/cuda/device/utils.cuh (see impl/kernels/nvcc.py).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/array>
#include <cuda/std/limits>
#include <cuda/std/tuple>

#define MAX_NDIM 10

namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, MAX_NDIM>;
using Strides = cuda::std::array<int64_t, MAX_NDIM>;
}  // namespace mlx::core::cu
"""


def batch_source(launches: list[Launch]) -> tuple[str, list[str]]:
    """One file holding every distinct unit (identical instantiations appear once), and their kernels."""
    units, seen = [], []
    for launch in launches:
        function = launch.cuda_function
        if function in seen:
            continue
        seen.append(function)
        units.append(f'#line 1 "{function}.cu"\n{launch.cuda_source()}')
    return "\n".join(units), seen


def compile_batches(workdir: Path, batches: dict[str, list[Launch]]) -> list[str]:
    """Compile each named batch of launches with nvcc in ``workdir``; return one message per failure."""
    if NVCC is None:
        raise RuntimeError(SKIP_REASON)
    device_dir = workdir / "mlx" / "backend" / "cuda" / "device"
    device_dir.mkdir(parents=True, exist_ok=True)
    (device_dir / "utils.cuh").write_text(STANDIN_UTILS)
    jobs = {}
    for name, launches in batches.items():
        source, kernels = batch_source(launches)
        path = workdir / f"{name}.cu"
        path.write_text(source)
        command = [NVCC, f"-arch={ARCH}", "-std=c++17", "-c", str(path), "-o", str(path.with_suffix(".o")),
                   f"-I{workdir}", "--Werror", "all-warnings"]
        jobs[name] = (kernels, path.with_suffix(".o"),
                      subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    failures = []
    for name, (kernels, obj, process) in jobs.items():
        log, _ = process.communicate(timeout=300)
        if process.returncode:
            failures.append(f"--- {name} ({len(kernels)} kernels) ---\n{log}")
        elif shutil.which("nm"):
            symbols = subprocess.run(["nm", str(obj)], capture_output=True, text=True).stdout
            missing = [k for k in kernels if k not in symbols]
            if missing:
                failures.append(f"{name}: kernels missing from the object: {missing}")
    return failures
