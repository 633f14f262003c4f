"""Kernel names: MLX caches a compiled kernel by its name alone, so everything MLX renders into a kernel's code must
be in the name (``impl.kernels.compile.kernel_name``): two launches that compile different code never share one."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from impl.checks import check_scale
from impl.kernels import KernelSpec, Launch
from impl.recent_calls import RecentCalls
from perf.harness import check_count

SPEC = KernelSpec("names_probe", ("a",), ("o",), "o[0] = a[0];")


def launch(spec=SPEC, a=None, dtype=mx.float32) -> Launch:
    a = mx.zeros((4,), mx.float32) if a is None else a
    return Launch(spec, (a,), (), (1, 1, 1), (1, 1, 1), ((4,),) * len(spec.output_names),
                  (dtype,) * len(spec.output_names))


def test_what_changes_the_rendered_code_changes_the_name():
    base = launch()
    assert launch().name == base.name  # the same launch: the same name, one compiled kernel
    assert launch(dtype=mx.float16).name != base.name  # float* o vs __half* o
    assert launch(a=mx.zeros((2, 2), mx.float32)).name != base.name  # input rank: a_shape's length
    swapped = KernelSpec("names_probe", ("a",), ("p", "o"), "o[0] = a[0];")
    ordered = KernelSpec("names_probe", ("a",), ("o", "p"), "o[0] = a[0];")
    assert launch(swapped).name != launch(ordered).name  # the parameter order


def test_numpy_integers_and_huge_scales_are_judged_by_value():
    assert check_count("rounds", np.int64(3), 1) == 3 and type(check_count("rounds", np.int64(3), 1)) is int
    assert len(RecentCalls(np.int64(2))) == 0
    with pytest.raises(TypeError, match="size"):
        RecentCalls(2.0)
    with pytest.raises(ValueError, match="scale must be finite"):
        check_scale(10**400)
    assert check_scale(np.int64(2)) == 2.0 and not math.isnan(check_scale(0.5))
