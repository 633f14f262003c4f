"""The cuda arm of the decode kernels in CI, without a GPU: nvcc compiles every body as MLX would.

Same harness as ``test_cuda_compile.py`` (``impl.kernels.nvcc``: the stand-in for
MLX's ``utils.cuh``, batching, flags): for each template instantiation below, the ``Launch`` that
``impl.kvq4_decode`` / ``impl.multi_query`` would issue is built from small
real arrays (nothing runs), its translation unit rendered
(``Launch.cuda_source()``: MLX's default header, the prelude
``metal_compat.cuh`` + ``metal_simdgroup.cuh``, the kernel's header, MLX's
signature and template constants, the body) and compiled with ``nvcc
-arch=sm_90 -cubin`` (device code, as MLX's NVRTC). Warnings are errors except the one the prelude documents and
suppresses (20199-D, ``#pragma clang loop`` in device code): a body that
compiles only with a new warning fails here, before the GPU run would.

Instantiations: every dtype (the template T, and the input pointer types);
kvq4 GQA factors 2 / 4 / 6 / 10 (10: the largest whose threadgroup memory fits
CUDA) and blocks 512 / 100 / 64 (100: not a multiple of SUB; 4 / 512: the
instantiation of the H200's 32/8/N32k benchmark at the default block), each
with its merge; multi-query head
dims 64 / 80 / 128 / 256, L 1..8, NQ up to 64, default and forced splits, one stage, two and the CUDA-only ring
partial (cp.async, dynamic shared memory) where CUDA runs two;
and ``SIMDGROUP_PROBE``, a kernel that exercises the simdgroup-matrix prelude
alone: ``test_simdgroup_matrix_semantics`` runs it on the compiled arms
(metal, cuda) and holds it bit-exact to NumPy, which checks the CUDA prelude's
fragment layout (``sg_fragment_row`` / ``sg_fragment_col``), loads (plain and
transposed: transposed storage, read back through thread_elements()) and
multiply-accumulate (tensor cores for half operands, either operand loaded
transposed; the shuffle emulation for float operands) against Metal's
definition directly, not only through the attention gates.

The prelude's fallback, ``MLXGATE_SIMDGROUP_EMULATE`` (Metal's layout, shuffle
emulation for every product), compiles too: the probes and two bf16
multi-query geometries, with the macro defined before the prelude.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import mlx.core as mx
import numpy as np
import pytest

from impl import kvq4_decode as kvq4
from impl import multi_query as mq
from impl.kernels import Launch
from impl.kernels.launches import (MULTI_QUERY_GEOMETRIES, kvq4_launches, multi_query_launches, probe_launch,
                                   probe_launches)
from impl.kernels.nvcc import NVCC, SKIP_REASON, compile_batches



@pytest.mark.arms("metal", "cuda")
@pytest.mark.parametrize("transpose", [False, True], ids=["plain", "transposed"])
def test_simdgroup_matrix_semantics(arm, gate, transpose):
    """Small integers: half holds them exactly and every product and sum is exact in float32 (the probe's outputs:
    ``impl.kernels.launches.SIMDGROUP_PROBE_SOURCE``)."""
    rng = np.random.default_rng(int(transpose))
    a, b, c = (rng.integers(-8, 9, (8, 8)).astype(np.float32) for _ in range(3))
    w = rng.integers(-8, 9, (8, 32)).astype(np.float32)
    d, e, f, g, h, i, j, k, l = probe_launch(*(mx.array(x.reshape(-1)) for x in (a, b, c, w)), transpose).run(arm)
    blocks = [w[:, 8 * n:8 * n + 8] for n in range(4)]
    blocks = [x.T for x in blocks] if transpose else blocks
    at, bt = (a.T, b.T) if transpose else (a, b)
    checks = ((d, a @ bt + c, "simdgroup D = A*B + C in the fragment layout"),
              (e, a @ bt + np.float32(0.5), "make_filled_simdgroup_matrix(0.5) as C"),
              (f, bt, "thread_elements() of a loaded matrix (transposed storage resolved on CUDA)"),
              (g, at @ bt, "both operands loaded with the transpose flag"),
              (h, a @ bt, "float operands (the shuffle emulation on CUDA)"),
              (i, a @ bt + c, "simdgroup_multiply_accumulate_rows16: the first tile, A * B + C"),
              (j, at @ bt + np.float32(0.5), "simdgroup_multiply_accumulate_rows16: the second tile (transposed "
               "storage when TRANSPOSE), A' * B + 0.5"),
              (l, a @ blocks[2], "a matrix of simdgroup_load_x4 as the B operand: A * W_2'"))
    gate.bit_exact(k.reshape(4, 8, 8), mx.array(np.stack(blocks)), what="simdgroup_load_x4: the four 8x8 blocks of W",
                   kernel="simdgroup_probe")
    for out, expected, what in checks:
        gate.bit_exact(out.reshape(8, 8), mx.array(expected.astype(np.float32)), what=what, kernel="simdgroup_probe")


def emulated(launch: Launch) -> Launch:
    """``launch`` with MLXGATE_SIMDGROUP_EMULATE defined before the prelude (the fallback implementation)."""
    return EmulatedLaunch(*(getattr(launch, f.name) for f in fields(Launch)))


@dataclass(frozen=True)
class EmulatedLaunch(Launch):
    def cuda_source(self) -> str:
        return "#define MLXGATE_SIMDGROUP_EMULATE\n" + super().cuda_source()


@pytest.mark.slow(seconds=150)  # nvcc on 2 cores: ~90 s of it the 12 emulated units
@pytest.mark.skipif(NVCC is None, reason=SKIP_REASON)
def test_decode_kernels_compile_as_cuda(tmp_path):
    probes = probe_launches()
    # The fallback (MLXGATE_SIMDGROUP_EMULATE) on the probes and two bf16 geometries only: its unrolled shuffle
    # products take ~2 s of nvcc per partial instance (the tensor-core instances ~0.25 s).
    fallback = probes + multi_query_launches((mx.bfloat16,), MULTI_QUERY_GEOMETRIES[1:4:2])
    failures = compile_batches(tmp_path, {"kvq4_decode": kvq4_launches(), "multi_query": multi_query_launches() + probes,
                                          "multi_query_emulated": [emulated(x) for x in fallback]})
    assert not failures, "nvcc could not compile the CUDA arm:\n" + "\n".join(failures)


def test_units_carry_the_simdgroup_prelude_and_strides():
    """The rendered units hold both prelude files, and the strided inputs get their Strides parameters."""
    q, kv = mx.zeros((1, 4, 2, 64), mx.bfloat16), mx.zeros((1, 2, 40, 64), mx.bfloat16)
    source = mq.partial_launch(q, kv, kv, mx.ones((1,), q.dtype), 1).cuda_source()
    assert "MLXGATE_METAL_COMPAT_CUH" in source and "MLXGATE_METAL_SIMDGROUP_CUH" in source
    assert source.index("MLXGATE_METAL_COMPAT_CUH") < source.index("MLXGATE_METAL_SIMDGROUP_CUH")
    signature = source.rsplit("__global__ void ", 1)[1].split(") {", 1)[0]
    assert "const __grid_constant__ Strides k_strides" in signature
    assert "const __grid_constant__ Strides v_strides" in signature
    assert "const __grid_constant__ Strides q_strides" in signature  # q is read as the view it is: no copy
    planes = kvq4.QuantizedKV(mx.zeros((1, 2, 9, 32), mx.uint32), mx.zeros((1, 2, 9, 4), mx.float16),
                              mx.zeros((1, 2, 9, 4), mx.float16))
    partial = kvq4.partial_launch(mx.zeros((1, 4, 1, 256), mx.float16), planes, planes, 512)
    signature = partial.cuda_source().rsplit("__global__ void ", 1)[1].split(") {", 1)[0]
    for name in ("kp", "ks", "kb", "vp", "vs", "vb"):
        assert f"Strides {name}_strides" in signature
    assert "Shape kp_shape" in signature  # N is read at run time
