"""The planting helpers of ``properties.strategies.attention``: what the parity cases that use them rely on."""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
import numpy as np
import pytest

from properties.strategies import numpy_dtype, plant_rounding_pair
from reference.attention import UNIT_ROUNDOFF


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_rounding_pair_ties_under_the_rounded_product_and_splits_under_the_exact_one(dtype):
    """The two planted scores are equal (to the keys' rounding) against q * scale rounded to T, and lie about
    2 u * score apart against the exact product: the rounding alone orders them."""
    rng = np.random.default_rng(0)
    t = numpy_dtype(dtype)
    q0, k0 = rng.standard_normal((1, 2, 1, 64)).astype(t), rng.standard_normal((1, 1, 50, 64)).astype(t)
    q, k = plant_rounding_pair(q0, k0, (5, 40), score=100.0, scale=0.1, token_axis=2, dtype=dtype)
    assert np.array_equal(q[..., 2:], q0[..., 2:]) and np.array_equal(np.delete(k, [5, 40], axis=2),
                                                                      np.delete(k0, [5, 40], axis=2))
    s = float(np.float32(0.1).astype(t))
    exact = q.astype(np.float64) * s
    rounded = exact.astype(t).astype(np.float64)
    keys = k.astype(np.float64)[0, 0, [5, 40]]  # [2, D]
    tied = rounded[0, 0, 0] @ keys.T
    split = exact[0, 0, 0] @ keys.T
    u = UNIT_ROUNDOFF[dtype]
    assert np.allclose(tied, 100.0, rtol=2 * u) and abs(tied[0] - tied[1]) < abs(split[0] - split[1])
    assert abs(split[0] - split[1]) > 100.0 * u, "the exact products must split the pair by more than u * score"


@pytest.mark.parametrize("scale", [0.125, 1.0, 0.0, -0.1])
def test_a_rounding_pair_refuses_a_scale_whose_products_are_exact(scale):
    q, k = np.ones((1, 1, 1, 8), np.float32), np.ones((1, 1, 4, 8), np.float32)
    with pytest.raises(ValueError, match="scale"):
        plant_rounding_pair(q, k, (0, 1), score=10.0, scale=scale, token_axis=2, dtype="bfloat16")
