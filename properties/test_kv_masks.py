"""Mask policy of the caches (``make_mask``), rope offsets and left padding.

* ``cache_mask`` (KVCache, PagedKVCache): None for one query, "causal" for
  several, a windowed causal array once the window cuts into the keys
  (offset + tokens > window); dense and paged caches agree after any appends.
* ``PagedKvRows.make_mask``: with views (direct or quantized) and no window,
  None / "causal"; one row: that row's policy; otherwise
  ``batched_decode_mask`` over the longest row, whose hidden columns are
  exactly the zero padding ``update_and_fetch`` puts in front of short rows.
* ``rope_offsets`` is each row's own offset.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from impl.kv import PAD_VALUE, KVCache, PagedKVCache, PagedKvRows, Quantization
from impl.masks import batched_decode_mask, cache_mask, create_causal_mask
from properties.strategies.kv import KvSpec, host_bytes, random_kv
from reference.masks import causal_mask

SPEC = KvSpec(1, 32, 32, "float16")
WINDOWS = st.one_of(st.none(), st.integers(1, 40))


# The window's edge, where the cache must switch from "causal" to an array: the first query already sees every key
# (offset + tokens == window) and one more key than the window holds (== window + 1) with offset < window; a single
# token past it; no offset at all.
@example(tokens=3, offset=2, window=4)
@example(tokens=3, offset=1, window=4)
@example(tokens=1, offset=4, window=4)
@example(tokens=2, offset=0, window=1)
@given(tokens=st.integers(1, 12), offset=st.integers(0, 60), window=WINDOWS)
def test_cache_mask_policy(tokens, offset, window):
    """An array exactly when the window hides a key the causal mask shows (the oracle's masks differ), else the
    string form MLX's SDPA takes: "causal", or None for one token (it sees every key)."""
    mask = cache_mask(tokens, offset, window)
    windowed = causal_mask(tokens, offset, window)
    if not np.array_equal(windowed, causal_mask(tokens, offset)):
        assert isinstance(mask, mx.array) and mask.dtype == mx.bool_
        assert np.array_equal(np.array(mask), windowed)
        assert mx.array_equal(mask, create_causal_mask(tokens, offset, window)).item()
    else:
        assert mask == (None if tokens == 1 else "causal")


def same_mask(a, b) -> bool:
    if isinstance(a, mx.array) or isinstance(b, mx.array):
        return isinstance(a, mx.array) and isinstance(b, mx.array) and mx.array_equal(a, b).item()
    return a == b


@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=4), tokens=st.integers(1, 5), window=WINDOWS,
       block_size=st.sampled_from((1, 4, 16)))
def test_dense_and_paged_caches_make_the_same_mask(lengths, tokens, window, block_size):
    dense, paged = KVCache(), PagedKVCache(0, block_size)
    for n in lengths:
        k, v = random_kv(n, SPEC, n)
        dense.update_and_fetch(k, v)
        paged.append(k, v)
    assert same_mask(dense.make_mask(tokens, window), paged.make_mask(tokens, window))


def make_rows(lengths, quantization=None, direct=False) -> PagedKvRows:
    spec = KvSpec(1, 32, 32, "float16", quantization)
    caches = []
    for b, n in enumerate(lengths):
        cache = PagedKVCache(4, 4, direct=direct, quantization=quantization)
        cache.append(*random_kv(b, spec, n))
        caches.append(cache)
    rows = PagedKvRows(4, 4, direct=direct, quantization=quantization)
    rows.merge_rows(caches)
    return rows


@given(lengths=st.lists(st.integers(1, 20), min_size=2, max_size=4), tokens=st.integers(1, 5), window=WINDOWS)
def test_rows_mask_is_the_batched_decode_mask(lengths, tokens, window):
    rows = make_rows(lengths)
    mask = rows.make_mask(tokens, window)
    assert rows.left_pad == [max(lengths) - n for n in lengths]
    expected = batched_decode_mask(len(lengths), tokens, max(lengths) + tokens, rows.left_pad, window)
    assert same_mask(mask, expected)
    assert rows.rope_offsets.tolist() == lengths and rows.rope_offsets.dtype == mx.int32


@given(lengths=st.lists(st.integers(1, 20), min_size=2, max_size=4), tokens=st.integers(1, 5))
def test_hidden_columns_are_exactly_the_zero_padding(lengths, tokens):
    rows = make_rows(lengths)
    mask = np.array(rows.make_mask(tokens, None))  # [B, 1, tokens, total]
    keys, _ = rows.update_and_fetch(*random_kv(7, SPEC, tokens, len(lengths)))
    keys = host_bytes(keys).astype(np.float32)
    for b, n in enumerate(lengths):
        pad = max(lengths) - n
        assert not mask[b, 0, :, :pad].any() and mask[b, 0, -1, pad:].all()
        assert (keys[b, :, :pad] == PAD_VALUE).all() and keys.shape[2] == max(lengths) + tokens


@given(tokens=st.integers(1, 5), window=WINDOWS, quantized=st.booleans())
def test_rows_with_views_use_string_masks_without_window(tokens, window, quantized):
    quantization = Quantization(4, 32) if quantized else None
    rows = make_rows([3, 9], quantization=quantization, direct=not quantized)
    assert rows.attention_state is rows
    mask = rows.make_mask(tokens, window)
    if window is None:
        assert mask == (None if tokens == 1 else "causal")
    else:
        assert same_mask(mask, batched_decode_mask(2, tokens, 9 + tokens, [6, 0], window))


@given(length=st.integers(1, 20), tokens=st.integers(1, 5), window=WINDOWS)
def test_single_row_uses_the_row_policy(length, tokens, window):
    rows = make_rows([length])
    assert same_mask(rows.make_mask(tokens, window), rows.rows[0].make_mask(tokens, window))
