"""``KVCache``: the dense contiguous cache (mlx-lm's KVCache), the control for the paged caches.

Buffers ``keys`` [B, H, capacity, D] / ``values`` [B, H, capacity, Dv] grow in
steps of ``STEP`` (256) tokens: when an append does not fit, the live prefix
is kept and ``ceil(L / STEP) * STEP`` zero rows are concatenated. Writes are
functional (``mx.slice_update``), so arrays returned earlier never change.
``update_and_fetch`` returns ``keys[..., :offset, :]`` / ``values[...]``.
Mask policy: ``impl.masks.cache_mask`` (shared with the paged caches).
"""

from __future__ import annotations

import mlx.core as mx

from impl.masks import cache_mask

from .validation import check_same_geometry, check_trim, kv_geometry

STEP = 256


class KVCache:
    """Dense K/V cache; see the module docstring."""

    step = STEP

    def __init__(self):
        self.keys: mx.array | None = None
        self.values: mx.array | None = None
        self.offset = 0

    @property
    def signature(self) -> str:
        return "kv:dense"

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Append keys [B, H, L, D] / values [B, H, L, Dv]; return the live [B, H, offset, D / Dv]."""
        g = kv_geometry(keys, values)
        if self.keys is not None:
            if g.batch != self.keys.shape[0]:
                raise ValueError(f"keys has batch {g.batch}, the cache holds {self.keys.shape[0]}")
            check_same_geometry(g, num_kv_heads=self.keys.shape[1], head_dim=self.keys.shape[3],
                                v_head_dim=self.values.shape[3], dtype=self.keys.dtype)
        start = self.offset
        if self.keys is None or start + g.tokens > self.keys.shape[2]:
            steps = -(-g.tokens // self.step) * self.step
            new_k = mx.zeros((g.batch, g.num_kv_heads, steps, g.head_dim), g.dtype)
            new_v = mx.zeros((g.batch, g.num_kv_heads, steps, g.v_head_dim), g.dtype)
            if self.keys is None:
                self.keys, self.values = new_k, new_v
            else:
                self.keys = mx.concatenate([self.keys[..., :start, :], new_k], axis=2)
                self.values = mx.concatenate([self.values[..., :start, :], new_v], axis=2)
        at = mx.array([0, 0, start, 0], dtype=mx.int32)
        self.keys = mx.slice_update(self.keys, keys, at, axes=(0, 1, 2, 3))
        self.values = mx.slice_update(self.values, values, at, axes=(0, 1, 2, 3))
        self.offset += g.tokens
        return self.fetch()

    def fetch(self) -> tuple[mx.array, mx.array]:
        if self.keys is None:
            raise ValueError("the cache is empty: append before fetching")
        return self.keys[..., :self.offset, :], self.values[..., :self.offset, :]

    def make_mask(self, tokens: int, window: int | None = None):
        return cache_mask(tokens, self.offset, window)

    def is_trimmable(self) -> bool:
        return True

    def trim(self, tokens: int) -> int:
        tokens = check_trim(tokens, self.offset)
        self.offset -= tokens
        return tokens

    def state(self) -> list[mx.array]:
        return [] if self.keys is None else list(self.fetch())

    def __repr__(self) -> str:
        return f"KVCache(offset={self.offset})"
