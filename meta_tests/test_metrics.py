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



# --- rounding before comparing -------------------------------------------------------


def test_ulp_distance_rounds_a_float64_reference_once():
    # 1 + 2**-8 + 2**-30 is nearer 1 + 2**-7 than 1 in bfloat16; a cast through float32 (ml_dtypes < 0.7) gives 1.
    ref = np.array([1 + 2**-8 + 2**-30])
    assert metrics.ulp_distance(np.array([1 + 2**-7], ml_dtypes.bfloat16), ref, "bfloat16").tolist() == [0.0]
    assert metrics.ulp_distance(np.array([1.0], ml_dtypes.bfloat16), ref, "bfloat16").tolist() == [1.0]
    assert metrics.round_once(ref, "bfloat16").astype(np.float64).tolist() == [1 + 2**-7]


def test_non_finite_classes_are_read_after_rounding():
    # 1e6 is +inf in float16: it equals an infinite reference and is infinitely far from the largest finite one.
    actual = np.array([1e6], np.float32)
    assert metrics.ulp_distance(actual, np.array([np.inf]), "float16").tolist() == [0.0]
    assert metrics.ulp_distance(actual, np.array([65504.0]), "float16").tolist() == [np.inf]


@pytest.mark.parametrize("dtype", sorted(NP_DTYPES))
def test_ulp_distance_of_scalars_is_a_scalar(dtype):
    one = NP_DTYPES[dtype](1)
    assert metrics.ulp_distance(one, one, dtype).shape == ()
    assert metrics.max_ulp(one, one, dtype)[0] == 0.0
    step = metrics.dtype_spacing(1.0, dtype)
    assert metrics.ulp_distance(np.float64(1 + step), np.float64(1), dtype) == 1.0


@pytest.mark.parametrize("ref", [[np.nan, 1.0, 2.0], [np.inf, 1.0, 2.0], [-np.inf] * 3], ids=["nan", "inf", "no_mass"])
def test_kl_of_a_reference_that_is_no_distribution_is_nan(ref):
    got = metrics.kl_divergence(np.array([ref]), np.array([[5.0, -3.0, 0.0]]))
    assert np.isnan(got).all()


def test_kl_keeps_masked_vocabulary_entries():
    # a -inf reference logit is a token with no mass: a distribution still, and its KL a number
    ref = np.array([[-np.inf, 0.0, 1.0]])
    assert metrics.kl_divergence(ref, ref)[0] == 0.0
    p = np.array([1.0, np.e]) / (1.0 + np.e)  # softmax over the two live entries
    q = np.exp(np.array([0.0, 1.0])) / (np.exp(-5.0) + 1.0 + np.e)
    expected = float(np.sum(p * np.log(p / q)))
    assert metrics.kl_divergence(ref, np.array([[-5.0, 0.0, 1.0]]))[0] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("dtype, name", [
    (np.float16, "float16"), (ml_dtypes.bfloat16, "bfloat16"), (np.dtype(np.float32), "float32"),
    (mx.bfloat16, "bfloat16"), ("float16", "float16"),
])
def test_dtype_name_reads_every_dtype_spelling(dtype, name):
    assert metrics.dtype_name(dtype) == name


def test_a_torch_bfloat16_tensor_keeps_its_bits():
    torch = pytest.importorskip("torch", reason="torch is a dependency of the reference oracles")
    x = torch.tensor([1.0, -2.5, 3.140625], dtype=torch.bfloat16)
    got = metrics.to_numpy(x)
    assert got.dtype == ml_dtypes.bfloat16 and got.astype(np.float64).tolist() == [1.0, -2.5, 3.140625]


def test_noise_floor_of_a_reference_beyond_the_dtype_is_the_last_finite_spacing():
    assert metrics.rounding_noise_floor(np.array([70000.0]), "float16") == 32.0  # the gap below 65504


@pytest.mark.parametrize("special", [np.inf, -np.inf, np.nan], ids=str)
def test_noise_floor_is_read_at_the_finite_values_only(special):
    """A reference's inf (a masked row, an overflow both sides agree on) sets no floor: the peak is its largest
    finite value. Counting inf would make the floor the spacing at float32's max (2**104), so one inf let every
    finite error through the error-ratio gate."""
    assert metrics.rounding_noise_floor(np.array([special, 3.0, -1.0]), "float32") == 2.0 ** -22
    assert metrics.error_ratio(np.array([special, 5.0]), np.array([special, 1.0]), np.array([special, 1.0]),
                               factor=2.0, floor=metrics.rounding_noise_floor(np.array([special, 1.0]),
                                                                              "float32")).passed is False


NONFINITE = [np.nan, np.inf, -np.inf, 1.0]


@pytest.mark.parametrize("actual", NONFINITE, ids=str)
@pytest.mark.parametrize("expected", NONFINITE, ids=str)
def test_nonfinite_mismatch_tells_each_class_apart(actual, expected):
    """NaN, +inf, -inf and a finite value are four classes in both arguments: any two different ones mismatch (a
    NaN where +inf is expected is a wrong kernel, not a match), the same two do not."""
    a, e = np.array([0.5, actual]), np.array([0.5, expected])
    found = metrics.nonfinite_mismatch(a, e)
    same = (np.isnan(actual) and np.isnan(expected)) or actual == expected
    if same:
        assert found is None
    else:
        assert found is not None and found.index == (1,)


@pytest.mark.parametrize("axis", [2, -3, 5])
def test_kl_refuses_an_axis_past_the_logits_naming_the_range(axis):
    """An axis outside [-ndim, ndim - 1] is refused with that range in the message (2-axis logits: [-2, 1])."""
    logits = np.zeros((3, 4))
    with pytest.raises(ValueError, match=rf"axis must lie in \[-2, 1\] for 2-axis logits, got {axis}"):
        metrics.kl_divergence(logits, logits, axis=axis)
    assert metrics.kl_divergence(logits, logits, axis=-2).shape == (4,)  # -ndim is an axis
