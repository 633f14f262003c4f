"""Every kernel instance the suite launches, as ``Launch`` objects built from small real arrays (nothing runs).

The compile checks render these: ``test_cuda_compile*.py`` compiles their CUDA units with nvcc, and
``test_metal_source.py`` / ``test_metal_frontend.py`` hold their Metal units equal to MLX's rendering and
type-check them with clang against the Metal stand-in (``metal_frontend``). One list per kernel family, each
covering the template instances the tests and the public calls reach: pool dtypes, KV bits and group sizes,
head dims that are and are not multiples of 32, argmax dtypes and vocabularies, kvq4 GQA factors and blocks,
multi-query head dims, query rows and schedules.

``metal_launches()`` is the Metal arm's set: the specs whose ``arms`` include metal at the schedules Metal runs
(one K/V stage for multi-query; kvq4's GQA factors within Metal's 32 KiB), plus what only Metal's signature
distinguishes: inputs of fewer than 8 elements (MLX passes them in the ``constant`` address space), each
kernel's largest threadgroup-memory instance, and the Metal-only probes of ``impl.metal_probes``.
"""

from __future__ import annotations

import contextlib

import mlx.core as mx
import numpy as np

from impl import kvq4_decode as kvq4
from impl import multi_query as mq
from impl import normalized_argmax as argmax
from impl import paged_attention as paged

from .compile import KernelSpec, Launch

__all__ = ["DTYPES", "GEOMETRIES", "RING_GEOMETRIES", "KVQ4_GEOMETRIES", "MULTI_QUERY_GEOMETRIES", "SIMDGROUP_PROBE", "argmax_launches",
           "half_row_launches", "kvq4_launches", "metal_launches", "multi_query_launches", "paged_launches",
           "probe_launch", "ring_launches", "simt_launches", "small_input_launches", "strided_launches"]

DTYPES = (mx.bfloat16, mx.float16, mx.float32)
# (Hq, Hkv, n, Dk, Dv, block_size): DV a multiple of 32 and not (80), MQA, GQA; the last: Dv 256 with 8 query
# rows per KV head, the paged partial's largest combine buffers (rows_per_threadgroup bounds them by 32 KiB).
GEOMETRIES = ((8, 2, 4, 128, 128, 16), (4, 1, 1, 80, 80, 8), (2, 2, 8, 256, 128, 64), (8, 1, 8, 256, 256, 16))
# (GQA factor, block); KVH = 2, N = 700.
KVQ4_GEOMETRIES = ((2, 512), (4, 512), (6, 100), (10, 64))
# (H, KVH, L, D, N, splits): NQ = 4 / 64 / 2 / 18 / 24.
MULTI_QUERY_GEOMETRIES = ((8, 2, 1, 64, 40, None), (16, 2, 8, 128, 600, None), (2, 1, 2, 256, 300, 3),
                          (12, 2, 3, 80, 1000, None), (6, 1, 4, 256, 257, None))


def _quantizations():
    from properties import strategies as sts

    return (sts.PagedQuantization(4, 32), sts.PagedQuantization(4, 64), sts.PagedQuantization(8, 64),
            sts.PagedQuantization(8, 128))


def _paged_pair(dtype, quant, hq, hkv, n, dk, dv, bs, length=70, spare_blocks=2, arm=None) -> list[Launch]:
    from properties import strategies as sts

    case = sts.build_paged_case(np.random.default_rng(0), dtype=dtype, hq=hq, hkv=hkv, n=n, dk=dk, dv=dv,
                                block_size=bs, length=length, quant=quant, spare_blocks=spare_blocks)
    table, scale, planes, _ = paged._validate(case.q_mx, case.storage, case.table, case.length, case.scale, direct=True)
    partial = paged.partial_launch(case.q_mx, case.storage, table, case.length, scale, planes, arm=arm)
    parts = mx.zeros(partial.output_shapes[0], mx.float32)
    return [partial, paged.merge_launch(parts, partial.inputs[4], case.q_mx.dtype)]


def paged_launches() -> list[Launch]:
    launches = []
    for dtype in ("bfloat16", "float16", "float32"):
        for quant in (None, *_quantizations()):
            geometries = GEOMETRIES if quant is None else (GEOMETRIES[0], GEOMETRIES[2])
            for geometry in geometries:
                launches += _paged_pair(dtype, quant, *geometry)
    return launches


# (Hq, Hkv, n, D, block_size, length) of the matrix partial's ring fetch (CUDA only): the H200 benchmark's 32/8/D128
# and 8/1 instantiations, D64, blocks of 4 (a table entry per row) and 24 (one block per step, off a power of two).
RING_GEOMETRIES = ((32, 8, 1, 128, 16, 300), (8, 1, 1, 128, 16, 300), (8, 2, 4, 64, 4, 70), (4, 1, 3, 128, 24, 509))


def ring_launches() -> list[Launch]:
    """The ring fetch's partials (``paged.set_matrix_ring``: 2 to MAX_RING_SLOTS slots) per 16-bit dtype, with their
    merges, as the cuda arm launches them."""
    previous, launches = paged.MATRIX_RING, []
    try:
        for slots in range(2, paged.launch.MAX_RING_SLOTS + 1):
            paged.set_matrix_ring(slots)
            for dtype in ("bfloat16", "float16"):
                for hq, hkv, n, d, bs, length in RING_GEOMETRIES:
                    launches += _paged_pair(dtype, None, hq, hkv, n, d, d, bs, length, arm="cuda")
    finally:
        paged.set_matrix_ring(previous)
    assert all(launch.spec is paged.launch.MATRIX_PARTIAL_RING for launch in launches[::2]), "a launch left the ring"
    return launches


def strided_launches() -> list[Launch]:
    """The direct body over kvq4's strided cache (``KVQ4`` layout) per dtype: GQA 2 and 8 (two row chunks)."""
    launches = []
    for dtype in DTYPES:
        for h, kvh in ((4, 2), (8, 1)):
            q = mx.zeros((1, h, 1, kvq4.HEAD_DIM), dtype)
            planes = kvq4.QuantizedKV(mx.zeros((1, kvh, 700, 32), mx.uint32), mx.zeros((1, kvh, 700, 4), dtype),
                                      mx.zeros((1, kvh, 700, 4), dtype))
            cache = kvq4._cache(planes, planes)
            partial = paged.strided_partial_launch(q, cache, 700, 0.0625)
            parts = mx.zeros(partial.output_shapes[0], mx.float32)
            launches += [partial, paged.merge_launch(parts, partial.inputs[4], dtype)]
    return launches


@contextlib.contextmanager
def _simt_partial():
    """The SIMT partial where the matrix partial would serve (``paged.set_matrix_partial(False)``), for a block."""
    previous = (paged.USE_MATRIX_PARTIAL, paged.MATRIX_TOKEN_TILES)
    paged.set_matrix_partial(False)
    try:
        yield
    finally:
        paged.set_matrix_partial(*previous)


def simt_launches() -> list[Launch]:
    """The SIMT partials of the plain 16-bit pools the matrix partial takes by default (``paged_launches`` holds the
    matrix partial there)."""
    taken = {launch.cuda_function for launch in paged_launches()}
    with _simt_partial():
        return [launch for launch in paged_launches() if launch.spec is paged.PARTIAL
                and launch.cuda_function not in taken]


def half_row_launches() -> list[Launch]:
    """The plain SIMT partials with 16 lanes per row (``paged.set_lane_map(16)``), V = 8 and V = 4."""
    previous = (paged.LANES_PER_ROW, paged.WIDE_LOADS)
    paged.set_lane_map(16)
    try:
        with _simt_partial():
            return [launch for launch in paged_launches() if launch.spec is paged.PARTIAL
                    and dict(launch.template)["LPR"] == 16]
    finally:
        paged.set_lane_map(*previous)


def argmax_launches() -> list[Launch]:
    """Per dtype, the row kernel and the fused variant at a vector-path vocabulary (V % 4 == 0, 1024 threads) and
    an element-path one; the fused variant also at a vocabulary MLX's logsumexp gives 32 threads."""
    launches = []
    for dtype in DTYPES:
        for vocab in (151936, 2049):
            x = mx.zeros((3, vocab), dtype)
            launches += [argmax.row_launch(x, mx.logsumexp(x, axis=-1, keepdims=True)), argmax.fused_launch(x),
                         argmax.fused_launch(x, with_lse=True)]
        launches += [argmax.fused_launch(mx.zeros((3, 100), dtype), with_lse=with_lse) for with_lse in (False, True)]
    return launches


def kvq4_launches(geometries=KVQ4_GEOMETRIES) -> list[Launch]:
    launches = []
    for dtype in DTYPES:
        for rep, block in geometries:
            kvh, n = 2, 700
            q = mx.zeros((1, kvh * rep, 1, kvq4.HEAD_DIM), dtype)
            planes = kvq4.QuantizedKV(mx.zeros((1, kvh, n, 32), mx.uint32), mx.zeros((1, kvh, n, 4), dtype),
                                      mx.zeros((1, kvh, n, 4), dtype))
            partial = kvq4.partial_launch(q, planes, planes, block)
            (part_shape,) = partial.output_shapes
            launches += [partial, kvq4.merge_launch(mx.zeros(part_shape, mx.float32), dtype, kvh, rep)]
    return launches


def multi_query_launches(dtypes=DTYPES, geometries=MULTI_QUERY_GEOMETRIES, arm: str = "cuda") -> list[Launch]:
    """The partial at every schedule ``arm`` takes (CUDA: one stage, two, and the CUDA-only ring partial at its
    default slots and at 4 where CUDA runs two; Metal: one stage, ``mq.pipeline_stages``) and the merge."""
    launches = []
    for dtype in dtypes:
        for h, kvh, L, d, n, splits in geometries:
            q, kv = mx.zeros((1, h, L, d), dtype), mx.zeros((1, kvh, n, d), dtype)
            nq = h // kvh * L
            schedules = [(1, 0)]
            if mq.pipeline_stages(nq, d, arm) == 2:
                schedules += [(2, 0), (2, mq.ring_slots(nq, d, dtype, arm)), (2, 4)]
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


def probe_launches() -> list[Launch]:
    return [probe_launch(*(mx.zeros((64,)) for _ in range(3)), mx.zeros((256,)), t) for t in (False, True)]


def small_input_launches() -> list[Launch]:
    """Instances whose inputs have fewer than 8 elements, which MLX passes in Metal's ``constant`` address space:
    normalized argmax over logits [1, 5], [2, 3], [1, 1] and [1, 7] (row kernel and fused scan), and the paged
    partial over a pool of one block of one token, per dtype (plain, and KV4 / KV8 at the smallest group)."""
    launches = []
    for dtype in DTYPES:
        for shape in ((1, 5), (2, 3), (1, 1), (1, 7)):
            x = mx.zeros(shape, dtype)
            launches += [argmax.row_launch(x, mx.logsumexp(x, axis=-1, keepdims=True)),
                         argmax.fused_launch(x), argmax.fused_launch(x, with_lse=True)]
    from properties import strategies as sts

    for dtype in ("bfloat16", "float16", "float32"):
        for quant in (None, sts.PagedQuantization(4, 32), sts.PagedQuantization(8, 32)):
            d = 4 if quant is None else 32  # a quantized row needs a whole group
            launches += _paged_pair(dtype, quant, 1, 1, 1, d, d, 1, length=1, spare_blocks=0)
    return launches


def metal_launches() -> list[Launch]:
    """The Metal arm's instances (module docstring), the specs Metal cannot compile left out."""
    rep_max = kvq4.max_gqa_factor("metal")
    from impl import metal_probes  # the macos-metal job's probes: their units are checked here too

    launches = (paged_launches() + simt_launches() + strided_launches() + half_row_launches() + argmax_launches()
                + kvq4_launches(tuple(g for g in KVQ4_GEOMETRIES if g[0] <= rep_max))
                + multi_query_launches(arm="metal") + probe_launches() + small_input_launches()
                + metal_probes.metal_probe_launches())
    return [launch for launch in launches if "metal" in launch.spec.arms]
