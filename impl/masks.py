"""Attention masks (port of the seed's masks.ts and mlx-lm's ``create_causal_mask``).

All masks are bool MLX arrays, True where a query may attend a key (the form
``mx.fast.scaled_dot_product_attention`` takes). Positions are absolute:
query i of a chunk of N sits at position ``offset + i``, key j at position j.

* ``create_causal_mask(N, offset, window=None)`` -> [N, offset + N]:
  key j visible to query i iff ``j <= offset + i`` and, with a window,
  ``offset + i - j < window`` (the query sees itself and window - 1 keys back).
* ``bidirectional_mask(L, window, bidir)`` -> [L, L]: the causal(+window) mask
  OR'd with bidir x bidir (image tokens attend each other both ways).
* ``batched_decode_mask(batch, tokens, total, left_pad, window)`` ->
  [batch, 1, tokens, total]: causal with offset ``total - tokens``; row b's
  first ``left_pad[b]`` key positions (its left padding) are never visible.
  The window is measured in the padded coordinates, which is the same as the
  row's own since padding shifts queries and keys alike.
* ``cache_mask(tokens, offset, window=None)``: the mask policy every KV cache
  here shares (mlx-lm's ``create_attention_mask``): an array when a window
  cuts into the keys (``offset + tokens > window``), else None for a single
  query, else the string "causal".

Positions are int32 in MLX (``mx.arange``): a mask array of more than
``impl.checks.MAX_EXTENT`` keys is a ValueError naming the arguments its key
count comes from, before any array is made.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from impl.checks import MAX_EXTENT, check_int


def _bool_like(values) -> bool:
    """A sequence (or NumPy array) of bools, empty included: what ``bidir`` may be besides a bool mx.array."""
    if isinstance(values, np.ndarray):
        if values.dtype == object:  # bools held as Python objects
            return all(isinstance(v, (bool, np.bool_)) for v in values.ravel())
        return values.dtype == np.bool_ or values.size == 0
    return (isinstance(values, Sequence) and not isinstance(values, (str, bytes))
            and all(isinstance(v, (bool, np.bool_)) for v in values))


def _check_window(window) -> int | None:
    return None if window is None else check_int("window", window, minimum=1)


def _check_positions(count: int, what: str) -> None:
    """A mask array's key count ``count`` (``what`` names the arguments it comes from) within MLX's int32 positions."""
    if count > MAX_EXTENT:  # mx.arange's positions are int32
        raise ValueError(f"{what} must be at most 2**31 - 1 (MLX's int32 positions), got {count}")


def create_causal_mask(N: int, offset: int = 0, window: int | None = None) -> mx.array:
    """bool [N, offset + N]: causal from absolute position ``offset``, optionally windowed."""
    N = check_int("N", N, minimum=0)  # as Python ints: mx.arange refuses NumPy integers
    offset = check_int("offset", offset, minimum=0)
    window = _check_window(window)
    _check_positions(offset + N, f"offset + N ({offset} + {N})")
    keys = mx.arange(offset + N)[None, :]
    queries = mx.arange(offset, offset + N)[:, None]
    mask = queries >= keys
    # A window as long as the keys cuts nothing (queries - keys < offset + N): skipping it keeps a huge window out
    # of MLX's int32 arithmetic, where it raised std::bad_cast. The test is on the difference: keys + window would
    # wrap past 2**31 once positions pass 2**30 (a query then blind to itself).
    if window is not None and window < offset + N:
        mask = mx.logical_and(mask, queries - keys < window)
    return mask


def bidirectional_mask(L: int, window: int | None, bidir) -> mx.array:
    """bool [L, L]: causal(+window) OR (bidir[i] AND bidir[j])."""
    L = check_int("L", L, minimum=0)
    _check_positions(L, "L")
    if not isinstance(bidir, mx.array):
        if isinstance(bidir, (str, bytes)) or not isinstance(bidir, (Sequence, np.ndarray)):
            raise TypeError(f"bidir must be a bool mx.array or a sequence of bools, got {type(bidir).__name__}")
        try:
            bidir = mx.array(np.asarray(bidir, dtype=np.bool_) if _bool_like(bidir) else bidir)
        except (TypeError, ValueError, RuntimeError) as error:  # ragged nesting, entries MLX cannot hold (strings,
            # dates, records: MLX's conversion raises RuntimeError std::bad_cast for those)
            raise ValueError(f"bidir must be a bool array of shape ({L},): {error}") from None
    if bidir.shape != (L,):
        raise ValueError(f"bidir must have shape ({L},), got {tuple(bidir.shape)}")
    if bidir.dtype != mx.bool_:
        if L:  # (an empty bidir holds no value: mx.array([]) is float32, and MLX's & refuses floats)
            raise ValueError(f"bidir must be a bool array, got {bidir.dtype}")
        bidir = bidir.astype(mx.bool_)
    return create_causal_mask(L, 0, window) | (bidir[:, None] & bidir[None, :])


def batched_decode_mask(batch: int, tokens: int, total: int, left_pad, window: int | None) -> mx.array:
    """bool [batch, 1, tokens, total]: causal at offset total - tokens, row b blind to keys < left_pad[b]."""
    batch = check_int("batch", batch, minimum=0)  # as Python ints: mx.arange / reshape refuse NumPy integers
    tokens = check_int("tokens", tokens, minimum=0)
    total = check_int("total", total, minimum=tokens)
    _check_positions(total, "total")
    pads = left_pad.tolist() if isinstance(left_pad, (mx.array, np.ndarray)) else left_pad
    if isinstance(pads, (str, bytes)) or not isinstance(pads, Sequence) or len(pads) != batch:
        raise ValueError(f"left_pad must hold {batch} ints, got {left_pad!r}")
    pads = [check_int("left_pad entry", pad, minimum=0, maximum=total - tokens) for pad in pads]  # NumPy ints as ints
    causal = create_causal_mask(tokens, total - tokens, window)
    keys = mx.arange(total)[None, None, None, :]
    visible = keys >= mx.array(list(pads), dtype=mx.int32).reshape(batch, 1, 1, 1)
    return causal[None, None] & visible


def cache_mask(tokens: int, offset: int, window: int | None = None):
    """The cache mask policy: None | "causal" | bool [tokens, offset + tokens] (see the module docstring)."""
    tokens = check_int("tokens", tokens, minimum=1)
    offset = check_int("offset", offset, minimum=0)
    window = _check_window(window)
    if window is not None and offset + tokens > window:
        _check_positions(offset + tokens, f"offset + tokens ({offset} + {tokens})")
        return create_causal_mask(tokens, offset, window)
    return None if tokens == 1 else "causal"
