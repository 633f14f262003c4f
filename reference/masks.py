"""Reference attention masks (NumPy bool, True = attend), ports of the seed's masks.ts.

Positions are absolute: a cache holding ``offset`` earlier tokens receives
``N`` new ones, so new query ``t`` sits at position ``offset + t`` and keys run
over positions ``0 .. offset + N - 1``. A key at position ``j`` is visible to a
query at position ``i`` when ``j <= i`` (causal) and, with a sliding window
``w``, ``i - j < w`` (the query itself plus the ``w - 1`` tokens before it).
That is the seed's ``createCausalMask`` (a port of mlx-lm's
``create_causal_mask``): ``linds >= rinds`` and ``linds < rinds + window``.

These masks feed ``reference.attention.attention_ref`` as boolean masks and,
later, the KV cache (``PagedKvRows.make_mask``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["batched_decode_mask", "bidirectional_mask", "causal_mask"]


# Argument checks: TypeError for the wrong kind, ValueError out of range, each naming the argument.
# No key axis is longer than int64 holds (NumPy's index range).
_MAX_AXIS = int(np.iinfo(np.int64).max)


def _count(value, name: str, *, minimum: int, maximum: int | None = _MAX_AXIS) -> int:
    """A Python or NumPy integer (never bool) in [minimum, maximum], as a Python int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an int <= {maximum}, got {value!r}")
    return int(value)


def _window(window, keys: int) -> int | None:
    """A window of ``keys`` or more hides nothing (no key lies that far behind a query), so it is clamped to
    ``max(keys, 1)``: the same mask, and ``keys + window`` stays within int64. So any int >= 1 is a window."""
    return None if window is None else min(_count(window, "window", minimum=1, maximum=None), max(keys, 1))


def causal_mask(N: int, offset: int = 0, window: int | None = None) -> np.ndarray:
    """bool ``[N, offset + N]``: N new queries (positions ``offset..offset+N-1``) over all keys.

    ``mask[t, j]`` is True iff ``j <= offset + t`` and, with ``window``,
    ``offset + t - j < window``. With ``offset = K - N`` this is MLX's
    bottom-right ``mask="causal"`` for N queries over K keys.

    ``N = 0`` is allowed: no new queries is an empty ``[0, offset]`` mask.
    """
    N = _count(N, "N", minimum=0)
    offset = _count(offset, "offset", minimum=0)
    if offset + N > _MAX_AXIS:
        raise ValueError(f"offset + N must be <= {_MAX_AXIS}, got {offset} + {N}")
    window = _window(window, offset + N)
    queries = np.arange(offset, offset + N)[:, None]  # linds
    keys = np.arange(offset + N)[None, :]  # rinds
    mask = queries >= keys
    if window is not None:
        mask &= queries < keys + window
    return mask


def bidirectional_mask(L: int, window: int | None, bidir) -> np.ndarray:
    """bool ``[L, L]``: causal (+window) attention OR'd with all-pairs attention among ``bidir`` tokens.

    ``bidir`` is a bool ``[L]`` flag per token (e.g. image tokens): two flagged
    tokens see each other in both directions, whatever their order or distance;
    every other pair follows ``causal_mask(L, 0, window)``. (The seed's
    ``bidirMask``.)

    ``L = 0`` with an empty ``bidir`` is allowed: an empty ``[0, 0]`` mask. An empty list is read as no flags
    (``np.asarray([])`` is float64; it holds no non-bool value).
    """
    L = _count(L, "L", minimum=0)
    _window(window, L)  # checked before bidir, so a bad window is named as such
    flags = np.asarray(bidir)
    if flags.dtype.kind in "OUS":  # None, strings, ragged lists: no flags at all
        raise TypeError(f"bidir must be a bool array of shape ({L},), got {type(bidir).__name__}")
    if flags.size == 0 and flags.shape == (L,):
        flags = flags.astype(np.bool_)
    if flags.dtype != np.bool_ or flags.shape != (L,):
        raise ValueError(f"bidir must be a bool array of shape ({L},), got dtype {flags.dtype} shape {flags.shape}")
    return causal_mask(L, 0, window) | (flags[:, None] & flags[None, :])


def batched_decode_mask(batch: int, tokens: int, total: int, left_pad: Sequence[int],
                        window: int | None = None) -> np.ndarray:
    """bool ``[batch, 1, tokens, total]``: the mask for a left-padded batch of cache rows.

    The contract (the seed's ``buildBatchedDecodeMask`` as ``PagedKvRows.makeMask``
    calls it):

    * The batch shares one key axis of ``total`` slots; the ``tokens`` new
      queries occupy the last ``tokens`` slots, so query ``t`` sits at slot
      ``offset + t`` with ``offset = total - tokens`` (the longest row's length
      before this step).
    * Row ``b`` is shorter by ``left_pad[b]`` tokens and is right-aligned: its
      first ``left_pad[b]`` slots are padding and never visible; its own token
      ``r`` lives in slot ``left_pad[b] + r``. ``0 <= left_pad[b] <= offset``.
    * Slot ``j`` is visible to query ``t`` of row ``b`` iff
      ``left_pad[b] <= j <= offset + t`` and, with ``window``,
      ``offset + t - j < window``. The window is a distance, so it is the same
      in padded slots and in the row's own positions.
    * The head axis is 1 (one mask for every head); it broadcasts over
      ``[B, Hq, tokens, total]`` in ``attention_ref`` and MLX's SDPA.

    Every query row sees at least its own slot, so no row is fully masked.
    """
    batch = _count(batch, "batch", minimum=1)
    tokens = _count(tokens, "tokens", minimum=1)
    total = _count(total, "total", minimum=tokens)
    window = _window(window, total)
    # np.asarray would read [0, True] as ints [0, 1]: a bool entry is refused by name first
    if isinstance(left_pad, (list, tuple)) and any(isinstance(p, (bool, np.bool_)) for p in left_pad):
        raise TypeError(f"left_pad entries must be ints, not bools, got {list(left_pad)!r}")
    pad = np.asarray(left_pad)
    if pad.dtype.kind in "OUS":  # None, strings, ragged lists: no ints at all
        raise TypeError(f"left_pad must be a sequence of {batch} ints, got {type(left_pad).__name__}")
    offset = total - tokens
    if pad.shape != (batch,) or (pad.size and not np.issubdtype(pad.dtype, np.integer)):
        raise ValueError(f"left_pad must be {batch} ints (one per row), got {list(np.ravel(pad))!r}")
    if np.any((pad < 0) | (pad > offset)):
        raise ValueError(f"left_pad entries must lie in [0, total - tokens = {offset}], got {pad.tolist()}")
    causal = causal_mask(tokens, offset, window)  # [tokens, total]
    not_padding = np.arange(total)[None, :] >= pad[:, None]  # [batch, total]
    return causal[None, None, :, :] & not_padding[:, None, None, :]
