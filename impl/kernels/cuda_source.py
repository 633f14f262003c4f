"""The CUDA translation unit ``mx.fast.cuda_kernel`` compiles, rebuilt in Python.

MLX 0.32.4 (``mlx/backend/cuda/custom_kernel.cpp``, ``build_kernel``) generates,
for a kernel named ``name`` called with ``template`` arguments::

    <MLX_CUDA_DEFAULT_HEADER>          utils.cuh, cooperative_groups, #define inf
    <header>                           ours: metal_compat.cuh + the kernel's header
    namespace mlx::core::cu {

    namespace cg = cooperative_groups;

    __global__ void custom_kernel_<name><hash>(
        const <T_in> * <input>,                         one per input, in order
        const __grid_constant__ Shape <input>_shape,    only if the SOURCE mentions it (and ndim > 0)
        const __grid_constant__ Strides <input>_strides,
        const __grid_constant__ int <input>_ndim,
        <T_out> * <output>, ...) {
      constexpr int K = 4;                              int template arguments
      constexpr bool B = true;                          bool template arguments
      using T = __nv_bfloat16;                          dtype template arguments

    <source>
    }

    } // namespace mlx::core::cu

``<hash>`` is ``_<int>``, ``_t``/``_f`` or ``_<type string>`` per template
argument. C types: float, __half, __nv_bfloat16, uint32_t, int32_t, ...
MLX compiles this with NVRTC for the device's ``sm_XY`` and no other flags.

``impl/kernels/test_cuda_compile.py`` compiles these units with ``nvcc
-arch=sm_90 -c`` against a minimal stand-in for ``utils.cuh`` (it defines what
the generated signature needs: ``Shape``/``Strides`` and the CUDA includes).
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

__all__ = ["CUDA_TYPES", "MLX_CUDA_DEFAULT_HEADER", "cuda_translation_unit", "template_hash"]

MLX_CUDA_DEFAULT_HEADER = """
#include "mlx/backend/cuda/device/utils.cuh"

#include <cooperative_groups.h>

#define inf cuda::std::numeric_limits<float>::infinity()

"""

# dtype_to_cuda_type (mlx/backend/cuda/utils.cpp) and get_type_string (the hash).
CUDA_TYPES = {
    mx.bool_: ("bool", "bool"),
    mx.int8: ("int8_t", "int8_t"),
    mx.int16: ("int16_t", "int16_t"),
    mx.int32: ("int32_t", "int32_t"),
    mx.int64: ("int64_t", "int64_t"),
    mx.uint8: ("uint8_t", "uint8_t"),
    mx.uint16: ("uint16_t", "uint16_t"),
    mx.uint32: ("uint32_t", "uint32_t"),
    mx.uint64: ("uint64_t", "uint64_t"),
    mx.float16: ("__half", "float16_t"),
    mx.bfloat16: ("__nv_bfloat16", "bfloat16_t"),
    mx.float32: ("float", "float"),
}


def _types(dtype: mx.Dtype) -> tuple[str, str]:
    if dtype not in CUDA_TYPES:
        raise ValueError(f"no CUDA type for dtype {dtype}")
    return CUDA_TYPES[dtype]


def template_hash(template: Sequence[tuple[str, object]]) -> str:
    """MLX's ``template_arguments_hash``: the suffix of the generated kernel name."""
    parts = []
    for _, value in template:
        if isinstance(value, bool):
            parts.append("_t" if value else "_f")
        elif isinstance(value, int):
            parts.append(f"_{value}")
        else:
            parts.append("_" + _types(value)[1])
    return "".join(parts)


def cuda_translation_unit(name: str, header: str, source: str, inputs: Sequence[tuple[str, mx.Dtype, int]],
                          outputs: Sequence[tuple[str, mx.Dtype]], template: Sequence[tuple[str, object]]) -> str:
    """The source MLX compiles for ``mx.fast.cuda_kernel(name, ..., header, source)`` called with
    inputs ``(name, dtype, ndim)``, outputs ``(name, dtype)`` and ``template`` (module docstring)."""
    params = []
    for input_name, dtype, ndim in inputs:
        params.append(f"    const {_types(dtype)[0]}* {input_name}")
        if ndim > 0:  # MLX scans the source (not the header) for these names
            if f"{input_name}_shape" in source:
                params.append(f"    const __grid_constant__ Shape {input_name}_shape")
            if f"{input_name}_strides" in source:
                params.append(f"    const __grid_constant__ Strides {input_name}_strides")
            if f"{input_name}_ndim" in source:
                params.append(f"    const __grid_constant__ int {input_name}_ndim")
    params += [f"    {_types(dtype)[0]}* {output_name}" for output_name, dtype in outputs]
    constants = []
    for arg, value in template:
        if isinstance(value, bool):
            constants.append(f"  constexpr bool {arg} = {'true' if value else 'false'};")
        elif isinstance(value, int):
            constants.append(f"  constexpr int {arg} = {value};")
        else:
            constants.append(f"  using {arg} = {_types(value)[0]};")
    function = f"custom_kernel_{name}{template_hash(template)}"
    return (MLX_CUDA_DEFAULT_HEADER + header
            + "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
            + f"__global__ void {function}(\n" + ",\n".join(params) + ") {\n"
            + ("\n".join(constants) + "\n\n" if constants else "")
            + source + "\n}\n\n} // namespace mlx::core::cu\n")
