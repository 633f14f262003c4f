"""Errors raised by the KV caches.

Bad arguments raise the built-in ``ValueError`` / ``TypeError`` whose message
names the argument; the only typed error is ``PoolExhausted``.
"""

from __future__ import annotations


class PoolExhausted(RuntimeError):
    """A block pool cannot hand out the blocks a write needs.

    When it is raised (the policy of this port): pools are sized from the
    cache's ``capacity_tokens`` and grow by x1.5 when their free list runs dry,
    so a pool only runs out when it has an explicit ``max_blocks`` ceiling.

    * ``BlockPool.alloc()`` on an empty free list;
    * ``BlockPool.grow(blocks)`` with ``blocks > max_blocks``;
    * ``PagedKVCache.append`` when the new tokens need more blocks than the free
      list plus the growth still allowed under ``max_blocks``. This is checked
      before anything is written, so the cache is left exactly as it was.

    ``needed`` is the number of blocks asked for, ``available`` how many could
    still be had (free plus allowed growth), ``max_blocks`` the ceiling.
    """

    def __init__(self, needed: int, available: int, max_blocks: int | None):
        self.needed = needed
        self.available = available
        self.max_blocks = max_blocks
        ceiling = "no max_blocks" if max_blocks is None else f"max_blocks={max_blocks}"
        super().__init__(f"block pool exhausted: {needed} block(s) needed, {available} available ({ceiling})")
