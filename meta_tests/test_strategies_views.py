"""The decode strategies' views and score levels (``properties.strategies.decode`` / ``.attention``): what the
parity cases that take them rely on."""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (registers bfloat16 with NumPy)
import mlx.core as mx
import numpy as np
import pytest

from properties.strategies import (ALIGNMENT_FAULTS, RISE_LOW, SCORE_LEVELS, VECTOR_START, misaligned_layout,
                                   misaligned_view, numpy_dtype, plant_score_peaks, score_level_peaks,
                                   segment_score_maxima)


@pytest.mark.parametrize("n", [9, 10])  # an odd N: the capacity rounds up to even
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("fault", ALIGNMENT_FAULTS)
def test_a_misaligned_view_holds_the_plane_off_the_grid_in_one_way(fault, dtype, n):
    x = np.random.default_rng(0).standard_normal((1, 3, n, 16)).astype(numpy_dtype(dtype))
    view = misaligned_view(x, dtype, fault)
    assert view.shape == x.shape and np.array_equal(np.array(view.astype(mx.float32)), x.astype(np.float32))
    head, row, start = misaligned_layout(n, 16, fault)
    size = np.dtype(numpy_dtype(dtype)).itemsize
    off = [head * size % 16, row * size % 16, start * size % 16]  # bytes off the 16-byte grid, each way
    faulty = ALIGNMENT_FAULTS.index(fault)
    assert all(b == 0 for i, b in enumerate(off) if i != faulty), off  # aligned in every other way
    assert off[faulty] == (0 if size == 4 else 8), off  # 4 elements: 8 bytes off in a 16-bit dtype
    assert head % 4 == 0 and row % 4 == 0 and start % 4 == 0  # inside the multi-query contract


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_a_vector_start_view_starts_off_the_4_element_grid_alone(dtype):
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 16)).astype(numpy_dtype(dtype))
    view = misaligned_view(x, dtype, VECTOR_START)
    assert np.array_equal(np.array(view.astype(mx.float32)), x.astype(np.float32))
    head, row, start = misaligned_layout(9, 16, VECTOR_START)
    size = np.dtype(numpy_dtype(dtype)).itemsize
    assert head * size % 16 == 0 and row * size % 16 == 0  # the strides on the 16-byte grid
    assert start == 1 and start * size % (4 * size) != 0  # the start alone off a 4-vector's bytes


@pytest.mark.parametrize("fault, w", [("bent", 16), ("start", 12)])
def test_a_misaligned_view_names_a_bad_argument(fault, w):
    with pytest.raises(ValueError, match="fault" if fault == "bent" else "w "):
        misaligned_view(np.zeros((1, 1, 2, w), np.float32), "float32", fault)


@pytest.mark.parametrize("level", SCORE_LEVELS)
def test_score_levels_set_every_token(level):
    peaks = score_level_peaks(40, level)
    assert [t for t, _ in peaks] == list(range(40))
    scores = np.array([s for _, s in peaks])
    if level == "rise":  # the last token alone at exactly 0, every other one at RISE_LOW
        assert scores[-1] == 0.0 and np.all(scores[:-1] == RISE_LOW)
    elif level == "zero":
        assert np.all(scores == 0.0)
    else:
        assert np.all(scores <= -200.0)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_the_rise_level_lifts_the_max_to_exactly_zero_at_the_last_token(dtype):
    """Planted: every score RISE_LOW to the dtype's rounding of the key, the last exactly 0 (a zero key)."""
    t = numpy_dtype(dtype)
    rng = np.random.default_rng(1)
    q0, k0 = rng.standard_normal((1, 2, 1, 64)).astype(t), rng.standard_normal((1, 1, 50, 64)).astype(t)
    q, k = plant_score_peaks(q0, k0, score_level_peaks(50, "rise"), scale=0.125, token_axis=2, dtype=dtype)
    scores = segment_score_maxima(q, k, scale=0.125, segment=1)  # [Hq, 1, N]
    # every key but the last: the planted b = RISE_LOW / (scale * PEAK_QUERY) rounded to the dtype (2^-8 relative)
    assert np.all(scores[..., -1] == 0.0) and np.allclose(scores[..., :-1], RISE_LOW, rtol=2.0 ** -8)
