"""Compile rendered CUDA translation units with nvcc, as the CI stand-in for a GPU.

Used by the nvcc compile tests (``test_cuda_compile.py``, ``test_cuda_compile_decode.py``).
MLX's CUDA headers are not on a CPU machine: ``STANDIN_UTILS`` is the minimal
stand-in for ``mlx/backend/cuda/device/utils.cuh``: the CUDA includes MLX's
version makes (cuda_bf16.h, cuda_fp16.h, cuda/std array/limits/tuple) and the
``Shape`` / ``Strides`` types the generated signature uses (``cuda::std::array``
of ``MAX_NDIM`` = 10 int32 / int64), nothing else. On a GPU the real headers and
NVRTC compile the same units (the H200 record: ``records/h200-cuda/``).

Units are concatenated into one file per batch (a ``#line`` directive before
each names its kernel in errors; the header guards of
``impl.kernels.compile.full_header`` make that legal) and the batches compile
in parallel. Warnings are errors (``--Werror all-warnings``) except the one the
prelude documents and suppresses (20199-D, ``#pragma clang loop``), so a body
that compiles only with a new warning fails before a GPU run would. After a
successful compile every kernel must be among the entry functions ptxas reports,
so no unit was silently dropped.
"""

from __future__ import annotations

import re
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


# Units per nvcc process: a batch larger than this is split, so one long batch (multi-query's 75 units, ~40 s
# alone) does not leave the other core idle; each process re-parses the preludes (~1 s). The decode compile test
# alone on 2 cores: 158 s split, 171 s unsplit.
UNITS_PER_PROCESS = 32
ENTRY = re.compile(r"Compiling entry function '([^']+)'")
REGISTERS = re.compile(r"Used (\d+) registers")


def compile_batches(workdir: Path, batches: dict[str, list[Launch]],
                    registers: dict[str, int] | None = None) -> list[str]:
    """Compile each named batch of launches with nvcc in ``workdir``; return one message per failure.

    Device code only (``-cubin``), as MLX's NVRTC compiles it: the host pass of ``nvcc -c`` checks nothing a
    kernel body holds and took 15-55% of the time. ``ptxas -v`` names every entry function it compiled (each
    unit's kernel must be among them: no unit silently dropped) and its registers per thread, which go into
    ``registers`` (kernel name -> count) when it is given.
    """
    if NVCC is None:
        raise RuntimeError(SKIP_REASON)
    device_dir = workdir / "mlx" / "backend" / "cuda" / "device"
    device_dir.mkdir(parents=True, exist_ok=True)
    (device_dir / "utils.cuh").write_text(STANDIN_UTILS)
    jobs = {}
    for name, launches in batches.items():
        chunks = [launches[i:i + UNITS_PER_PROCESS] for i in range(0, len(launches), UNITS_PER_PROCESS)]
        for index, chunk in enumerate(chunks):
            label = name if len(chunks) == 1 else f"{name}.{index}"
            source, kernels = batch_source(chunk)
            path = workdir / f"{label}.cu"
            path.write_text(source)
            command = [NVCC, f"-arch={ARCH}", "-std=c++17", "-cubin", str(path), "-o", str(path.with_suffix(".cubin")),
                       f"-I{workdir}", "--Werror", "all-warnings", "-Xptxas", "-v"]
            jobs[label] = (kernels, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                     text=True))
    failures = []
    for label, (kernels, process) in jobs.items():
        log, _ = process.communicate(timeout=300)
        if process.returncode:
            failures.append(f"--- {label} ({len(kernels)} kernels) ---\n{log}")
            continue
        compiled = entry_registers(log)
        missing = [k for k in kernels if not any(k in entry for entry in compiled)]
        if missing:
            failures.append(f"{label}: kernels ptxas did not compile: {missing}")
        if registers is not None:
            for kernel in kernels:
                counts = [n for entry, n in compiled.items() if kernel in entry]
                if counts:
                    registers[kernel] = max(counts)
    return failures


def entry_registers(log: str) -> dict[str, int]:
    """``ptxas -v``'s report: entry function (mangled) -> registers per thread."""
    out, entry = {}, None
    for line in log.splitlines():
        if found := ENTRY.search(line):
            entry = found.group(1)
        elif entry and (found := REGISTERS.search(line)):
            out[entry] = int(found.group(1))
            entry = None
    return out
