"""The compile layer: one kernel body, compiled for Metal or for CUDA.

* ``compile``: ``KernelSpec`` (a body written once, in the Metal subset of
  ``mx.fast.metal_kernel``), ``Launch`` (one call of it) and ``Launch.run(arm)``
  which compiles with ``mx.fast.metal_kernel`` or ``mx.fast.cuda_kernel``.
* ``metal_compat.cuh``: the CUDA prelude that defines the Metal names the bodies
  use (``uint``, thread positions, ``simd_sum``, ``simd_shuffle_down``,
  ``threadgroup``, ``threadgroup_barrier``, ``INFINITY``, ``metal::``).
* ``cuda_source``: the translation unit MLX generates for a CUDA kernel, which
  ``test_cuda_compile.py`` compiles with nvcc so CI catches a body that breaks CUDA.

The bodies live with their kernel, as files beside its module (``impl/normalized_argmax.metal``) or
in its package (``impl/paged_attention/partial.metal``), read by ``kernel_text`` (``compile``'s
docstring has the layout); so does the graph arm (``impl/normalized_argmax.py``,
``impl/paged_attention/graph.py``): it needs no compiler.
"""

from .compile import (COMPILED_ARMS, CUDA_PRELUDE, MAX_DYNAMIC_SHARED_BYTES, METAL_PRELUDE, SIMDGROUP_HEADER,
                      TRACES_KEPT, KernelSpec, Launch, TemplateArg, compiled_kernel, full_header, input_signature, kernel_text)
from .cuda_source import MLX_CUDA_DEFAULT_HEADER, cuda_translation_unit

__all__ = [
    "COMPILED_ARMS",
    "CUDA_PRELUDE",
    "MAX_DYNAMIC_SHARED_BYTES",
    "METAL_PRELUDE",
    "MLX_CUDA_DEFAULT_HEADER",
    "SIMDGROUP_HEADER",
    "KernelSpec",
    "Launch",
    "TRACES_KEPT",
    "TemplateArg",
    "compiled_kernel",
    "cuda_translation_unit",
    "full_header",
    "input_signature",
    "kernel_text",
]
