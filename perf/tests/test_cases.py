"""Bad input to the benchmark groups (``perf.cases``) and their shapes (``perf.shapes``) names the argument.

Groups build their inputs lazily, so none of these allocates anything: the shapes are tiny all the same.
"""

from __future__ import annotations

import numpy as np
import pytest

from perf import shapes
from perf.cases import argmax_group, kvq4_group, multi_query_group, paged_group
from perf.shapes import ArgmaxShape, DecodeShape

PAGED = DecodeShape(8, 1, 1, 64, 64)
KVQ4 = DecodeShape(8, 2, 1, 256, 64)
MULTI = DecodeShape(8, 2, 4, 64, 64)
ARGMAX = ArgmaxShape(2, 100)

# Every group constructor with a shape it accepts: the checks common to all of them run on each.
GROUPS = {
    "paged": lambda **kw: paged_group(PAGED, **{"arms": ["graph"], **kw}),
    "paged_q4": lambda **kw: paged_group(PAGED, **{"arms": ["graph"], "bits": 4, **kw}),
    "kvq4": lambda **kw: kvq4_group(KVQ4, **{"arms": ["graph"], **kw}),
    "multi_query": lambda **kw: multi_query_group(MULTI, **{"arms": ["graph"], **kw}),
    "argmax": lambda **kw: argmax_group(ARGMAX, **{"arms": ["graph"], **kw}),
}


def _grids():
    return {name: grid for name, grid in vars(shapes).items()
            if name.startswith(("GPU_", "H200_", "CPU_")) and isinstance(grid, tuple)
            and all(isinstance(s, (DecodeShape, ArgmaxShape)) for s in grid)}


def test_every_grid_shape_still_constructs():
    grids = _grids()
    assert {"GPU_PAGED", "H200_PAGED", "CPU_PAGED", "GPU_ARGMAX", "H200_ARGMAX", "CPU_ARGMAX"} <= set(grids)
    for grid in grids.values():
        for shape in grid:
            assert type(shape)(*shape) == shape and all(type(d) is int for d in shape)


@pytest.mark.parametrize("make", list(GROUPS.values()), ids=list(GROUPS))
def test_good_input_builds_cases(make):
    group = make(seed=np.int64(3), copies=np.int32(2))
    assert any(c.arm == "graph" for c in group.cases)
    assert group.inputs._seed == 3 and type(group.inputs._seed) is int and type(group.inputs._copies) is int


def test_numpy_dims_are_python_ints():
    shape = DecodeShape(np.int64(8), np.int32(1), 1, np.int64(64), 64)
    assert shape == PAGED and all(type(d) is int for d in shape)
    assert type(paged_group(shape, ("graph",)).cases[0].shape[0]) is int  # case shapes go into JSON records
    assert tuple(ArgmaxShape(np.int64(2), np.int16(100))) == (2, 100)


@pytest.mark.parametrize("make, error, name", [
    (lambda: DecodeShape(8, 1, 1, 0, 64), ValueError, "head_dim"),
    (lambda: DecodeShape(8, 1, 1, 64, -16), ValueError, "length"),
    (lambda: DecodeShape(0, 1, 1, 64, 64), ValueError, "hq"),
    (lambda: DecodeShape(8, 0, 1, 64, 64), ValueError, "hkv"),
    (lambda: DecodeShape(8, 1, 0, 64, 64), ValueError, "rows"),
    (lambda: DecodeShape(8, 1, 1, 64.0, 64), TypeError, "head_dim"),
    (lambda: DecodeShape(True, 1, 1, 64, 64), TypeError, "hq"),
    (lambda: DecodeShape(8, 1, 1, "64", 64), TypeError, "head_dim"),
    (lambda: DecodeShape(8, 3, 1, 64, 64), ValueError, "hq must be a multiple of hkv"),
    (lambda: DecodeShape(8, 1, 8, 64, 4), ValueError, "rows must be <= length"),
    (lambda: PAGED._replace(head_dim=0), ValueError, "head_dim"),  # _replace goes through the checks too
    (lambda: DecodeShape._make([8, 1, 1, 64, 0]), ValueError, "length"),
    (lambda: ArgmaxShape(0, 100), ValueError, "batch"),
    (lambda: ArgmaxShape(2, 100.0), TypeError, "vocab"),
    (lambda: ArgmaxShape(2, False), TypeError, "vocab"),
], ids=["head_dim-0", "length-neg", "hq-0", "hkv-0", "rows-0", "head_dim-float", "hq-bool", "head_dim-str",
        "gqa", "rows-past-length", "replace", "make", "batch-0", "vocab-float", "vocab-bool"])
def test_bad_shape_names_the_field(make, error, name):
    with pytest.raises(error, match=name):
        make()


def test_a_plain_tuple_is_not_a_shape():
    with pytest.raises(TypeError, match="shape must be a DecodeShape"):
        paged_group((8, 1, 1, 0, 64), ["graph"])  # a tuple has not been through DecodeShape's checks


@pytest.mark.parametrize("make", list(GROUPS.values()), ids=list(GROUPS))
@pytest.mark.parametrize("arms, error", [
    (iter(["graph"]), TypeError),  # an iterator: the old check used it up and the group had no kernel cases
    ((a for a in ["graph"]), TypeError),
    ({"graph"}, TypeError),
    ("graph", TypeError),
    (["graph", 1], TypeError),
    (["gpu"], ValueError),
    (["mlx"], ValueError),  # the controls' arm, not a kernel's
    (["graph", "graph"], ValueError),
    ([], ValueError),
], ids=["iterator", "generator", "set", "str", "not-str", "unknown", "control", "repeated", "empty"])
def test_bad_arms(make, arms, error):
    with pytest.raises(error, match="arms"):
        make(arms=arms)


@pytest.mark.parametrize("make", list(GROUPS.values()), ids=list(GROUPS))
@pytest.mark.parametrize("kwargs, error, name", [
    ({"seed": -1}, ValueError, "seed"),
    ({"seed": 1.0}, TypeError, "seed"),
    ({"seed": True}, TypeError, "seed"),
    ({"seed": None}, TypeError, "seed"),
    ({"seed": 2**64 - 2, "copies": 3}, ValueError, "seed"),  # the last set's seed, seed + 2, passes MLX's range
    ({"copies": 0}, ValueError, "copies"),
    ({"copies": -2}, ValueError, "copies"),
    ({"copies": 2.0}, TypeError, "copies"),
    ({"copies": True}, TypeError, "copies"),
], ids=["seed-neg", "seed-float", "seed-bool", "seed-none", "seed-overflow", "copies-0", "copies-neg",
        "copies-float", "copies-bool"])
def test_bad_seed_and_copies(make, kwargs, error, name):
    with pytest.raises(error, match=name):
        make(**kwargs)


def test_the_largest_seed_is_accepted():
    assert paged_group(PAGED, ["graph"], seed=2**64 - 2, copies=2).inputs._seed == 2**64 - 2


@pytest.mark.parametrize("kwargs, error, name", [
    ({"bits": 4.0}, TypeError, "bits"),  # once named the benchmark paged_decode_q4.0
    ({"bits": True}, TypeError, "bits"),
    ({"bits": "4"}, TypeError, "bits"),
    ({"bits": 3}, ValueError, "bits"),
    ({"bits": -4}, ValueError, "bits"),
    ({"dense": 1}, TypeError, "dense"),
    ({"dense": "no"}, TypeError, "dense"),
    ({"dense": None}, TypeError, "dense"),
    ({"torch_backends": "flash"}, TypeError, "torch_backends"),  # once split into the letters f, l, a...
    ({"torch_backends": (b for b in ["flash"])}, TypeError, "torch_backends"),
    ({"torch_backends": ["flash", None]}, TypeError, "torch_backends"),
    ({"torch_backends": ["fast"]}, ValueError, "torch_backends"),
    ({"torch_backends": ["flash", "flash"]}, ValueError, "torch_backends"),
    ({"bits": 4, "torch_backends": ["flash"]}, ValueError, "torch_backends"),  # once dropped without a word
], ids=["bits-float", "bits-bool", "bits-str", "bits-3", "bits-neg", "dense-int", "dense-str", "dense-none",
        "torch-str", "torch-generator", "torch-not-str", "torch-unknown", "torch-repeated", "torch-quantized"])
def test_bad_paged_options(kwargs, error, name):
    with pytest.raises(error, match=name):
        paged_group(PAGED, ["graph"], **kwargs)


def test_quantized_pool_needs_whole_groups():
    with pytest.raises(ValueError, match="head_dim"):
        paged_group(DecodeShape(8, 1, 1, 32, 64), ["graph"], bits=8)
    assert paged_group(DecodeShape(8, 1, 1, 32, 64), ["graph"]).cases  # the bf16 pool has no groups


def test_good_paged_options():
    assert [c.benchmark for c in paged_group(PAGED, ["graph"], bits=np.int64(8)).cases][0] == "paged_decode_q8"
    without = {c.kernel for c in paged_group(PAGED, ["graph"], dense=np.bool_(False)).cases}
    assert "sdpa" not in without and "sdpa" in {c.kernel for c in paged_group(PAGED, ["graph"]).cases}
    group = paged_group(PAGED, ("graph",), torch_backends=["flash", "cudnn"])
    assert [c.kernel for c in group.cases if c.arm == "torch"] == ["sdpa_flash", "sdpa_cudnn"]
