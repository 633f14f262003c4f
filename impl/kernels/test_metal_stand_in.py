"""The Metal front-end check's own tests: what it must accept and what it must refuse.

``metal_stand_in/metal_stdlib`` models Metal's standard library for clang (its header says what it models);
``metal_frontend.lower`` turns Metal's attributes and threadgroup declarations into what clang takes. A check is
worth something only if real Metal passes it and broken Metal fails it:

* clean: MLX's own small kernels, from the headers in the installed MLX wheel (``arange.h``, ``softmax.h``,
  ``logsumexp.h``, ``sdpa_vector.h``: SIMD reductions, threadgroup memory, function constants), and kernels in
  the shape of MLX's documented examples (``docs/src/dev/custom_metal_kernels.rst``: an elementwise exp, its
  strided form through ``elem_to_loc``, a bilinear grid sample and its backward pass with atomic outputs),
  rendered by MLX's generator itself;
* refused, each a one-line change of a kernel that passes: a CUDA intrinsic, address-space mismatches, an
  implicit float -> bfloat (and bfloat -> half), an implicit vector conversion, 40 KiB of threadgroup memory,
  ``double``, a 32nd buffer, an unknown attribute, a struct shuffled across a SIMD group, a barrier given an int,
  ``as_type`` between sizes.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

from impl.kernels.metal_frontend import BUFFERS_MAX, CLANG, SKIP_REASON, check_unit, lower, mlx_include
from impl.kernels.metal_source import mlx_metal_source

pytestmark = pytest.mark.skipif(CLANG is None, reason=SKIP_REASON)

# MLX's kernels (header in the wheel, instances as MLX's .metal files would instantiate them).
MLX_KERNELS = {
    "arange.h": ("arange<float>", "arange<half>", "arange<bfloat16_t>", "arange<int32_t>"),
    "softmax.h": ("softmax_single_row<float, float>", "softmax_looped<half, float>",
                  "softmax_single_row<bfloat16_t, float>"),
    "logsumexp.h": ("logsumexp<float, float>", "logsumexp_looped<bfloat16_t, float>"),
    "sdpa_vector.h": ("sdpa_vector<half, 128>", "sdpa_vector<bfloat16_t, 64>", "sdpa_vector_2pass_1<float, 128>",
                      "sdpa_vector_2pass_2<half, 256>"),
}


@pytest.mark.parametrize("header", sorted(MLX_KERNELS))
def test_mlx_kernels_type_check(header):
    text = (mlx_include() / "mlx/backend/metal/kernels" / header).read_text()
    instances = "".join(f'template [[host_name("mlx_{i}")]] [[kernel]] decltype({x}) {x};\n'
                        for i, x in enumerate(MLX_KERNELS[header]))
    result = check_unit(text + "\n" + instances, header)
    assert result.clean, "\n".join(result.errors[:10])


# Kernels in the shape of MLX's documented examples, as (name, inputs, outputs, source, options).
DOC_EXP = "uint elem = thread_position_in_grid.x;\nT tmp = inp[elem];\nout[elem] = metal::exp(tmp);\n"
DOC_EXP_STRIDED = ("uint elem = thread_position_in_grid.x;\n"
                   "uint loc = elem_to_loc(elem, inp_shape, inp_strides, inp_ndim);\n"
                   "T tmp = inp[loc];\nout[elem] = metal::exp(tmp);\n")
DOC_GRID_SAMPLE = """
  uint elem = thread_position_in_grid.x;
  int H = x_shape[1], W = x_shape[2], C = x_shape[3];
  int gH = grid_shape[1], gW = grid_shape[2];
  int w_stride = C, h_stride = W * w_stride, b_stride = H * h_stride;
  uint grid_idx = elem / C * 2;
  float ix = ((grid[grid_idx] + 1) * W - 1) / 2;
  float iy = ((grid[grid_idx + 1] + 1) * H - 1) / 2;
  int ix_nw = floor(ix), iy_nw = floor(iy);
  int ix_ne = ix_nw + 1, iy_sw = iy_nw + 1;
  T nw = (ix_ne - ix) * (iy_sw - iy), ne = (ix - ix_nw) * (iy_sw - iy);
  int batch_idx = elem / C / gH / gW * b_stride;
  int channel_idx = elem % C;
  int base_idx = batch_idx + channel_idx;
  T I_nw = x[base_idx + iy_nw * h_stride + ix_nw * w_stride];
  T I_ne = x[base_idx + iy_nw * h_stride + ix_ne * w_stride];
  I_nw = iy_nw >= 0 && iy_nw <= H - 1 && ix_nw >= 0 && ix_nw <= W - 1 ? I_nw : T(0);
  I_ne = iy_nw >= 0 && iy_nw <= H - 1 && ix_ne >= 0 && ix_ne <= W - 1 ? I_ne : T(0);
  out[elem] = nw * I_nw + ne * I_ne;
"""
DOC_GRID_SAMPLE_VJP = """
  uint elem = thread_position_in_grid.x;
  int H = x_shape[1], W = x_shape[2], C = x_shape[3];
  int C_padded = ceildiv(C, threads_per_simdgroup) * threads_per_simdgroup;
  int w_stride = C, h_stride = W * w_stride, b_stride = H * h_stride;
  uint grid_idx = elem / C_padded * 2;
  float ix = ((grid[grid_idx] + 1) * W - 1) / 2;
  int ix_nw = floor(ix);
  int channel_idx = elem % C_padded;
  int base_idx = channel_idx;
  T gix = T(0);
  if (channel_idx < C) {
    int cot_index = elem / C_padded * C + channel_idx;
    T cot = cotangent[cot_index];
    int offset = base_idx + ix_nw * w_stride;
    atomic_fetch_add_explicit(&x_grad[offset], cot, memory_order_relaxed);
    gix = cot * T(ix);
  }
  gix = simd_sum(gix);
  if (thread_index_in_simdgroup == 0) {
    atomic_fetch_add_explicit(&grid_grad[grid_idx], gix, memory_order_relaxed);
  }
"""


def _doc_unit(name, input_names, output_names, source, inputs, template, atomic=False, contiguous=True):
    kernel = mx.fast.metal_kernel(name=name, input_names=input_names, output_names=output_names, source=source,
                                  ensure_row_contiguous=contiguous, atomic_outputs=atomic)
    return mlx_metal_source(kernel, inputs, template=template, grid=(32, 1, 1), threadgroup=(32, 1, 1),
                            output_shapes=[a.shape for a in inputs[:len(output_names)]],
                            output_dtypes=[inputs[0].dtype] * len(output_names))


DOC_CASES = {
    "exp": lambda dtype: _doc_unit("myexp", ["inp"], ["out"], DOC_EXP, [mx.zeros((16,), dtype)], [("T", dtype)]),
    "exp_strided": lambda dtype: _doc_unit("myexp_strided", ["inp"], ["out"], DOC_EXP_STRIDED,
                                           [mx.zeros((4, 8), dtype)], [("T", dtype)], contiguous=False),
    "grid_sample": lambda dtype: _doc_unit("grid_sample", ["x", "grid"], ["out"], DOC_GRID_SAMPLE,
                                           [mx.zeros((1, 4, 4, 8), dtype), mx.zeros((1, 2, 2, 2), dtype)],
                                           [("T", dtype)]),
    "grid_sample_vjp": lambda dtype: _doc_unit("grid_sample_grad", ["x", "grid", "cotangent"], ["x_grad", "grid_grad"],
                                               DOC_GRID_SAMPLE_VJP, [mx.zeros((1, 4, 4, 8), dtype),
                                                                     mx.zeros((1, 2, 2, 2), dtype),
                                                                     mx.zeros((1, 2, 2, 8), dtype)],
                                               [("T", dtype)], atomic=True),
}


# The dtypes each example holds in Metal: the grid sample assigns float expressions to T (Metal converts no float
# to bfloat implicitly) and its backward pass adds T into atomic<T> (Metal's atomics hold int, uint, bool, float).
DOC_DTYPES = {"exp": (mx.float32, mx.float16, mx.bfloat16), "exp_strided": (mx.float32, mx.float16, mx.bfloat16),
              "grid_sample": (mx.float32, mx.float16), "grid_sample_vjp": (mx.float32,)}


@pytest.mark.parametrize("case, dtype", [(c, d) for c in sorted(DOC_CASES) for d in DOC_DTYPES[c]], ids=str)
def test_documented_examples_type_check(case, dtype):
    result = check_unit(DOC_CASES[case](dtype), f"{case}[{dtype}]")
    assert result.clean, "\n".join(result.errors[:10])


# A kernel that passes, and one-line changes of it that Metal refuses: (replaced, replacement, expected error).
BASE_HEADER = """
template <typename T> METAL_FUNC float first(const device T* p) { return float(p[0]); }
struct Pair { float a, b; };
"""
BASE_BODY = """
  const uint i = thread_position_in_grid.x;
  threadgroup float shared[32];
  shared[i % 32u] = first(x);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float v = simd_sum(shared[0]);
  bfloat16_t b = bfloat16_t(v);
  half h = half(v);
  float4 f = float4(half4(h));
  out[i] = v + float(b) + float(h) + f.x + as_type<float>(uint(1));
"""
BROKEN = {
    "cuda_intrinsic": ("simd_sum(shared[0])", "__shfl_xor_sync(0xffffffffu, shared[0], 1)",
                       "use of undeclared identifier '__shfl_xor_sync'"),
    "cuda_barrier": ("threadgroup_barrier(mem_flags::mem_threadgroup)", "__syncthreads()",
                     "use of undeclared identifier '__syncthreads'"),
    "threadgroup_to_device": ("first(x)", "first(&shared[0])", "no matching function for call to 'first'"),
    "device_pointer_as_threadgroup": ("shared[i % 32u] = first(x);", "threadgroup const float* p = x; shared[0] = p[0];",
                                      "cannot initialize a variable"),
    "constant_to_device": ("first(x)", "first(c)", "no matching function for call to 'first'"),
    "implicit_float_to_bfloat": ("bfloat16_t b = bfloat16_t(v);", "bfloat16_t b = v;", "no viable conversion"),
    "implicit_bfloat_to_half": ("half h = half(v);", "half h = bfloat16_t(v);", "no viable conversion"),
    "implicit_vector_conversion": ("float4 f = float4(half4(h));", "float4 f = half4(h);", "cannot initialize"),
    "threadgroup_memory_40k": ("threadgroup float shared[32];", "threadgroup float shared[10240];",
                               "40960 bytes of threadgroup memory: Metal allows 32768"),
    "double": ("float v = simd_sum(shared[0]);", "double v = simd_sum(shared[0]);", "use of type 'double'"),
    "struct_across_simd": ("float v = simd_sum(shared[0]);", "float v = simd_shuffle(Pair{1, 2}, 0).a;",
                           "no matching function for call to 'simd_shuffle'"),
    "barrier_without_flags": ("threadgroup_barrier(mem_flags::mem_threadgroup)", "threadgroup_barrier(2)",
                              "no matching function for call to 'threadgroup_barrier'"),
    "as_type_sizes": ("as_type<float>(uint(1))", "as_type<float>(ushort(1))", "as_type: the two types must have one size"),
    "unknown_attribute": ("const uint i = thread_position_in_grid.x;",
                          "[[mlxgate_not_metal]] const uint i = thread_position_in_grid.x;", "unknown attribute"),
}
SIGNATURE = ("[[kernel]] void probe(\n  const device float* x [[buffer(0)]],\n  const constant float* c [[buffer(1)]],\n"
             "  device float* out [[buffer(2)]],\n  uint3 thread_position_in_grid [[thread_position_in_grid]]) {")


def _unit(body: str, signature: str = SIGNATURE) -> str:
    return f"using namespace metal;\n{BASE_HEADER}{signature}\n{body}}}\n"


def test_the_base_kernel_is_clean():
    result = check_unit(_unit(BASE_BODY), "base")
    assert result.clean, result.errors
    assert result.threadgroup_bytes == 128 and result.buffers == 3


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_units_fail(case):
    replaced, replacement, expected = BROKEN[case]
    assert replaced in BASE_BODY
    result = check_unit(_unit(BASE_BODY.replace(replaced, replacement, 1)), case)
    assert not result.clean, f"{case}: Metal refuses this unit; the check passed it"
    assert any(expected in e for e in result.errors), result.errors


def test_buffer_slots():
    """Metal's argument table has 31 buffers: [[buffer(30)]] is the last."""
    last = SIGNATURE.replace("[[buffer(2)]]", f"[[buffer({BUFFERS_MAX - 1})]]")
    assert check_unit(_unit(BASE_BODY, last), "buffer 30").clean
    past = SIGNATURE.replace("[[buffer(2)]]", f"[[buffer({BUFFERS_MAX})]]")
    result = check_unit(_unit(BASE_BODY, past), "buffer 31")
    assert any("[[buffer(31)]]: Metal has 31 buffer slots" in e for e in result.errors), result.errors


def test_lowering_keeps_lines_and_types():
    """Lowering rewrites within lines (a diagnostic's line is the source's), blanks Metal's attributes only,
    collects buffer indices, and turns each threadgroup declarator into a reference of the same type."""
    source = ("[[kernel]] void k(device float* o [[buffer(3)]], uint i [[thread_position_in_grid]]) {\n"
              "  threadgroup float a[4][8], b;  // two\n"
              "  threadgroup half* p = nullptr;\n"
              "  [[maybe_unused]] float4 v = float4(1.0f, 2.0f, 3.0f, 4.0f);\n}\n")
    lowered, buffers, problems = lower(source)
    assert lowered.count("\n") == source.count("\n") and buffers == [3] and not problems
    first, second, third, fourth = lowered.split("\n")[:4]
    assert "[[" not in first and "device float* o" in first
    assert ("threadgroup float (&a)[4][8] = *(threadgroup float (*)[4][8])metal_threadgroup_slot<sizeof(float[4][8]), 0>();"
            in second) and "threadgroup float &b = *(threadgroup float *)metal_threadgroup_slot<sizeof(float), 1>();" in second
    assert second.endswith("// two") and third == "  threadgroup half* p = nullptr;"
    assert "[[maybe_unused]]" in fourth and "::metal::vec_make<::metal::float4>(1.0f" in fourth
