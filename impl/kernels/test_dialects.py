"""One body, two dialects: every macro a kernel takes from the CUDA prelude has a Metal spelling too.

The CUDA preludes (``metal_compat.cuh``, ``metal_simdgroup.cuh``) define two kinds of names: Metal's own
(builtins, address spaces, ``INFINITY``: the Metal compiler knows them) and mlxgate's dialect macros, which
spell one construct per compiler (``UNROLL_FULL``, ``UNROLL_BY_8``, ``DEVICE_MEM``, ...). A body that uses a
dialect macro compiles on CUDA through the prelude; on Metal only if ``METAL_PRELUDE`` or the kernel's own
header defines it. No CI machine compiles Metal, so this test is where a missing Metal spelling shows.
"""

from __future__ import annotations

import re

import pytest

from impl import kvq4_decode, multi_query, normalized_argmax, paged_attention
from impl.kernels import CUDA_PRELUDE, METAL_PRELUDE, KernelSpec

# Names the CUDA prelude defines that Metal has built in (metal_stdlib, the kernel's attributes).
METAL_BUILTINS = {
    "INFINITY", "METAL_FUNC", "threadgroup", "threadgroup_barrier", "simdgroup_barrier",
    "simdgroup_index_in_threadgroup", "thread_index_in_simdgroup", "thread_index_in_threadgroup",
    "thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threadgroups_per_grid", "threads_per_simdgroup", "threads_per_threadgroup", "ulong2",
}
DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)


def defined(text: str) -> set[str]:
    return set(DEFINE.findall(text))


def dialect_macros() -> set[str]:
    """The CUDA prelude's own spellings: its #defines less Metal's built-in names and its include guards."""
    return {n for n in defined(CUDA_PRELUDE) - METAL_BUILTINS if not n.startswith("MLXGATE_")}


def kernel_specs() -> list[KernelSpec]:
    modules = (paged_attention, kvq4_decode, multi_query, normalized_argmax)
    specs = {id(v): v for m in modules for v in vars(m).values() if isinstance(v, KernelSpec)}
    return sorted(specs.values(), key=lambda s: s.name)


def test_the_dialect_macros_are_found():
    """The helpers see the macros this test is about (a renamed prelude file would leave the set empty)."""
    assert {"UNROLL_FULL", "UNROLL_BY_8", "DEVICE_MEM", "THREADGROUP_MEM"} <= dialect_macros()
    assert len(kernel_specs()) >= 8
    assert defined("#define A 1\n  # define B(x) x\n// #define C") == {"A", "B"}


@pytest.mark.parametrize("spec", kernel_specs(), ids=lambda s: s.name)
def test_every_dialect_macro_has_a_metal_spelling(spec):
    used = {n for n in dialect_macros() if re.search(rf"\b{n}\b", spec.source + spec.header)}
    missing = used - defined(METAL_PRELUDE + spec.header)
    assert not missing, (f"{spec.name} uses {sorted(missing)}, which only the CUDA prelude defines: add the Metal "
                         "spelling to METAL_PRELUDE (impl/kernels/compile.py) or to the kernel's header")


def test_a_missing_metal_spelling_is_caught():
    """The check above fails for a body that uses a CUDA-only macro (a spec built for the purpose)."""
    spec = KernelSpec("probe", ("x",), ("y",), "UNROLL_BY_8\nfor (uint i = 0; i < 8; ++i) y[i] = x[i];")
    assert test_every_dialect_macro_has_a_metal_spelling(spec) is None
    bad = KernelSpec("probe", ("x",), ("y",), "UNROLL_FULL\nfor (uint i = 0; i < 8; ++i) y[i] = x[i];")
    with pytest.raises(AssertionError, match="UNROLL_FULL"):
        test_every_dialect_macro_has_a_metal_spelling(bad)
