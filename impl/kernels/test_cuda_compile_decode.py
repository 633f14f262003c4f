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
from impl.kernels import KernelSpec, Launch
from impl.kernels.nvcc import NVCC, SKIP_REASON, compile_batches

DTYPES = (mx.bfloat16, mx.float16, mx.float32)
# (GQA factor, block); KVH = 2, N = 700.
KVQ4_GEOMETRIES = ((2, 512), (4, 512), (6, 100), (10, 64))
# (H, KVH, L, D, N, splits): NQ = 4 / 64 / 2 / 18 / 24.
MULTI_QUERY_GEOMETRIES = ((8, 2, 1, 64, 40, None), (16, 2, 8, 128, 600, None), (2, 1, 2, 256, 300, 3),
                          (12, 2, 3, 80, 1000, None), (6, 1, 4, 256, 257, None))


def kvq4_launches() -> list[Launch]:
    launches = []
    for dtype in DTYPES:
        for rep, block in KVQ4_GEOMETRIES:
            kvh, n = 2, 700
            q = mx.zeros((1, kvh * rep, 1, kvq4.HEAD_DIM), dtype)
            planes = kvq4.QuantizedKV(mx.zeros((1, kvh, n, 32), mx.uint32), mx.zeros((1, kvh, n, 4), dtype),
                                      mx.zeros((1, kvh, n, 4), dtype))
            partial = kvq4.partial_launch(q, planes, planes, block)
            (part_shape,) = partial.output_shapes
            launches += [partial, kvq4.merge_launch(mx.zeros(part_shape, mx.float32), dtype, kvh, rep)]
    return launches


def multi_query_launches(dtypes=DTYPES, geometries=MULTI_QUERY_GEOMETRIES) -> list[Launch]:
    launches = []
    for dtype in dtypes:
        for h, kvh, L, d, n, splits in geometries:
            q, kv = mx.zeros((1, h, L, d), dtype), mx.zeros((1, kvh, n, d), dtype)
            # Every schedule where CUDA takes two stages (Metal runs one: impl.multi_query.pipeline_stages): one
            # stage, two, and the CUDA-only ring partial at its default slots and at 4 (ring_slots).
            nq = h // kvh * L
            schedules = [(1, 0)]
            if mq.pipeline_stages(nq, d, "cuda") == 2:
                schedules += [(2, 0), (2, mq.ring_slots(nq, d, dtype, "cuda")), (2, 4)]
            for stages, ring in schedules:
                partial = mq.partial_launch(q, kv, kv, mx.ones((1,), dtype), splits or mq.default_splits(n, kvh),
                                            stages, ring)
                launches.append(partial)
            (part_shape,) = partial.output_shapes
            launches.append(mq.merge_launch(mx.zeros(part_shape, mx.float32), dtype, h, L, kvh, d))
    return launches


# Each lane writes its thread_elements() at its fragment position (sg_fragment_row / sg_fragment_col: Metal's
# layout on Metal, the prelude's on CUDA). With B' = B or B^T and A' = A or A^T (TRANSPOSE):
#   D = A * B' + C, E = A * B' + make_filled(0.5), F = B' itself, G = A' * B' (16-bit operands, A and B staged
#   in threadgroup memory as half: the tensor-core path, transposed storage on both operands when TRANSPOSE),
#   H = A * B' from float matrices loaded straight from the inputs (the shuffle emulation on CUDA),
#   I = A * B' + C and J = A' * B' + make_filled(0.5) from one simdgroup_multiply_accumulate_rows16 (on CUDA one
#   16-row mma: I the rows 0..7, J the rows 8..15),
#   K = the four 8x8 blocks W_0..W_3 of an 8x32 W (or their transposes) from one simdgroup_load_x4 (one
#   ldmatrix.x4 on CUDA, .trans for plain loads), staged as half with rows 40 apart, and L = A * W_2' (a matrix of
#   that load as the B operand).
SIMDGROUP_PROBE_SOURCE = """
  const uint lane = thread_index_in_simdgroup;
  const uint fm = sg_fragment_row(lane), fn = sg_fragment_col(lane);
  threadgroup half ta[64];
  threadgroup half tb[64];
  threadgroup half tw[8 * 40];
  for (uint i = lane; i < 256u; i += 32u) tw[(i / 32u) * 40u + i % 32u] = half(w[i]);
  ta[lane] = half(a[lane]); ta[lane + 32u] = half(a[lane + 32u]);
  tb[lane] = half(b[lane]); tb[lane + 32u] = half(b[lane + 32u]);
  threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  metal::simdgroup_half8x8 ma, mb, mat;
  metal::simdgroup_load(ma, ta, (ulong)8);
  metal::simdgroup_load(mb, tb, (ulong)8, ulong2(0, 0), TRANSPOSE);
  metal::simdgroup_load(mat, ta, (ulong)8, ulong2(0, 0), TRANSPOSE);
  metal::simdgroup_float8x8 mc, md, mg, mh;
  mc.thread_elements()[0] = c[fm * 8u + fn];
  mc.thread_elements()[1] = c[fm * 8u + fn + 1u];
  metal::simdgroup_multiply_accumulate(mc, ma, mb, mc);
  md = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
  metal::simdgroup_multiply_accumulate(md, ma, mb, md);
  mg = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  metal::simdgroup_multiply_accumulate(mg, mat, mb, mg);
  metal::simdgroup_float8x8 fa, fb;
  metal::simdgroup_load(fa, a, (ulong)8);
  metal::simdgroup_load(fb, b, (ulong)8, ulong2(0, 0), TRANSPOSE);
  mh = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  metal::simdgroup_multiply_accumulate(mh, fa, fb, mh);
  metal::simdgroup_float8x8 mi, mj;
  mi.thread_elements()[0] = c[fm * 8u + fn];
  mi.thread_elements()[1] = c[fm * 8u + fn + 1u];
  mj = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.5f);
  simdgroup_multiply_accumulate_rows16(mi, mj, ma, mat, mb);
  metal::simdgroup_half8x8 w4[4];
  simdgroup_load_x4(w4[0], w4[1], w4[2], w4[3], tw, (ulong)40, TRANSPOSE);
  metal::simdgroup_float8x8 ml = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  metal::simdgroup_multiply_accumulate(ml, ma, w4[2], ml);
  for (uint e = 0; e < 2u; ++e) {
    d[fm * 8u + fn + e] = mc.thread_elements()[e];
    ee[fm * 8u + fn + e] = md.thread_elements()[e];
    ff[fm * 8u + fn + e] = float(mb.thread_elements()[e]);
    g[fm * 8u + fn + e] = mg.thread_elements()[e];
    h[fm * 8u + fn + e] = mh.thread_elements()[e];
    ii[fm * 8u + fn + e] = mi.thread_elements()[e];
    jj[fm * 8u + fn + e] = mj.thread_elements()[e];
    ll[fm * 8u + fn + e] = ml.thread_elements()[e];
    for (uint i = 0; i < 4u; ++i) kk[i * 64u + fm * 8u + fn + e] = float(w4[i].thread_elements()[e]);
  }
"""
SIMDGROUP_PROBE = KernelSpec("simdgroup_probe", ("a", "b", "c", "w"), ("d", "ee", "ff", "g", "h", "ii", "jj", "kk", "ll"),
                             SIMDGROUP_PROBE_SOURCE,
                             header=mq.HEADER)  # the fragment layout names for Metal (the CUDA prelude has its own)


def probe_launch(a: mx.array, b: mx.array, c: mx.array, w: mx.array, transpose: bool) -> Launch:
    return Launch(SIMDGROUP_PROBE, (a, b, c, w), (("TRANSPOSE", transpose),), grid=(32, 1, 1), threadgroup=(32, 1, 1),
                  output_shapes=((64,),) * 7 + ((256,), (64,)), output_dtypes=(mx.float32,) * 9)


@pytest.mark.arms("metal", "cuda")
@pytest.mark.parametrize("transpose", [False, True], ids=["plain", "transposed"])
def test_simdgroup_matrix_semantics(arm, gate, transpose):
    """Small integers: half holds them exactly and every product and sum is exact in float32."""
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
    probes = [probe_launch(*(mx.zeros((64,)) for _ in range(3)), mx.zeros((256,)), t) for t in (False, True)]
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
