"""The cuda arm in CI, without a GPU: compile every kernel body as MLX would, with nvcc.

For every kernel and every template instantiation the tests use (pool dtypes,
KV bits, group sizes, head dims that are and are not multiples of 32, argmax
dtypes), the test builds the ``Launch`` the kernel module would issue (from
small real arrays; nothing is launched), renders the translation unit
``mx.fast.cuda_kernel`` generates for it (``Launch.cuda_source()``:
MLX's default header, our prelude and header, the signature from the input
and output names, dtypes and template values, the body) and compiles it with
``nvcc -arch=sm_90 -c``. A body edit that breaks CUDA fails here.

MLX's CUDA headers are not on this machine: ``STANDIN_UTILS`` below is the
minimal stand-in for ``mlx/backend/cuda/device/utils.cuh``: the CUDA includes
MLX's version makes (cuda_bf16.h, cuda_fp16.h, cuda/std array/limits/tuple)
and the ``Shape`` / ``Strides`` types the generated signature uses
(``cuda::std::array`` of ``MAX_NDIM`` = 10 int32 / int64), nothing else. The
H200 run (``reports/runs/``) is where the real headers and NVRTC compile them.

The units are concatenated into two batches (paged attention, argmax) compiled
in parallel (a ``#line`` directive before each names its kernel in errors);
the header guards of ``impl.kernels.compile.full_header`` make that legal.
Everything is written to a fresh temporary directory; nothing is cached.
"""

from __future__ import annotations

import shutil
import subprocess

import mlx.core as mx
import numpy as np
import pytest

from impl import normalized_argmax as argmax
from impl import paged_attention as paged
from impl.kernels import Launch, cuda_translation_unit
from properties import strategies as sts

NVCC = shutil.which("nvcc")
ARCH = "sm_90"  # Hopper (H100/H200): the device of the committed GPU record

STANDIN_UTILS = """// Stand-in for MLX's mlx/backend/cuda/device/utils.cuh (see test_cuda_compile.py).
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

DTYPES = ("bfloat16", "float16", "float32")
# (Hq, Hkv, n, Dk, Dv, block_size): DV a multiple of 32 and not (80), MQA, GQA.
GEOMETRIES = ((8, 2, 4, 128, 128, 16), (4, 1, 1, 80, 80, 8), (2, 2, 8, 256, 128, 64))
QUANTIZED = (sts.PagedQuantization(4, 32), sts.PagedQuantization(4, 64), sts.PagedQuantization(8, 64), sts.PagedQuantization(8, 128))


def paged_launches() -> list[Launch]:
    launches = []
    for dtype in DTYPES:
        for quant in (None, *QUANTIZED):
            geometries = GEOMETRIES if quant is None else (GEOMETRIES[0], GEOMETRIES[2])
            for hq, hkv, n, dk, dv, bs in geometries:
                case = sts.build_paged_case(np.random.default_rng(0), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                                        block_size=bs, length=70, quant=quant)
                table, scale, planes = paged._validate(case.q_mx, case.storage, case.table, case.length,
                                                       case.scale, direct=True)
                partial = paged.partial_launch(case.q_mx, case.storage, table, case.length, scale, planes)
                parts = mx.zeros(partial.output_shapes[0], mx.float32)
                normal = mx.zeros(partial.output_shapes[1], mx.float32)
                launches += [partial, paged.merge_launch(parts, normal, case.q_mx.dtype)]
    return launches


def argmax_launches() -> list[Launch]:
    launches = []
    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        x = mx.zeros((3, 2049), dtype)
        partial = argmax.partial_launch(x, mx.logsumexp(x, axis=-1, keepdims=True))
        values = mx.zeros(partial.output_shapes[0], mx.float32)
        indices = mx.zeros(partial.output_shapes[1], mx.uint32)
        launches += [partial, argmax.finish_launch(values, indices)]
    return launches


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


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the CUDA compile test needs the CUDA toolkit")
def test_every_kernel_compiles_as_cuda(tmp_path):
    (tmp_path / "mlx" / "backend" / "cuda" / "device").mkdir(parents=True)
    (tmp_path / "mlx" / "backend" / "cuda" / "device" / "utils.cuh").write_text(STANDIN_UTILS)
    jobs = {}
    for name, launches in (("paged_attention", paged_launches()), ("normalized_argmax", argmax_launches())):
        source, kernels = batch_source(launches)
        path = tmp_path / f"{name}.cu"
        path.write_text(source)
        command = [NVCC, f"-arch={ARCH}", "-std=c++17", "-c", str(path), "-o", str(path.with_suffix(".o")),
                   f"-I{tmp_path}", "--Werror", "cross-execution-space-call"]
        jobs[name] = (kernels, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    failures = []
    for name, (kernels, process) in jobs.items():
        log, _ = process.communicate(timeout=300)
        if process.returncode:
            failures.append(f"--- {name} ({len(kernels)} kernels) ---\n{log}")
        # every unit was compiled: each kernel has its host launch stub in the object
        if not process.returncode and shutil.which("nm"):
            symbols = subprocess.run(["nm", str(tmp_path / f"{name}.o")], capture_output=True, text=True).stdout
            missing = [k for k in kernels if k not in symbols]
            if missing:
                failures.append(f"{name}: kernels missing from the object: {missing}")
    assert not failures, "nvcc could not compile the CUDA arm:\n" + "\n".join(failures)


def test_translation_unit_matches_mlx_layout():
    """The rendered unit follows build_kernel: shape params only where the body names them, template
    constants before the body, the kernel name with MLX's template hash."""
    parts, normal = mx.zeros((4, 2, 3, 80), mx.float32), mx.zeros((4, 2, 3, 2), mx.float32)
    source = paged.merge_launch(parts, normal, mx.bfloat16).cuda_source()
    head, body = source.rsplit("__global__ void ", 1)
    assert head.startswith('\n#include "mlx/backend/cuda/device/utils.cuh"') and "metal_compat" in head
    signature = body.split(") {", 1)[0]
    assert signature.splitlines()[1:] == ["    const float* parts,", "    const float* normal,",
                                          "    const __grid_constant__ Shape normal_shape,",
                                          "    __nv_bfloat16* out"]
    launch = paged.merge_launch(parts, normal, mx.bfloat16)
    assert signature.splitlines()[0] == launch.cuda_function + "("
    assert launch.cuda_function.endswith("_bfloat16_t_80")  # OutT then DV, as passed
    assert "  using OutT = __nv_bfloat16;\n  constexpr int DV = 80;\n" in body
    assert source.rstrip().endswith("} // namespace mlx::core::cu")
    # MLX skips shape/strides parameters of 0-d inputs even when the source names them
    unit = cuda_translation_unit("k", "", "y[0] = x_shape[0];", [("x", mx.float32, 0)], [("y", mx.float32)], [])
    assert "x_shape" not in unit.split(") {", 1)[0]
