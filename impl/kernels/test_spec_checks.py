"""Bad fields of a ``KernelSpec`` or a ``Launch``: refused where they are built, with TypeError (wrong kind) or
ValueError (wrong value) naming the field. Before these checks a str of names was read letter by letter, a list made
the spec unhashable only when ``compiled_kernel`` cached it, and a float grid or a NumPy template argument failed only
inside MLX's call (``mx.fast.*_kernel``), on a machine with the arm."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest

from impl.kernels import KernelSpec, Launch

BODY = "y[0] = x[0];"
SPEC = KernelSpec("probe", ("x",), ("y",), BODY)
X = mx.zeros((4,), mx.float32)
LAUNCH = Launch(SPEC, (X,), (("N", 4), ("FLAG", True), ("T", mx.float32)), (4, 1, 1), (4, 1, 1), ((4,),),
                (mx.float32,))

BAD_SPECS = [
    ("name not a str", dict(name=None), TypeError, "^name must"),
    ("input_names a str", dict(input_names="x"), TypeError, "^input_names must"),
    ("input_names a list", dict(input_names=["x"]), TypeError, "^input_names must"),
    ("input_names holding an int", dict(input_names=("x", 1)), TypeError, "^input_names must"),
    ("output_names a str", dict(output_names="yz"), TypeError, "^output_names must"),
    ("output_names a list", dict(output_names=["y"]), TypeError, "^output_names must"),
    ("arms a str", dict(arms="cuda"), TypeError, "^arms must"),
    ("arms a list", dict(arms=["cuda"]), TypeError, "^arms must"),
    ("source None", dict(source=None), TypeError, "^source must"),
    ("source bytes", dict(source=BODY.encode()), TypeError, "^source must"),
    ("source blank", dict(source=" \n"), ValueError, "^source must"),
    ("header None", dict(header=None), TypeError, "^header must"),
    ("ensure_row_contiguous an int", dict(ensure_row_contiguous=1), TypeError, "^ensure_row_contiguous must"),
    ("ensure_row_contiguous a str", dict(ensure_row_contiguous="False"), TypeError, "^ensure_row_contiguous must"),
]


@pytest.mark.parametrize("fields, error, name", [c[1:] for c in BAD_SPECS], ids=[c[0] for c in BAD_SPECS])
def test_bad_spec_fields_are_refused_by_name(fields, error, name):
    with pytest.raises(error, match=name):
        dataclasses.replace(SPEC, **fields)


def test_a_good_spec_and_its_defaults_pass():
    spec = KernelSpec("probe", ("x", "w"), ("y",), BODY, header="", ensure_row_contiguous=False, arms=("cuda",))
    assert spec.input_names == ("x", "w") and spec.arms == ("cuda",)
    assert KernelSpec("probe", (), ("y",), "y[0] = 1;").input_names == ()  # a kernel may take no input
    hash(spec)  # compiled_kernel caches by spec


BAD_LAUNCHES = [
    ("spec not a KernelSpec", dict(spec="probe"), TypeError, "^spec must"),
    ("inputs an array", dict(inputs=X), TypeError, r"^probe: inputs must"),
    ("inputs holding a NumPy array", dict(inputs=(np.zeros(4, np.float32),)), TypeError, r"^probe: inputs\[0\] must"),
    ("template a dict", dict(template={"N": 4}), TypeError, r"^probe: template must"),
    ("template entry not a pair", dict(template=(("N", 4, 5),)), TypeError, r"^probe: template\[0\] must"),
    ("template name not an identifier", dict(template=(("4N", 4),)), ValueError, r"^probe: template\[0\]'s name must"),
    ("template value a float", dict(template=(("N", 4.0),)), TypeError, r"^probe: template argument N must"),
    ("template value a NumPy int", dict(template=(("N", np.int64(4)),)), TypeError,
     r"^probe: template argument N must"),  # MLX refuses it, but only when the kernel is called
    ("template value a str", dict(template=(("T", "float32"),)), TypeError, r"^probe: template argument T must"),
    ("template names repeated", dict(template=(("N", 4), ("N", 5))), ValueError, r"^probe: template names must"),
    ("grid an int", dict(grid=4), TypeError, r"^probe: grid must"),
    ("grid of 2", dict(grid=(4, 1)), ValueError, r"^probe: grid must"),
    ("grid float", dict(grid=(4.0, 1, 1)), TypeError, r"^probe: grid\.x must"),
    ("grid 0", dict(grid=(4, 0, 1)), ValueError, r"^probe: grid\.y must"),
    ("threadgroup negative", dict(threadgroup=(4, 1, -1)), ValueError, r"^probe: threadgroup\.z must"),
    ("threadgroup bool", dict(threadgroup=(True, 1, 1)), TypeError, r"^probe: threadgroup\.x must"),
    ("output_shapes of ints", dict(output_shapes=(4,)), TypeError, r"^probe: output_shapes\[0\] must"),
    ("output_shapes negative", dict(output_shapes=((-4,),)), ValueError, r"^probe: output_shapes\[0\]\[0\] must"),
    ("output_shapes float", dict(output_shapes=((4.0,),)), TypeError, r"^probe: output_shapes\[0\]\[0\] must"),
    ("output_dtypes a NumPy dtype", dict(output_dtypes=(np.float32,)), TypeError, r"^probe: output_dtypes\[0\] must"),
    ("output_dtypes a str", dict(output_dtypes=("float32",)), TypeError, r"^probe: output_dtypes\[0\] must"),
    ("output_dtypes a dtype", dict(output_dtypes=mx.float32), TypeError, r"^probe: output_dtypes must"),
]


@pytest.mark.parametrize("fields, error, name", [c[1:] for c in BAD_LAUNCHES], ids=[c[0] for c in BAD_LAUNCHES])
def test_bad_launch_fields_are_refused_by_name(fields, error, name):
    with pytest.raises(error, match=name):
        dataclasses.replace(LAUNCH, **fields)


def test_good_launches_pass_with_their_kinds_of_values():
    """What MLX takes passes: lists for tuples, NumPy integers for extents and shapes, empty outputs and templates."""
    launch = dataclasses.replace(LAUNCH, inputs=[X], template=[("N", 4)], grid=[np.int64(4), 1, 1],
                                 output_shapes=[[np.int32(0)]])
    assert launch.name == dataclasses.replace(LAUNCH, template=()).name  # the template is not in the name
    assert LAUNCH.variant == ("out:mlx.core.float32", "ndim:1")
