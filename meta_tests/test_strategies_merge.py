"""The merge gates' partials (``properties.strategies.merge``) hold what their bounds assume."""

from __future__ import annotations

import numpy as np
import pytest

from properties import strategies as sts


@pytest.mark.parametrize("pattern", sts.MERGE_PATTERNS)
def test_partials_hold_what_the_bounds_assume(pattern):
    splits, cells, d = 37, (3, 5), 6
    o, m, l = sts.split_partials(splits, cells, d, pattern, np.random.default_rng(1))
    assert o.shape == (splits, *cells, d) and m.shape == l.shape == (splits, *cells)
    assert o.dtype == m.dtype == l.dtype == np.float32
    live = m > -np.inf
    assert live[0].all(), "every row keeps a live split"
    bound = 256 if pattern == "spread" else 64  # below 256 on the 1/4 grid: float32 differences stay exact
    assert (np.abs(m[live]) < bound).all() and (m[live] * 4 == np.round(m[live] * 4)).all(), "maxima on a 1/4 grid"
    assert ((l[live] >= 1) & (l[live] <= np.float32(np.e ** 4))).all() and (l[~live] == 0).all()
    ratio = o[live] / l[live][:, None]
    assert ((ratio >= 0.5 - 1e-6) & (ratio <= 1.5 + 1e-6)).all() and (o[~live] == 0).all()
    if pattern == "masked":
        assert not live[3].any() and not live[11].any(), "splits 3 mod 8: a whole slice of an 8-way merge hidden"
        assert 0 < (~live).mean() < 0.6
    else:
        assert live.all()
    if pattern == "spread":  # split 0 and the last split off slice 0 hold maxima > 88.7 apart and from the rest
        late = max(s for s in range(splits) if s % 8)
        assert (m[0] == sts.PEAK_LOW).all() and (m[late] == sts.PEAK_HIGH).all() and late % 8
        others = np.delete(m, [0, late], axis=0)
        assert sts.PEAK_HIGH - sts.PEAK_LOW > sts.EXP_OVERFLOW and (sts.PEAK_LOW - others > sts.EXP_OVERFLOW).all()
    if pattern in ("rising", "falling"):
        steps = np.diff(m.reshape(splits, -1), axis=0)
        assert (steps == (0.25 if pattern == "rising" else -0.25)).all()


def test_bad_arguments_are_named():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="pattern must be one of"):
        sts.split_partials(4, (2,), 8, "sorted", rng)
    with pytest.raises(ValueError, match="must be positive"):
        sts.split_partials(0, (2,), 8, "random", rng)


def test_merge_ulps_keeps_the_float32_bound_and_one_ulp_below():
    assert sts.merge_ulps("float32", 30, "why") == (30, "why")
    for dtype in ("bfloat16", "float16"):
        ulps, why = sts.merge_ulps(dtype, 30, "why")
        assert ulps == 1 and "30 float32 ulps" in why and dtype in why
