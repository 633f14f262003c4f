"""The Metal unit of every instance the suite launches, taken from MLX itself and held equal to ours.

``Launch.mlx_metal_source()`` asks the installed MLX for the source it would hand Metal's compiler (the kernel
called with ``verbose=True`` inside ``mx.export_function`` tracing: no Metal device needed);
``Launch.metal_source()`` is the project's rendering (``impl.kernels.metal_source``), which the front-end check
(``test_metal_frontend.py``) type-checks. Equal at every instance of ``impl.kernels.launches.metal_launches()``
(template instances the tests and public calls launch, inputs below 8 elements, each kernel's largest
threadgroup-memory instance), and on synthetic kernels covering each rule of MLX's generator, so a change in
MLX's generator fails here, saying which instance and what changed.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil

import mlx.core as mx
import pytest

import impl
from impl.kernels import KernelSpec, Launch
from impl.kernels.launches import metal_launches, small_input_launches
from impl.kernels.metal_frontend import launch_label
from impl.kernels.metal_source import CONSTANT_SPACE_MAX, metal_kernel_name


def _difference(ours: str, mlx: str) -> str:
    return "\n".join(difflib.unified_diff(ours.splitlines(), mlx.splitlines(), "ours", "mlx", lineterm="", n=1))


@pytest.fixture(scope="module")
def launches() -> list[Launch]:
    return metal_launches()


def test_every_metal_unit_is_the_one_mlx_generates(launches):
    differing = []
    for launch in launches:
        ours, theirs = launch.metal_source(), launch.mlx_metal_source()
        if ours != theirs:
            differing.append(f"{launch_label(launch)}:\n{_difference(ours, theirs)[:1500]}")
    assert launches and not differing, f"{len(differing)} of {len(launches)} Metal units differ from MLX's:\n" + \
        "\n".join(differing[:5])


def test_kernel_names_are_mlxs(launches):
    """``Launch.metal_function`` is the ``[[host_name]]`` MLX gives the kernel (the library's entry point)."""
    for launch in launches[::7]:
        assert f'[[host_name("{launch.metal_function}")]]' in launch.mlx_metal_source() or (
            not launch.template and f"void {launch.metal_function}(" in launch.mlx_metal_source()), launch_label(launch)


# The generator's rules, one synthetic kernel each: (inputs as (name, shape, dtype), source, template).
GENERATOR_CASES = {
    "device_constant_and_0d": ((("big", (8,), mx.float32), ("small", (7,), mx.float16), ("scalar", (), mx.int32)),
                               "out[0] = big[0] + float(small[0]) + float(scalar);", ()),
    "shape_strides_ndim": ((("x", (2, 4), mx.bfloat16), ("y", (3,), mx.uint32)),
                           "out[0] = float(x[0]) + x_shape[1] + x_strides[0] + x_ndim + y_ndim;", ()),
    "0d_names_no_shape": ((("z", (), mx.float32),), "out[0] = z + z_shape[0];", ()),
    "templates": ((("x", (16,), mx.float32),), "out[0] = T(x[0]) * K + (B ? 1 : 0);",
                  (("T", mx.bfloat16), ("K", 3), ("B", True), ("F", False), ("U", mx.uint8))),
    "attributes": ((("x", (9,), mx.float32),),
                   "uint i = thread_position_in_grid.x + thread_index_in_simdgroup + simdgroup_index_in_threadgroup"
                   " + threads_per_threadgroup.x + threadgroup_position_in_grid.y + thread_index_in_threadgroup"
                   " + threads_per_simdgroup + grid_size.x; out[i] = x[i];", ()),
}


@pytest.mark.parametrize("case", sorted(GENERATOR_CASES))
def test_generator_rules_match_mlx(case):
    """An input below ``CONSTANT_SPACE_MAX`` elements is ``const constant T*``, a 0-d one ``const constant T&``
    (and gets no shape parameters even when the source names them); ``*_shape`` / ``*_strides`` / ``*_ndim``
    only when the source names them; template kinds and values (a bool as 1 / 0) in call order; the thread
    attributes the source names, in MLX's order; two outputs."""
    inputs, source, template = GENERATOR_CASES[case]
    spec = KernelSpec(f"generator_{case}", tuple(n for n, _, _ in inputs), ("out", "out2"), source)
    arrays = tuple(mx.zeros(shape, dtype) for _, shape, dtype in inputs)
    launch = Launch(spec, arrays, template, (32, 1, 1), (32, 1, 1), ((4,), (2, 2)), (mx.float32, mx.float16))
    ours, theirs = launch.metal_source(), launch.mlx_metal_source()
    assert ours == theirs, _difference(ours, theirs)
    for (name, shape, _), a in zip(inputs, arrays):
        space = "constant" if a.size < CONSTANT_SPACE_MAX else "device"
        assert f"const {space} " in ours.split(f" {name} [[buffer")[0].rsplit("\n", 1)[-1], name
        if not shape:
            assert f"& {name} [[buffer(" in ours and f"{name}_shape" not in ours.split(") {")[0]


def test_kernel_name_rule():
    """MLX's name: ``custom_kernel_<name>``, ``_`` + the template values joined by ``_``, then ``_<type>`` per input
    (``s`` after a 0-d one, ``c`` after one below 8 elements) and per output."""
    name = metal_kernel_name("k", (("T", mx.float16), ("N", 4), ("B", False)),
                             [(mx.float32, 1, 8), (mx.bfloat16, 1, 7), (mx.int32, 0, 1)], [mx.float32])
    assert name == "custom_kernel_k__float16_t_4_0_float_bfloat16_tc_int32_ts_float"


def _metal_specs() -> dict[str, KernelSpec]:
    """Every KernelSpec an impl module defines whose arms include metal, by name."""
    specs = {}
    for info in pkgutil.walk_packages(impl.__path__, "impl."):
        if info.name.split(".")[-1].startswith("test_"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, KernelSpec) and "metal" in value.arms:
                specs[value.name] = value
    return specs


def test_every_metal_spec_has_instances(launches):
    """The instance list covers every spec Metal can compile, and each at an input below 8 elements where its
    public call accepts one (``small_input_launches``: argmax's logits, the paged pool and its merge)."""
    launched = {launch.spec.name for launch in launches}
    missing = set(_metal_specs()) - launched
    assert not missing, f"Metal specs no instance renders: {sorted(missing)}"
    small = {launch.spec.name for launch in small_input_launches()
             if any(a.size < CONSTANT_SPACE_MAX for a in launch.inputs) and "metal" in launch.spec.arms}
    assert {"normalized_argmax_row", "paged_attention_partial", "paged_attention_affine_partial",
            "paged_attention_merge"} <= small, small
