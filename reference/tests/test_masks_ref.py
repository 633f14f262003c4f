"""``reference.masks`` against nested-loop constructions of the contract, and MLX's causal rule.

Every comparison is ``gate.bit_exact``: a mask is a bool array, so either the
positions agree or the port is wrong. The loops below are written from the
docstrings' sentences (query at position offset + t, key j, window distance),
not from the vectorized code.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reference import masks
from reference.attention import attention_ref, key_visibility

KERNEL = "reference.masks"
PROPERTY_SETTINGS = settings(
    suppress_health_check=list(settings.default.suppress_health_check) + [HealthCheck.function_scoped_fixture])

# N new tokens after `offset` cached ones, with and without a window (1 = only itself).
CAUSAL_GRID = [(N, offset, window) for N in (1, 2, 5) for offset in (0, 1, 7) for window in (None, 1, 2, 4, 9)]


def loop_causal(N, offset, window):
    out = np.zeros((N, offset + N), bool)
    for t in range(N):
        i = offset + t  # the query's position
        for j in range(offset + N):
            out[t, j] = j <= i and (window is None or i - j < window)
    return out


def loop_batched(batch, tokens, total, left_pad, window):
    out = np.zeros((batch, 1, tokens, total), bool)
    offset = total - tokens
    for b in range(batch):
        for t in range(tokens):
            for j in range(total):
                out[b, 0, t, j] = left_pad[b] <= j <= offset + t and (window is None or offset + t - j < window)
    return out


@pytest.mark.parametrize("N, offset, window", CAUSAL_GRID, ids=[f"N{n}-off{o}-w{w}" for n, o, w in CAUSAL_GRID])
def test_causal_mask_matches_loops(gate, N, offset, window):
    gate.bit_exact(masks.causal_mask(N, offset, window), loop_causal(N, offset, window), what="causal_mask",
                   kernel=KERNEL, case=f"N{N}-off{offset}-w{window}")


@pytest.mark.parametrize("N, offset, window", CAUSAL_GRID, ids=[f"N{n}-off{o}-w{w}" for n, o, w in CAUSAL_GRID])
def test_causal_mask_is_attention_refs_rule(gate, N, offset, window):
    """N queries over offset + N keys: attention_ref's bottom-right causal + window says the same."""
    gate.bit_exact(key_visibility(N, offset + N, causal=True, window=window), masks.causal_mask(N, offset, window),
                   what="key_visibility(L, N) == causal_mask(L, N - L)", kernel=KERNEL, case=f"N{N}-off{offset}-w{window}")


@pytest.mark.parametrize("L, N", [(1, 1), (1, 9), (4, 4), (3, 10), (8, 17)])
def test_causal_mask_is_mlx_causal(gate, L, N):
    """MLX's mask='causal' and the boolean causal_mask(L, N - L) produce identical attention bytes."""
    rng = np.random.default_rng(L * 100 + N)
    q = mx.array(rng.standard_normal((1, 2, L, 32)).astype(np.float32))
    k = mx.array(rng.standard_normal((1, 2, N, 32)).astype(np.float32))
    v = mx.array(rng.standard_normal((1, 2, N, 32)).astype(np.float32))
    by_string = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.2, mask="causal", stream=mx.cpu)
    by_mask = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.2, mask=mx.array(masks.causal_mask(L, N - L)),
                                                   stream=mx.cpu)
    try:
        gate.bit_exact(np.array(by_string), np.array(by_mask), what="MLX 'causal' == causal_mask(L, N - L)",
                       kernel="mx.fast.scaled_dot_product_attention", case=f"L{L}-N{N}")
    except AssertionError as exc:  # a real dependency: say who relies on it
        exc.args = (f"{exc.args[0]}\nMLX {mx.__version__}'s mask='causal' is no longer causal_mask(L, N - L) "
                    f"(bottom-right aligned): the project relies on it: impl/kv/view.py's control path and "
                    f"parity/decoder.py pass mask='causal' to MLX's SDPA while the direct kernel "
                    f"(impl.paged_attention) and reference.masks mask bottom-right",)
        raise


@PROPERTY_SETTINGS
@given(L=st.integers(0, 12), window=st.one_of(st.none(), st.integers(1, 14)), data=st.data())
def test_bidirectional_mask_matches_loops(gate, L, window, data):
    bidir = np.array(data.draw(st.lists(st.booleans(), min_size=L, max_size=L)), dtype=bool)
    expected = loop_causal(L, 0, window)
    for i in range(L):
        for j in range(L):
            expected[i, j] |= bool(bidir[i] and bidir[j])
    gate.bit_exact(masks.bidirectional_mask(L, window, bidir), expected, what="causal(+window) OR bidir x bidir",
                   kernel=KERNEL, case=f"L{L}-w{window}")


@st.composite
def batched_args(draw):
    batch = draw(st.integers(1, 4))
    tokens = draw(st.integers(1, 5))
    offset = draw(st.integers(0, 12))
    left_pad = draw(st.lists(st.integers(0, offset), min_size=batch, max_size=batch))
    window = draw(st.one_of(st.none(), st.integers(1, offset + tokens + 1)))
    return batch, tokens, offset + tokens, left_pad, window


@PROPERTY_SETTINGS
@given(args=batched_args())
def test_batched_decode_mask_matches_loops(gate, args):
    batch, tokens, total, left_pad, window = args
    got = masks.batched_decode_mask(batch, tokens, total, left_pad, window)
    gate.bit_exact(got, loop_batched(batch, tokens, total, left_pad, window), what="batched_decode_mask",
                   kernel=KERNEL, case=f"B{batch}-T{tokens}-K{total}-pad{left_pad}-w{window}")
    assert got.shape == (batch, 1, tokens, total)
    assert got.any(axis=-1).all(), "every query sees at least its own slot"


@PROPERTY_SETTINGS
@given(args=batched_args(), seed=st.integers(0, 2**32 - 1))
def test_batched_decode_mask_equals_unpadded_rows(gate, args, seed):
    """The contract's point: attention over a padded row == attention over the row alone.

    Row b's own keys are slots left_pad[b]..total-1; its queries are its last
    `tokens` tokens, so alone it is a causal(+window) problem over those keys.
    """
    batch, tokens, total, left_pad, window = args
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, 2, tokens, 8))
    k = rng.standard_normal((batch, 1, total, 8))
    v = rng.standard_normal((batch, 1, total, 8))
    mask = masks.batched_decode_mask(batch, tokens, total, left_pad, window)
    padded = attention_ref(q, k, v, scale=0.4, mask=mask)
    alone = np.concatenate([
        attention_ref(q[b:b + 1], k[b:b + 1, :, left_pad[b]:], v[b:b + 1, :, left_pad[b]:], scale=0.4,
                      mask="causal", window=window)
        for b in range(batch)])
    # Padding keys get weight exp(-inf) = 0 exactly; only the matmul's summation order may differ.
    gate.error_ratio(padded, alone, alone, floor=1e-12, dtype="float64", kernel=KERNEL,
                     why="float64, 8-wide dot products and <= 17 keys: reordering sums moves ~1e-15; 1e-12 margin",
                     case=f"B{batch}-T{tokens}-K{total}-pad{left_pad}-w{window}")


@pytest.mark.parametrize("call, match", [
    (lambda: masks.causal_mask(-1, 0), "N must be an int >= 0"),
    (lambda: masks.causal_mask(2, -1), "offset must be an int >= 0"),
    (lambda: masks.causal_mask(2, 0, 0), "window must be an int >= 1"),
    (lambda: masks.bidirectional_mask(3, None, [True, False]), r"bidir must be a bool array of shape \(3,\)"),
    (lambda: masks.bidirectional_mask(2, None, np.array([1, 0])), "bidir must be a bool array"),
    (lambda: masks.batched_decode_mask(0, 1, 1, [], None), "batch must be an int >= 1"),
    (lambda: masks.batched_decode_mask(1, 0, 1, [0], None), "tokens must be an int >= 1"),
    (lambda: masks.batched_decode_mask(1, 3, 2, [0], None), "total must be an int >= 3"),
    (lambda: masks.batched_decode_mask(2, 1, 4, [0], None), "left_pad must be 2 ints"),
    (lambda: masks.batched_decode_mask(2, 1, 4, [0, 4], None), r"left_pad entries must lie in \[0, total - tokens = 3\]"),
    (lambda: masks.batched_decode_mask(1, 1, 4, [0], 0), "window must be an int >= 1"),
])
def test_rejects_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
