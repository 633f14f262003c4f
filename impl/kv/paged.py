"""``PagedKVCache``: one sequence's K/V in a ``BlockPool``, behind the usual cache interface.

Storage: a per-cache ``BlockPool`` (created on the first append from that
append's heads, head dims and dtype) and a block table mapping logical block
i (tokens ``i * block_size ..``) to a physical block. ``append`` splits the
incoming tokens along block boundaries and allocates a block each time it
reaches one; when the free list is empty the pool grows by x1.5
(``max(n + 1, ceil(1.5 n))``, capped at ``max_blocks``).

Reads: ``update_and_fetch`` gathers the occupied blocks in table order and
slices to the live prefix: the same bytes a dense ``KVCache`` returns for the
same appends (a bit-exact gate, ``parity/test_kv_parity.py``); quantized
pools return ``mx.dequantize`` of the stored planes. ``append_and_fetch``
returns a ``PagedAttentionView`` that later calls cannot alter.

Sizing: the pool starts with ``ceil(capacity_tokens / block_size)`` blocks
(at least one). ``max_blocks`` (default None: unbounded) is the only way to
get ``PoolExhausted``; an append that would need more blocks than the pool
may reach is refused before anything is written.

Invariants: ``len(block_table) == ceil(offset / block_size)``; every table
entry is allocated in the pool and appears once; ``trim`` returns the blocks
it empties to the free list.

Every mutator validates all its arguments first and raises ValueError /
TypeError naming the argument without changing offset, table, pool arrays or
free list.
"""

from __future__ import annotations

import mlx.core as mx

from impl.checks import MAX_EXTENT
from impl.masks import cache_mask

from .errors import PoolExhausted
from .pool import BlockPool, grown_size, next_pool_size, pool_blocks_for
from .quantization import Quantization, check_quantization
from .validation import KvGeometry, check_int, check_same_geometry, check_trim, kv_geometry
from impl.block_table import BlockTable

from .view import PagedAttentionView, snapshot_table


def check_capacity(capacity_tokens, block_size) -> tuple[int, int]:
    """``capacity_tokens`` and ``block_size`` as Python ints (pool.py), the pool of the capacity's blocks within
    MLX's int32 extents (``MAX_EXTENT``): the pool is made at the first append, too late to name them."""
    capacity_tokens = check_int("capacity_tokens", capacity_tokens, minimum=0)
    block_size = check_int("block_size", block_size, minimum=1, maximum=MAX_EXTENT)
    if pool_blocks_for(capacity_tokens, block_size) > MAX_EXTENT:
        raise ValueError(f"capacity_tokens={capacity_tokens} needs {pool_blocks_for(capacity_tokens, block_size)} "
                         f"blocks of {block_size}, past a pool's {MAX_EXTENT}")
    return capacity_tokens, block_size


class PagedKVCache:
    """Paged K/V storage for one sequence (batch 1); see the module docstring."""

    def __init__(self, capacity_tokens: int, block_size: int, direct: bool = False,
                 quantization: Quantization | None = None, *, max_blocks: int | None = None):
        capacity_tokens, block_size = check_capacity(capacity_tokens, block_size)
        if not isinstance(direct, bool):
            raise TypeError(f"direct must be a bool, got {type(direct).__name__}")
        check_quantization(quantization)
        if max_blocks is not None:
            max_blocks = check_int("max_blocks", max_blocks, minimum=1, maximum=MAX_EXTENT)
            if self._initial_blocks(capacity_tokens, block_size) > max_blocks:
                raise ValueError(f"capacity_tokens={capacity_tokens} needs "
                                 f"{pool_blocks_for(capacity_tokens, block_size)} blocks > max_blocks={max_blocks}")
        self.capacity_tokens = capacity_tokens
        self.block_size = block_size
        self.direct = direct
        self.quantization = quantization
        self.max_blocks = max_blocks
        self.offset = 0
        self.pool: BlockPool | None = None
        self._table: list[int] = []
        self._snapshot: BlockTable | None = None  # _table frozen for views; None after it changes

    @staticmethod
    def _initial_blocks(capacity_tokens: int, block_size: int) -> int:
        return max(1, pool_blocks_for(capacity_tokens, block_size))

    @property
    def signature(self) -> str:
        return "kv:paged"

    @property
    def block_table(self) -> tuple[int, ...]:
        """Physical block of each logical block, in order (a copy)."""
        return tuple(self._table)

    @property
    def attention_state(self) -> "PagedKVCache | None":
        """This cache when attention should go through ``append_and_fetch`` views (direct or quantized)."""
        return self if self.direct or self.quantization is not None else None

    # --- writes -----------------------------------------------------------

    def _check_append(self, keys, values) -> KvGeometry:
        """Validate an append completely (shapes, dtype, pool room) before any state changes."""
        g = kv_geometry(keys, values)
        if g.batch != 1:
            raise ValueError(f"keys must hold one sequence (batch 1), got batch {g.batch}; use PagedKvRows for batches")
        if self.pool is None:
            if self.quantization is not None:
                self.quantization.check_divides(g.head_dim, "head_dim")
                self.quantization.check_divides(g.v_head_dim, "v_head_dim")
        else:
            p = self.pool
            check_same_geometry(g, num_kv_heads=p.num_kv_heads, head_dim=p.head_dim, v_head_dim=p.v_head_dim,
                                dtype=p.dtype)
        if self.max_blocks is not None:
            if self.pool is None:  # the pool the append will make: all of its blocks free
                free = num = self._initial_blocks(self.capacity_tokens, self.block_size)
            else:
                free, num = self.pool.free_blocks, self.pool.num_blocks
            needed = pool_blocks_for(self.offset + g.tokens, self.block_size) - len(self._table)
            available = free + self.max_blocks - num
            if needed > available:
                raise PoolExhausted(needed=needed, available=available, max_blocks=self.max_blocks)
        return g

    def _pool_for(self, g: KvGeometry) -> BlockPool:
        """The pool an append of geometry ``g`` (checked by ``_check_append``) writes, made on the first append,
        with the size the growth policy reaches in this append checked too: grow's own checks would fire midway,
        with blocks already in the table. What is left to fail after it is memory."""
        pool = self._new_pool(g) if self.pool is None else self.pool
        needed = pool_blocks_for(self.offset + g.tokens, self.block_size) - len(self._table)
        pool.check_grow(grown_size(pool, needed, self.max_blocks))
        return pool

    def _new_pool(self, g: KvGeometry) -> BlockPool:
        """The pool the first append makes, for K/V of geometry ``g`` (checked by ``_check_append``)."""
        return BlockPool(self._initial_blocks(self.capacity_tokens, self.block_size), self.block_size,
                         g.num_kv_heads, g.head_dim, v_head_dim=g.v_head_dim, dtype=g.dtype,
                         quantization=self.quantization, max_blocks=self.max_blocks)

    def append(self, keys: mx.array, values: mx.array) -> None:
        """Store ``keys`` [1, H, L, D] and ``values`` [1, H, L, Dv] after the current tokens."""
        g = self._check_append(keys, values)
        self.pool = pool = self._pool_for(g)
        size = self.block_size
        written = 0
        while written < g.tokens:
            block, within = divmod(self.offset + written, size)
            while len(self._table) <= block:
                if not pool.free_blocks:
                    pool.grow(next_pool_size(pool.num_blocks, self.max_blocks))
                self._table.append(pool.alloc())
                self._snapshot = None
            n = min(size - within, g.tokens - written)
            whole = n == g.tokens  # the common decode step: no slice needed
            k = keys if whole else keys[:, :, written:written + n, :]
            v = values if whole else values[:, :, written:written + n, :]
            pool.write_block(self._table[block], k, v, within)
            written += n
        self.offset += g.tokens

    # --- reads ------------------------------------------------------------

    def fetch(self) -> tuple[mx.array, mx.array]:
        """K [1, H, offset, D], V [1, H, offset, Dv] of the live prefix (dequantized when quantized)."""
        if self.pool is None:
            raise ValueError("the cache is empty: append before fetching")
        return self.view().fetch()

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Append, then return K/V of the live prefix exactly as a dense ``KVCache`` would."""
        self.append(keys, values)
        return self.fetch()

    def view(self) -> PagedAttentionView:
        """An immutable attention view of the current contents."""
        if self.pool is None:
            raise ValueError("the cache is empty: append before taking a view")
        if self._snapshot is None:  # converting the table costs ~us per entry: once per change, not per view
            self._snapshot = snapshot_table(self._table)
        return PagedAttentionView.of(self.pool, self._snapshot, self.offset, self.direct)

    def append_and_fetch(self, keys: mx.array, values: mx.array) -> PagedAttentionView:
        """Append, then return an attention view of the result (immune to later calls)."""
        self.append(keys, values)
        return self.view()

    def make_mask(self, tokens: int, window: int | None = None):
        """Mask for the next ``tokens`` queries (call before appending them); policy of ``impl.masks.cache_mask``."""
        return cache_mask(tokens, self.offset, window)

    # --- lifecycle --------------------------------------------------------

    def is_trimmable(self) -> bool:
        return True

    def trim(self, tokens: int) -> int:
        """Drop the last ``tokens`` tokens (0 <= tokens <= offset); blocks left empty return to the pool."""
        tokens = check_trim(tokens, self.offset)
        self.offset -= tokens
        keep = pool_blocks_for(self.offset, self.block_size)
        while len(self._table) > keep:
            self.pool.free(self._table.pop())
            self._snapshot = None
        return tokens

    def state(self) -> list[mx.array]:
        """The pool's planes (what a prefill boundary evaluates), or [] before the first append."""
        return self.pool.arrays() if self.pool is not None else []

    @property
    def nbytes(self) -> int:
        return self.pool.nbytes if self.pool is not None else 0

    def clone(self) -> "PagedKVCache":
        """An independent cache: later writes to either never show in the other."""
        copy = PagedKVCache(self.capacity_tokens, self.block_size, self.direct, self.quantization,
                            max_blocks=self.max_blocks)
        copy.offset = self.offset
        copy._table = list(self._table)
        copy.pool = self.pool.clone() if self.pool is not None else None
        return copy

    def __repr__(self) -> str:
        return (f"PagedKVCache(offset={self.offset}, block_size={self.block_size}, blocks={len(self._table)}, "
                f"direct={self.direct}, quantization={self.quantization})")
