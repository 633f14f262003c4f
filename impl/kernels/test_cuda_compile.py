"""The cuda arm in CI, without a GPU: compile every kernel body as MLX would, with nvcc.

For every kernel and every template instantiation the tests use (pool dtypes,
KV bits, group sizes, head dims that are and are not multiples of 32, argmax
dtypes), the test builds the ``Launch`` the kernel module would issue (from
small real arrays; nothing is launched), renders the translation unit
``mx.fast.cuda_kernel`` generates for it (``Launch.cuda_source()``:
MLX's default header, our prelude and header, the signature from the input
and output names, dtypes and template values, the body) and compiles it with
``nvcc -arch=sm_90 -cubin`` (device code, as MLX's NVRTC). A body edit that breaks CUDA fails here. The
argmax row kernel and its fused variant launch 1024-thread blocks, so their
register counts (ptxas ``-v``) must also stay within 64 per thread, and within
32 on the vector path (two blocks per SM).

The harness (the stand-in for MLX's ``utils.cuh``, batching, nvcc flags) is
``impl.kernels.nvcc``. Everything is written to a fresh temporary directory;
nothing is cached.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest

from impl import normalized_argmax as argmax
from impl import paged_attention as paged
from impl.kernels import Launch, cuda_translation_unit
from impl.kernels.launches import (argmax_launches, half_row_launches, paged_launches, ring_launches, simt_launches,
                                   small_input_launches,
                                   strided_launches)
from impl.kernels.nvcc import NVCC, SKIP_REASON, compile_batches


@pytest.mark.slow(seconds=25)
@pytest.mark.skipif(NVCC is None, reason=SKIP_REASON)
def test_every_kernel_compiles_as_cuda(tmp_path):
    failures = compile_batches(tmp_path, {"paged_attention": paged_launches() + strided_launches(),
                                          "paged_attention_half_rows": half_row_launches() + simt_launches(),
                                          "normalized_argmax": argmax_launches(),
                                          "small_inputs": small_input_launches()})
    assert not failures, "nvcc could not compile the CUDA arm:\n" + "\n".join(failures)


@pytest.mark.skipif(NVCC is None, reason=SKIP_REASON)
def test_argmax_blocks_share_an_sm(tmp_path):
    """The row kernel's and the fused variant's registers. A 1024-thread block needs <= 64 per thread to launch at
    all (65536 per SM; MLX gives NVRTC no launch bounds, so a body that grew past 64 would compile and then fail to
    launch), and <= 32 on the vector path for two blocks to share an SM: the calls of a round then overlap, which
    is what made the raw-logit scan faster (impl/normalized_argmax.py, Algorithm). ptxas -v reports the count."""
    launches = [launch for launch in argmax_launches() if launch.threadgroup[0] == argmax.MAX_THREADS]
    assert launches, "no argmax launch uses MAX_THREADS threads"
    used = register_counts(tmp_path, launches)
    assert used and all(n <= 65536 // argmax.MAX_THREADS for n in used.values()), used
    vector_path = {launch.cuda_function for launch in launches if dict(launch.template)["V"] % argmax.CHUNK == 0}
    assert vector_path and all(used[name] <= 65536 // (2 * argmax.MAX_THREADS) for name in vector_path), used


@pytest.mark.skipif(NVCC is None, reason=SKIP_REASON)
def test_ring_fetch_compiles_and_keeps_four_threadgroups_per_sm(tmp_path):
    """The matrix partial's ring fetch (CUDA only: ``paged.set_matrix_ring``) compiles at every slot count, dtype and
    copy path. With 3 slots at D128 (4 SIMD groups, 128 threads, 49 KB of dynamic shared memory) it must stay at <= 128
    registers: 65536 / (4 x 128), so 4 threadgroups share an H200 SM and the 512-threadgroup grid is one wave. At 129
    it is 3 per SM, 1.29 waves, and 2 slots (129 registers) measured 155 against the register fetch's 136 us at
    32/8/D128/N128k (records/h200-cuda/matrix-partial-ring/); ptxas -v here and the H200's NVRTC both report 128."""
    launches = ring_launches()
    used = register_counts(tmp_path, launches)
    d128 = [launch for launch in launches if launch.spec is paged.launch.MATRIX_PARTIAL_RING
            and dict(launch.template)["DK"] == 128 and dict(launch.template)["RING"] == 3]
    assert d128 and all(used[launch.cuda_function] <= 65536 // (4 * 128) for launch in d128), used


def register_counts(workdir, launches: list[Launch]) -> dict[str, int]:
    """Registers per thread of each launch's kernel, from ``ptxas -v`` on one batch of their units."""
    counts: dict[str, int] = {}
    failures = compile_batches(workdir, {"argmax_registers": launches}, registers=counts)
    assert not failures, "\n".join(failures)
    missing = {launch.cuda_function for launch in launches} - counts.keys()
    assert not missing, f"ptxas reported no register count for {sorted(missing)}"
    return counts


def test_translation_unit_matches_mlx_layout():
    """The rendered unit follows build_kernel: shape params only where the body names them (the merge
    names none; the partial's ``*_shape`` test is the kvq4 unit's), template
    constants before the body, the kernel name with MLX's template hash."""
    parts = mx.zeros(paged.partial_shape(4, 2, 3, 80), mx.float32)
    geometry = mx.array([0.125, 100, 64], mx.float32)
    source = paged.merge_launch(parts, geometry, mx.bfloat16).cuda_source()
    head, body = source.rsplit("__global__ void ", 1)
    assert head.startswith('\n#include "mlx/backend/cuda/device/utils.cuh"') and "metal_compat" in head
    signature = body.split(") {", 1)[0]
    assert signature.splitlines()[1:] == ["    const float* parts,", "    const float* geometry,",
                                          "    __nv_bfloat16* out"]
    launch = paged.merge_launch(parts, geometry, mx.bfloat16)
    assert signature.splitlines()[0] == launch.cuda_function + "("
    sl, batch = paged.launch.MERGE_SLICES, paged.merge_batch(3)  # 3 partitions: a batch of 1
    assert launch.cuda_function.endswith(f"_bfloat16_t_80_{sl}_{batch}")  # OutT, DV, SL, B, as passed
    assert (f"  using OutT = __nv_bfloat16;\n  constexpr int DV = 80;\n  constexpr int SL = {sl};\n"
            f"  constexpr int B = {batch};\n") in body
    assert source.rstrip().endswith("} // namespace mlx::core::cu")
    # MLX skips shape/strides parameters of 0-d inputs even when the source names them
    unit = cuda_translation_unit("k", "", "y[0] = x_shape[0];", [("x", mx.float32, 0)], [("y", mx.float32)], [])
    assert "x_shape" not in unit.split(") {", 1)[0]


@pytest.mark.parametrize("prelude", ["CUDA_PRELUDE", "METAL_PRELUDE"])
def test_kernel_names_change_with_a_prelude(monkeypatch, prelude):
    """MLX caches compiled kernels by name (the CUDA backend on disk too): an edited prelude must rename
    every kernel, or a machine that ran the old prelude would keep serving its builds."""
    from impl.kernels import compile as compile_module

    launch = argmax.row_launch(mx.zeros((2, 64), mx.bfloat16), mx.zeros((2, 1), mx.bfloat16))
    before = launch.name
    monkeypatch.setattr(compile_module, prelude, getattr(compile_module, prelude) + "\n// edited\n")
    assert launch.name != before and launch.name.startswith(f"{argmax.ROW.name}_")


def test_cuda_only_specs_and_dynamic_shared_memory_are_checked(monkeypatch):
    """A spec names the compiled arms whose compiler takes its body (``arms``); a launch's dynamic shared memory
    is CUDA's, an int within the H200's 227 KiB. Refused before any compiler runs: a Metal build of a CUDA-only body,
    shared memory on Metal, a bad ``arms`` or ``shared_memory``. On CUDA the bytes reach ``mx.fast.cuda_kernel``
    (taken at construction), and only there."""
    from impl.kernels import MAX_DYNAMIC_SHARED_BYTES, KernelSpec, compiled_kernel

    cuda_only = KernelSpec("probe_cuda_only", ("x",), ("y",), "y[0] = x[0];", arms=("cuda",))
    both = KernelSpec("probe_both", ("x",), ("y",), "y[0] = x[0];")
    assert both.arms == ("metal", "cuda")
    with pytest.raises(ValueError, match="probe_cuda_only is a cuda-only kernel; arm 'metal'"):
        compiled_kernel(cuda_only, "metal", (mx.float32,))
    with pytest.raises(ValueError, match="shared_memory .* is CUDA's; arm 'metal'"):
        compiled_kernel(both, "metal", (mx.float32,), 1024)
    for bad in ((), ("vulkan",), ("cuda", "rocm")):
        with pytest.raises(ValueError, match="arms must be a non-empty subset"):
            KernelSpec("probe", ("x",), ("y",), "y[0] = x[0];", arms=bad)
    x = mx.zeros((1,), mx.float32)
    for bad in (-1, MAX_DYNAMIC_SHARED_BYTES + 1, True, 1.5):
        with pytest.raises(ValueError, match="shared_memory must be an int"):
            Launch(both, (x,), (), (1, 1, 1), (1, 1, 1), ((1,),), (mx.float32,), shared_memory=bad)
    asked = []
    monkeypatch.setattr(mx.fast, "cuda_kernel", lambda **kw: asked.append(kw))
    compiled_kernel.cache_clear()
    variant = Launch(cuda_only, (x,), (), (1, 1, 1), (1, 1, 1), ((1,),), (mx.float32,)).variant  # outputs, ranks
    try:
        compiled_kernel(cuda_only, "cuda", (mx.float32,), 65536, variant)
        compiled_kernel(cuda_only, "cuda", (mx.float32,), 0, variant)
    finally:
        compiled_kernel.cache_clear()  # the stand-in's results must not outlive the test
    assert asked[0]["shared_memory"] == 65536 and "shared_memory" not in asked[1]
    # MLX sets a kernel's shared-memory opt-in once per name: two sizes never share a name (no size: the old name).
    names = {kw["name"] for kw in asked}
    assert len(names) == 2
    launch = Launch(cuda_only, (x,), (), (1, 1, 1), (1, 1, 1), ((1,),), (mx.float32,), shared_memory=65536)
    assert launch.name in names and dataclasses.replace(launch, shared_memory=0).name in names
