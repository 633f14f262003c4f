"""The metric helpers themselves: ULP ordering, spacing, NMSE and KL edge cases, bad shapes."""

from __future__ import annotations

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference import metrics

NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


@given(st.sampled_from(sorted(NP_DTYPES)), st.lists(st.floats(allow_nan=False, width=32), min_size=2, max_size=40))
def test_ordered_bits_is_monotonic_in_the_value(dtype, values):
    with np.errstate(over="ignore"):  # values beyond the narrow type become inf: still ordered
        x = np.array(values, np.float64).astype(NP_DTYPES[dtype])
    order = np.argsort(x.astype(np.float64), kind="stable")
    bits = metrics.ordered_bits(x, dtype)[order]
    assert np.all(np.diff(bits) >= 0)


@given(st.sampled_from(sorted(NP_DTYPES)), st.floats(min_value=-1e4, max_value=1e4, allow_nan=False))
def test_next_representable_value_is_one_ulp_away(dtype, value):
    x = np.array([value]).astype(NP_DTYPES[dtype])
    step = metrics.dtype_spacing(float(x[0]), dtype)
    up = (np.float64(np.abs(x[0])) + step) * (1 if x[0] >= 0 else -1)
    y = np.array([up]).astype(NP_DTYPES[dtype])
    assert metrics.ulp_distance(y, x, dtype)[0] == 1


def test_spacing_matches_numpy_where_numpy_knows_the_type():
    for value in (0.0, 1e-40, 1.0, 3.5, 1e30):
        assert metrics.dtype_spacing(value, "float32") == float(np.spacing(np.float32(value)))
    for value in (0.0, 1e-6, 1.0, 1000.0):
        assert metrics.dtype_spacing(value, "float16") == float(np.spacing(np.float16(value)))
    assert metrics.dtype_spacing(np.finfo(np.float16).max, "float16") == 32.0


def test_nmse_of_zero_reference():
    assert metrics.nmse(np.zeros(4), np.zeros(4)) == 0.0
    assert metrics.nmse(np.ones(4), np.zeros(4)) == float("inf")


def test_kl_is_infinite_where_test_has_no_mass():
    kl = metrics.kl_divergence(np.array([[0.0, 0.0]]), np.array([[0.0, -np.inf]]))
    assert kl[0] == np.inf


@pytest.mark.parametrize("fn", [metrics.nmse, metrics.max_abs_error, metrics.nonfinite_mismatch])
def test_mismatched_shapes_name_the_arguments(fn):
    with pytest.raises(ValueError, match="actual has shape"):
        fn(np.zeros(3), np.zeros(4))


def test_error_ratio_rejects_bad_factor_and_floor():
    x = np.zeros(2)
    with pytest.raises(ValueError, match="factor"):
        metrics.error_ratio(x, x, x, factor=0, floor=0)
    with pytest.raises(ValueError, match="floor"):
        metrics.error_ratio(x, x, x, factor=2, floor=float("nan"))
    with pytest.raises(ValueError, match="baseline has shape"):
        metrics.error_ratio(x, x, np.zeros(3), factor=2, floor=0)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="dtype must be one of"):
        metrics.ulp_distance(np.zeros(1), np.zeros(1), "float64")



@pytest.mark.parametrize("dtype", sorted(NP_DTYPES))
def test_canonical_nan_unifies_nans_and_keeps_every_other_byte(dtype):
    """NaNs of either sign and any payload become one pattern; numbers, infinities and signed zeros keep their
    bytes; an MLX array comes back as a host array of its dtype (bfloat16 included)."""
    t = np.dtype(NP_DTYPES[dtype])
    bits = {2: np.uint16, 4: np.uint32}[t.itemsize]
    x = np.array([1.5, -0.0, 0.0, np.inf, -np.inf, np.nan, -np.nan, np.nan], t)
    x.view(bits)[7] |= 1  # a NaN with another payload
    out = metrics.canonical_nan(x)
    assert out.dtype == t and np.isnan(out[5:].astype(np.float64)).all()
    assert len(set(out.view(bits)[5:].tolist())) == 1
    assert (out.view(bits)[:5] == x.view(bits)[:5]).all()
    from_mlx = metrics.canonical_nan(mx.array(x.astype(np.float32)).astype(getattr(mx, dtype)))
    assert from_mlx.dtype == t and (from_mlx.view(bits) == out.view(bits)).all()
