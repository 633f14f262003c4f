"""The Metal translation unit ``mx.fast.metal_kernel`` compiles, rebuilt in Python, and MLX's own rendering of it.

MLX 0.32.4 (``mlx/backend/common/metal_kernel.cpp``: ``write_signature``, ``write_template``,
``make_template_hash``) generates, for a kernel named ``name`` called with ``template`` arguments::

    <header>                                         ours: METAL_PRELUDE + the kernel's header
    template <typename T, int K, bool B>              the template arguments, in call order (if any)
    [[kernel]] void custom_kernel_<name>_<hash><io>(
      const device float* x [[buffer(0)]],            an input of >= 8 elements
      const constant int* x_shape [[buffer(1)]],      only if the SOURCE names x_shape (and x is not 0-d)
      const constant int64_t* x_strides [[buffer(2)]],
      const constant int& x_ndim [[buffer(3)]],
      const constant float* s [[buffer(4)]],          an input of fewer than 8 elements: the constant space
      const constant float& z [[buffer(5)]],          a 0-d input: a reference, not a pointer
      device float* out [[buffer(6)]],                the outputs
      uint3 thread_position_in_grid [[thread_position_in_grid]]) {   the attributes the SOURCE names
    <source>
    }

    template [[host_name("<kernel>")]] [[kernel]] decltype(<kernel><float, 4, 1>) <kernel><float, 4, 1>;

``<hash>`` is the template values joined by ``_`` (a bool as 1 / 0, a dtype as its type string), ``<io>`` one
``_<type>`` per input (``s`` after a 0-d one, ``c`` after one of fewer than 8 elements) and per output. MLX
compiles ``metal::utils()`` (its ``utils.h`` preamble) followed by this text, with the language version the OS
offers (Metal 3.1 on macOS 14, 3.2 on macOS 15, 4.0 on macOS 26) and math mode ``safe`` unless a kernel asks.

``metal_translation_unit`` is the project's rendering; ``mlx_metal_source`` asks MLX for its own without a
Metal device (the kernel called with ``verbose=True`` inside ``mx.export_function`` tracing, which prints the
generated source). ``impl/kernels/test_metal_source.py`` holds the two equal at every instance the suite
launches, so a change in MLX's generator fails a test that names what changed.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence

import mlx.core as mx

__all__ = ["CONSTANT_SPACE_MAX", "METAL_ATTRIBUTES", "METAL_TYPES", "address_space", "metal_kernel_name",
           "metal_translation_unit", "mlx_metal_source"]

# An input with fewer elements than this is passed in the constant address space (max_constant_array_size).
CONSTANT_SPACE_MAX = 8

# get_type_string (mlx/backend/metal/utils.h): the Metal spelling of each dtype.
METAL_TYPES = {
    mx.bool_: "bool",
    mx.int8: "int8_t",
    mx.int16: "int16_t",
    mx.int32: "int32_t",
    mx.int64: "int64_t",
    mx.uint8: "uint8_t",
    mx.uint16: "uint16_t",
    mx.uint32: "uint32_t",
    mx.uint64: "uint64_t",
    mx.float16: "float16_t",
    mx.bfloat16: "bfloat16_t",
    mx.float32: "float",
    mx.complex64: "complex64_t",
}

# The thread-position attributes MLX adds when the source names them, in MLX's order, with their types.
METAL_ATTRIBUTES = (
    ("dispatch_quadgroups_per_threadgroup", "uint"),
    ("dispatch_simdgroups_per_threadgroup", "uint"),
    ("dispatch_threads_per_threadgroup", "uint3"),
    ("grid_origin", "uint3"),
    ("grid_size", "uint3"),
    ("quadgroup_index_in_threadgroup", "uint"),
    ("quadgroups_per_threadgroup", "uint"),
    ("simdgroup_index_in_threadgroup", "uint"),
    ("simdgroups_per_threadgroup", "uint"),
    ("thread_execution_width", "uint"),
    ("thread_index_in_quadgroup", "uint"),
    ("thread_index_in_simdgroup", "uint"),
    ("thread_index_in_threadgroup", "uint"),
    ("thread_position_in_grid", "uint3"),
    ("thread_position_in_threadgroup", "uint3"),
    ("threadgroup_position_in_grid", "uint3"),
    ("threadgroups_per_grid", "uint3"),
    ("threads_per_grid", "uint3"),
    ("threads_per_simdgroup", "uint"),
    ("threads_per_threadgroup", "uint3"),
)


def _type(dtype: mx.Dtype) -> str:
    if dtype not in METAL_TYPES:
        raise ValueError(f"no Metal type for dtype {dtype}")
    return METAL_TYPES[dtype]


def address_space(ndim: int, size: int) -> str:
    """Where MLX passes an input of ``ndim`` dimensions and ``size`` elements: ``constant`` below
    ``CONSTANT_SPACE_MAX`` elements (a 0-d one too, as a reference), else ``device``."""
    return "constant" if size < CONSTANT_SPACE_MAX else "device"


def _template_values(template: Sequence[tuple[str, object]]) -> list[str]:
    values = []
    for _, value in template:
        if isinstance(value, bool):
            values.append("1" if value else "0")  # std::ostream << bool
        elif isinstance(value, int):
            values.append(str(value))
        else:
            values.append(_type(value))
    return values


def metal_kernel_name(name: str, template: Sequence[tuple[str, object]], inputs: Sequence[tuple[mx.Dtype, int, int]],
                      output_dtypes: Sequence[mx.Dtype]) -> str:
    """The ``[[host_name]]`` MLX gives the kernel ``name`` for ``template`` and inputs ``(dtype, ndim, size)``."""
    kernel = f"custom_kernel_{name}"
    if template:
        kernel += "__" + "_".join(_template_values(template))
    for dtype, ndim, size in inputs:
        kernel += "_" + _type(dtype) + ("s" if ndim == 0 else "c" if size < CONSTANT_SPACE_MAX else "")
    return kernel + "".join("_" + _type(dtype) for dtype in output_dtypes)


def metal_translation_unit(name: str, header: str, source: str, inputs: Sequence[tuple[str, mx.Dtype, int, int]],
                           outputs: Sequence[tuple[str, mx.Dtype]], template: Sequence[tuple[str, object]]) -> str:
    """The source MLX compiles (after its preamble) for ``mx.fast.metal_kernel(name, ..., header, source)`` called
    with inputs ``(name, dtype, ndim, size)``, outputs ``(name, dtype)`` and ``template`` (module docstring)."""
    kernel = metal_kernel_name(name, template, [(d, n, s) for _, d, n, s in inputs], [d for _, d in outputs])
    lines, index = [], 0
    for input_name, dtype, ndim, size in inputs:
        ref = "&" if ndim == 0 else "*"
        lines.append(f"  const {address_space(ndim, size)} {_type(dtype)}{ref} {input_name} [[buffer({index})]]")
        index += 1
        if ndim > 0:  # MLX scans the source (not the header) for these names
            for suffix, kind in (("shape", "int*"), ("strides", "int64_t*"), ("ndim", "int&")):
                if f"{input_name}_{suffix}" in source:
                    lines.append(f"  const constant {kind} {input_name}_{suffix} [[buffer({index})]]")
                    index += 1
    attributes = [f"  {kind} {attr} [[{attr}]]" for attr, kind in METAL_ATTRIBUTES if attr in source]
    signature = "".join(line + ",\n" for line in lines)
    for output_name, dtype in outputs:
        # MLX closes the signature after the output whose BUFFER index reaches len(inputs) + len(outputs) - 1,
        # counting inputs, not buffers: with shape / strides / ndim parameters, several outputs and no thread
        # attribute, it closes early and the unit does not compile (a finding of test_metal_source.py). The
        # rendering is MLX's, that too.
        more = index < len(inputs) + len(outputs) - 1 or attributes
        signature += f"  device {_type(dtype)}* {output_name} [[buffer({index})]]" + (",\n" if more else ") {\n")
        index += 1
    if attributes:
        signature += ",\n".join(attributes) + ") {\n"
    unit = header
    if template:
        kinds = ["bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "typename" for _, v in template]
        unit += "template <" + ", ".join(f"{k} {n}" for k, (n, _) in zip(kinds, template)) + ">\n"
    unit += f"[[kernel]] void {kernel}(\n" + signature + source + "\n}\n"
    if template:
        instance = f"{kernel}<{', '.join(_template_values(template))}>"
        unit += f'\ntemplate [[host_name("{kernel}")]] [[kernel]] decltype({instance}) {instance};\n'
    return unit


_VERBOSE = re.compile(r"Generated source code for `(?P<name>[^`]*)`:\n```\n(?P<source>.*?)\n```\n", re.DOTALL)


def mlx_metal_source(kernel, inputs: Sequence[mx.array], **call) -> str:
    """The unit MLX itself generates when ``kernel`` (an ``mx.fast.metal_kernel``) is called with ``inputs`` and
    ``call`` (template, grid, threadgroup, output shapes and dtypes): the call is traced by ``mx.export_function``
    with ``verbose=True``, which needs no Metal device, and what MLX prints to the process's stdout (C++'s
    ``std::cout``, so file descriptor 1 is redirected for the call) is parsed back."""
    with tempfile.TemporaryDirectory() as tmp:
        captured = os.path.join(tmp, "stdout")

        def traced(*arrays):
            return kernel(inputs=list(arrays), verbose=True, **call)

        saved = os.dup(1)
        try:
            with open(captured, "wb") as sink:
                os.dup2(sink.fileno(), 1)
                mx.export_function(os.path.join(tmp, "unit.mlxfn"), traced, *inputs)
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        with open(captured, encoding="utf-8") as f:
            printed = f.read()
    found = _VERBOSE.findall(printed)
    if len(found) != 1:
        raise RuntimeError(f"expected MLX to print one generated Metal unit, got {len(found)}: {printed[:400]!r}")
    return found[0][1]
