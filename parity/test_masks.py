"""impl.masks against the NumPy oracle reference.masks: exact equality over a Hypothesis grid.

Masks are bool, so the gate is ``equal`` (every element identical) after the
dtype check: the MLX mask must be bool, as SDPA expects.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl import masks
from reference import masks as ref_masks

KERNEL = "masks"
# The gate fixture only records (no per-example state), so sharing it across examples is safe.
GATED = settings(suppress_health_check=list(settings.default.suppress_health_check)
                 + [HealthCheck.function_scoped_fixture])
WINDOWS = st.one_of(st.none(), st.integers(1, 40))


def check_bool(mask: mx.array) -> mx.array:
    assert mask.dtype == mx.bool_, f"mask dtype {mask.dtype}, expected bool"
    return mask


@GATED
@given(N=st.integers(0, 24), offset=st.integers(0, 64), window=WINDOWS)
def test_create_causal_mask_matches_oracle(gate, N, offset, window):
    got = check_bool(masks.create_causal_mask(N, offset, window))
    gate.equal(got, ref_masks.causal_mask(N, offset, window), kernel=KERNEL,
               case=f"N{N}-offset{offset}-w{window}", what="create_causal_mask vs reference causal_mask")


@GATED
@given(data=st.data(), L=st.integers(0, 24), window=WINDOWS)
def test_bidirectional_mask_matches_oracle(gate, data, L, window):
    bidir = np.array(data.draw(st.lists(st.booleans(), min_size=L, max_size=L), label="bidir"), dtype=bool)
    got = check_bool(masks.bidirectional_mask(L, window, mx.array(bidir)))
    gate.equal(got, ref_masks.bidirectional_mask(L, window, bidir), kernel=KERNEL,
               case=f"L{L}-w{window}-{bidir.astype(int).tolist()}", what="bidirectional_mask vs reference")


@GATED
@given(data=st.data(), batch=st.integers(1, 5), tokens=st.integers(1, 8), offset=st.integers(0, 48), window=WINDOWS)
def test_batched_decode_mask_matches_oracle(gate, data, batch, tokens, offset, window):
    left_pad = data.draw(st.lists(st.integers(0, offset), min_size=batch, max_size=batch), label="left_pad")
    total = offset + tokens
    got = check_bool(masks.batched_decode_mask(batch, tokens, total, left_pad, window))
    assert got.shape == (batch, 1, tokens, total)
    gate.equal(got, ref_masks.batched_decode_mask(batch, tokens, total, left_pad, window), kernel=KERNEL,
               case=f"B{batch}-t{tokens}-total{total}-pad{left_pad}-w{window}", what="batched_decode_mask vs reference")


def test_bidir_of_numpy_bools_and_batches_past_256():
    """A list of NumPy bools is a sequence of bools (MLX's mx.array refuses np.bool_ entries: the mask converts
    them), and a batch past CPython's small ints (256) is matched to left_pad by value."""
    got = masks.bidirectional_mask(3, None, [np.True_, np.False_, np.True_])
    assert mx.array_equal(got, masks.bidirectional_mask(3, None, [True, False, True])).item()
    batch = 300
    got = masks.batched_decode_mask(batch, 1, 5, [b % 4 for b in range(batch)], None)
    assert got.shape == (batch, 1, 1, 5) and got.dtype == mx.bool_
    assert [int(mx.sum(got[b]).item()) for b in (0, 1, 299)] == [5, 4, 2]  # keys left_pad .. 4 of 5


BAD_CALLS = [
    (lambda: masks.create_causal_mask(-1, 0), ValueError, "N"),
    (lambda: masks.create_causal_mask(2, -1), ValueError, "offset"),
    (lambda: masks.create_causal_mask(2, 0, 0), ValueError, "window"),
    (lambda: masks.create_causal_mask(2.0, 0), TypeError, "N"),
    (lambda: masks.bidirectional_mask(3, None, mx.array([True, False])), ValueError, "bidir"),
    (lambda: masks.bidirectional_mask(2, None, mx.array([1, 0])), ValueError, "bidir"),
    (lambda: masks.batched_decode_mask(2, 1, 4, [0], None), ValueError, "left_pad"),
    (lambda: masks.batched_decode_mask(2, 1, 4, [0, 4], None), ValueError, "left_pad"),
    (lambda: masks.batched_decode_mask(1, 5, 4, [0], None), ValueError, "total"),
    (lambda: masks.cache_mask(0, 0), ValueError, "tokens"),
    (lambda: masks.cache_mask(1, -1), ValueError, "offset must be >= 0"),
    (lambda: masks.bidirectional_mask(2, None, None), TypeError, "bidir"),
    (lambda: masks.bidirectional_mask(2, None, "ab"), TypeError, "bidir"),
    (lambda: masks.bidirectional_mask(2, None, [[True], [False, True]]), ValueError, "bidir"),
    (lambda: masks.bidirectional_mask(2, None, [1, 0]), ValueError, "bidir"),
    # NumPy arrays: only bool ones (or empty ones) are bools; an int or float array is refused like its mx.array
    (lambda: masks.bidirectional_mask(2, None, np.array([1, 0])), ValueError, "bidir must be a bool array"),
    (lambda: masks.bidirectional_mask(1, None, np.array([1.0])), ValueError, "bidir must be a bool array"),
    (lambda: masks.bidirectional_mask(1, None, np.array([1], np.uint8)), ValueError, "bidir must be a bool array"),
    (lambda: masks.batched_decode_mask(1, 1, 4, [-1], None), ValueError, "left_pad entry must be >= 0"),
    (lambda: masks.batched_decode_mask(2, 1, 4, "ab", None), ValueError, "left_pad must hold 2 ints"),
    (lambda: masks.batched_decode_mask(1, 1, 4, 0, None), ValueError, "left_pad must hold 1 ints"),
    (lambda: masks.batched_decode_mask(1, 1, 4, {0}, None), ValueError, "left_pad must hold 1 ints"),
    (lambda: masks.cache_mask(1, 3, 0), ValueError, "window"),
    (lambda: masks.bidirectional_mask(-1, None, []), ValueError, "L must be >= 0"),
    (lambda: masks.batched_decode_mask(1, -1, 3, [0], None), ValueError, "tokens must be >= 0"),
    (lambda: masks.batched_decode_mask(-1, 1, 3, [], None), ValueError, "batch must be >= 0"),
    (lambda: masks.batched_decode_mask(1, 1, 4, [0], 0), ValueError, "window"),
]


# NumPy integers are integers (check_int takes them): each function must hand MLX the Python int it checked.
NUMPY_CALLS = [
    (lambda i: masks.create_causal_mask(i(3), i(2), i(2)), lambda: masks.create_causal_mask(3, 2, 2)),
    (lambda i: masks.bidirectional_mask(i(2), None, [True, False]), lambda: masks.bidirectional_mask(2, None, [True, False])),
    (lambda i: masks.bidirectional_mask(2, None, np.array([True, False])),
     lambda: masks.bidirectional_mask(2, None, mx.array([True, False]))),
    (lambda i: masks.batched_decode_mask(i(2), i(1), i(3), np.array([0, 1]), i(2)),
     lambda: masks.batched_decode_mask(2, 1, 3, [0, 1], 2)),
    (lambda i: masks.cache_mask(i(2), i(3), i(2)), lambda: masks.cache_mask(2, 3, 2)),
    # a list of NumPy ints (not an array, whose tolist() gives Python ints): MLX refused them inside the mask
    (lambda i: masks.batched_decode_mask(2, 1, 3, [i(0), i(1)], 2), lambda: masks.batched_decode_mask(2, 1, 3, [0, 1], 2)),
]


@pytest.mark.parametrize("kind", [np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("call, plain", NUMPY_CALLS, ids=[str(i) for i in range(len(NUMPY_CALLS))])
def test_numpy_integers_give_the_python_ints_mask(call, plain, kind):
    got, expected = call(kind), plain()
    assert got.dtype == expected.dtype and mx.array_equal(got, expected).item()


@pytest.mark.parametrize("bidir", [[], (), np.array([]), np.array([], np.int64), mx.array([]), mx.array([], mx.bool_)],
                         ids=["list", "tuple", "numpy float", "numpy int", "mlx float", "mlx bool"])
def test_an_empty_bidir_is_an_empty_bool_mask(bidir):
    """L = 0: an empty bidir of any dtype (``mx.array([])`` and ``np.array([])`` are float) is the empty mask."""
    mask = masks.bidirectional_mask(0, None, bidir)
    assert mask.shape == (0, 0) and mask.dtype == mx.bool_


def test_a_causal_mask_starts_at_position_0_by_default():
    """``offset`` defaults to 0: ``create_causal_mask(N)`` is the square lower triangle (the oracle's, offset 0)."""
    for N in (1, 3):
        mask = masks.create_causal_mask(N)
        assert mask.shape == (N, N) and mx.array_equal(mask, masks.create_causal_mask(N, 0)).item()
        assert np.array_equal(np.array(mask), np.tril(np.ones((N, N), bool)))


def test_no_queries_or_no_rows_give_empty_masks():
    """Zero queries or zero batch rows (batch and tokens are counts, minimum 0) are empty bool masks of that shape.
    (The oracle takes tokens >= 1 only: no oracle comparison here, and an empty mask has no element to compare.)"""
    for batch, tokens, total, pads in [(2, 0, 3, [0, 1]), (0, 1, 3, []), (1, 0, 0, [0])]:
        assert check_bool(masks.batched_decode_mask(batch, tokens, total, pads, None)).shape == (batch, 1, tokens, total)
    assert check_bool(masks.create_causal_mask(0, 4)).shape == (0, 4)


@pytest.mark.parametrize("call, error, name", BAD_CALLS, ids=[f"{i}-{n}" for i, (_, _, n) in enumerate(BAD_CALLS)])
def test_bad_mask_arguments_are_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


@pytest.mark.parametrize("window", [2**31, 2**70])
def test_a_window_past_int32_cuts_nothing(window):
    """A window longer than the keys is no window (it raised std::bad_cast inside MLX before)."""
    assert mx.array_equal(masks.create_causal_mask(3, 2, window), masks.create_causal_mask(3, 2)).item()
    assert mx.array_equal(masks.batched_decode_mask(2, 1, 3, [0, 1], window),
                          masks.batched_decode_mask(2, 1, 3, [0, 1], None)).item()


POSITION_CALLS = [
    (lambda: masks.create_causal_mask(1, 2**31 - 1), r"^offset \+ N"),
    (lambda: masks.create_causal_mask(2**31, 0, 4), r"^offset \+ N"),
    (lambda: masks.bidirectional_mask(2**31, None, []), r"^L "),
    (lambda: masks.batched_decode_mask(1, 1, 2**31, [0], None), r"^total "),
    (lambda: masks.cache_mask(1, 10**20, 4), r"^offset \+ tokens"),
]


@pytest.mark.parametrize("call, name", POSITION_CALLS, ids=[str(i) for i in range(len(POSITION_CALLS))])
def test_positions_past_int32_are_refused_by_name(call, name):
    """A mask array holds int32 positions (mx.arange): more keys than 2**31 - 1 is a ValueError naming the arguments
    the count comes from, before any array (MLX's own "[arange] Maximum size exceeded" named none)."""
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("bidir", [np.array(["a", "b"]), np.array(["2020-01-01", "2020-01-02"], "datetime64[D]"),
                                   np.array([b"a", b"b"])], ids=["str", "datetime", "bytes"])
def test_a_bidir_mlx_cannot_hold_is_refused_by_name(bidir):
    """Entries MLX's conversion cannot take (its RuntimeError std::bad_cast) are a ValueError naming bidir."""
    with pytest.raises(ValueError, match="^bidir must"):
        masks.bidirectional_mask(2, None, bidir)


def test_object_bools_are_bools():
    """A NumPy object array of bools is a sequence of bools: the same mask as the bool array."""
    got = masks.bidirectional_mask(2, None, np.array([True, False], dtype=object))
    assert mx.array_equal(got, masks.bidirectional_mask(2, None, np.array([True, False]))).item()


@pytest.mark.parametrize("kind", [np.int64, np.uint8])
def test_left_pad_of_numpy_ints_matches_oracle(gate, kind):
    """batched_decode_mask with left_pad a list of NumPy integers (e.g. taken from a NumPy array one by one): it raised
    MLX's "Invalid type int64 received in array initialization", naming no argument; now the oracle's mask."""
    pads = [kind(0), kind(3), kind(1)]
    got = check_bool(masks.batched_decode_mask(3, 2, 6, pads, 3))
    gate.equal(got, ref_masks.batched_decode_mask(3, 2, 6, [int(p) for p in pads], 3), kernel=KERNEL,
               case=f"numpy-{kind.__name__}-pads", what="batched_decode_mask vs reference, NumPy int pads")
