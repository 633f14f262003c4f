"""``PagedKvRows``: a batch of independent sequences, each a ``PagedKVCache`` with its own pool.

Row membership is the only thing this class owns: ``merge_rows`` replaces the
rows with clones of its sources (so ``rows.merge_rows([rows, other])``
appends ``other``), ``filter_rows`` keeps (and reorders) rows, dropping only
the others, ``extract_row`` hands out an independent clone. No scheduling.

Batched reads: rows have different lengths. ``update_and_fetch`` returns
[B, H, offset, D] with row b LEFT-padded by ``left_pad[b] = offset -
row_offset[b]`` positions of ZEROS (mlx-lm's BatchKVCache convention); the
padding is never visible through ``make_mask``, which hides row b's first
``left_pad[b]`` keys. ``append_and_fetch`` returns a ``RowsAttentionView``
(one immutable view per row, no padding at all). ``rope_offsets`` gives each
row's own position for RoPE.

Mask policy (``make_mask(tokens, window)``, called before the append):
with views (direct or quantized) and no window: None for one token, else
"causal" (each row is attended on its own, bottom-right aligned); a single
row: that row's own policy; otherwise ``batched_decode_mask``.

Every mutator validates every row's part before changing any row.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from impl.checks import MAX_EXTENT
from impl.masks import batched_decode_mask

from .paged import PagedKVCache, check_capacity
from .pool import pool_blocks_for
from .quantization import Quantization, check_quantization
from .validation import check_array, check_dtype, check_int, check_trim, kv_geometry
from .view import RowsAttentionView

PAD_VALUE = 0.0  # value of the left padding update_and_fetch inserts


def merge_kv_rows(rows: Sequence[tuple[mx.array, mx.array]]) -> tuple[mx.array, mx.array]:
    """Stack per-row (K [1, H, L_b, D], V [1, H, L_b, Dv]) into [B, H, max L, D], left-padded with zeros."""
    if not isinstance(rows, Sequence) or isinstance(rows, (str, bytes)):
        raise TypeError(f"rows must be a non-empty sequence of (K, V) pairs, got {type(rows).__name__}")
    if not rows:
        raise ValueError("rows must hold at least one (K, V) pair, got none")
    for b, pair in enumerate(rows):
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise TypeError(f"rows[{b}] must be a (K, V) pair, got {type(pair).__name__}")
        for name, a, first in zip("KV", pair, rows[0]):
            check_array(f"rows[{b}] {name}", a)
            check_dtype(f"rows[{b}] {name}'s dtype", a.dtype)  # a cache's rows: what a pool stores
            if a.ndim != 4 or a.shape[0] != 1 or (a.shape[1], a.shape[3], a.dtype) != (first.shape[1], first.shape[3],
                                                                                   first.dtype):
                raise ValueError(f"rows[{b}] {name} must be [1, H, L, D] with rows[0]'s H, D and dtype, got "
                                 f"{a.dtype} {tuple(a.shape)} against {first.dtype} {tuple(first.shape)}")
        if pair[0].dtype != pair[1].dtype:
            raise ValueError(f"rows[{b}]'s K and V must share a dtype, got {pair[0].dtype} and {pair[1].dtype}")
        if pair[0].shape[1:3] != pair[1].shape[1:3]:
            raise ValueError(f"rows[{b}]'s K and V must have the same heads and tokens, got "
                             f"{tuple(pair[0].shape)} and {tuple(pair[1].shape)}")
    longest = max(k.shape[2] for k, _ in rows)

    def pad(a: mx.array) -> mx.array:
        missing = longest - a.shape[2]
        return mx.pad(a, [(0, 0), (0, 0), (missing, 0), (0, 0)], constant_values=PAD_VALUE) if missing else a

    return (mx.concatenate([pad(k) for k, _ in rows], axis=0),
            mx.concatenate([pad(v) for _, v in rows], axis=0))


class PagedKvRows:
    """Batch of ``PagedKVCache`` rows; see the module docstring."""

    def __init__(self, capacity_tokens: int, block_size: int, direct: bool = False,
                 quantization: Quantization | None = None):
        capacity_tokens, block_size = check_capacity(capacity_tokens, block_size)  # what each row's cache checks
        if not isinstance(direct, bool):
            raise TypeError(f"direct must be a bool, got {type(direct).__name__}")
        check_quantization(quantization)
        self.capacity_tokens = capacity_tokens
        self.block_size = block_size
        self.direct = direct
        self.quantization = quantization
        self._rows: list[PagedKVCache] = []

    @property
    def signature(self) -> str:
        return "kv:paged-rows"

    @property
    def rows(self) -> tuple[PagedKVCache, ...]:
        """The row caches themselves (not copies), in batch order."""
        return tuple(self._rows)

    @property
    def batch_size(self) -> int:
        return len(self._rows)

    @property
    def offset(self) -> int:
        """The longest row's length (0 without rows)."""
        return max((row.offset for row in self._rows), default=0)

    @property
    def row_offsets(self) -> list[int]:
        return [row.offset for row in self._rows]

    @property
    def left_pad(self) -> list[int]:
        width = self.offset
        return [width - row.offset for row in self._rows]

    @property
    def rope_offsets(self) -> mx.array:
        """int32 [B]: each row's next position (its own offset), for per-row RoPE."""
        return mx.array(self.row_offsets, dtype=mx.int32)

    @property
    def attention_state(self) -> "PagedKvRows | None":
        """This batch when attention should go through ``append_and_fetch`` views (direct or quantized)."""
        return self if self.direct or self.quantization is not None else None

    def make_empty_batch(self) -> "PagedKvRows":
        return PagedKvRows(self.capacity_tokens, self.block_size, self.direct, self.quantization)

    # --- membership -------------------------------------------------------

    def merge_rows(self, rows: Sequence) -> None:
        """Replace the rows with clones of ``rows`` (each a PagedKvRows or a PagedKVCache), in order.

        Sources must share this batch's block_size and quantization (and, once
        they hold tokens, kv heads, head dims and dtype); each row keeps its own
        ``direct`` flag. Any other cache kind is a TypeError; nothing changes on
        error.
        """
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
            raise TypeError(f"rows must be a sequence of caches, got {type(rows).__name__}")
        sources: list[PagedKVCache] = []
        for i, source in enumerate(rows):
            if isinstance(source, PagedKvRows):
                sources.extend(source._rows)
            elif isinstance(source, PagedKVCache):
                sources.append(source)
            else:
                kind = getattr(source, "signature", type(source).__name__)
                raise TypeError(f"rows[{i}]: paged rows cannot merge a {kind} "
                                f"({type(source).__name__}); only PagedKVCache and PagedKvRows")
        for i, source in enumerate(sources):
            if source.block_size != self.block_size or source.quantization != self.quantization:
                raise ValueError(f"rows: row {i} has block_size={source.block_size}, "
                                 f"quantization={source.quantization}; this batch uses "
                                 f"block_size={self.block_size}, quantization={self.quantization}")
        pools = [s.pool for s in sources if s.pool is not None]
        shapes = {(p.num_kv_heads, p.head_dim, p.v_head_dim, p.dtype) for p in pools}
        if len(shapes) > 1:
            raise ValueError(f"rows: rows disagree on (kv heads, head_dim, v_head_dim, dtype): {sorted(map(str, shapes))}")
        self._rows = [source.clone() for source in sources]

    def extract_row(self, row: int) -> PagedKVCache:
        """An independent clone of row ``row``."""
        check_int("row", row, minimum=0, maximum=self.batch_size - 1)
        return self._rows[row].clone()

    def filter_rows(self, keep: Sequence[int]) -> None:
        """Keep rows ``keep`` (in that order, no repeats); the others are dropped."""
        if isinstance(keep, (str, bytes)) or not isinstance(keep, Sequence):
            raise TypeError(f"keep must be a sequence of row indices, got {type(keep).__name__}")
        for index in keep:
            check_int("keep entry", index, minimum=0, maximum=self.batch_size - 1)
        if len(set(keep)) != len(keep):
            raise ValueError(f"keep repeats a row: {list(keep)}")
        self._rows = [self._rows[i] for i in keep]

    # --- writes and reads -------------------------------------------------

    def _split(self, keys, values) -> list[tuple[mx.array, mx.array]]:
        """Per-row (k, v) slices after validating the whole batch against every row."""
        g = kv_geometry(keys, values)
        if g.batch != self.batch_size:
            raise ValueError(f"keys has batch {g.batch}, the cache holds {self.batch_size} rows")
        parts = [(keys[b:b + 1], values[b:b + 1]) for b in range(g.batch)]
        for row, (k, v) in zip(self._rows, parts):
            row._check_append(k, v)
        return parts

    def append(self, keys: mx.array, values: mx.array) -> None:
        """Append keys [B, H, L, D] / values [B, H, L, Dv]: L new tokens to every row."""
        parts = self._split(keys, values)
        # Every row's pool exists and its growth is checked before any row is written: a pool that cannot be made
        # (memory, size) fails here, and the pools this call made are dropped again, so a failed append changes
        # no row.
        made = []
        try:
            for row, (k, v) in zip(self._rows, parts):
                pool = row._pool_for(kv_geometry(k, v))
                if row.pool is None:
                    row.pool = pool
                    made.append(row)
        except BaseException:
            for row in made:
                row.pool = None
            raise
        for row, (k, v) in zip(self._rows, parts):
            row.append(k, v)

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        """Append, then K [B, H, offset, D], V [B, H, offset, Dv], rows left-padded with zeros."""
        self.append(keys, values)
        return self.fetch()

    def fetch(self) -> tuple[mx.array, mx.array]:
        """K [B, H, offset, D], V [B, H, offset, Dv], rows left-padded with zeros. A row that never had an
        append holds no token: it is all padding, like a row trimmed to 0."""
        if not self._rows:
            raise ValueError("the batch has no rows")
        if len(self._rows) == 1:
            return self._rows[0].fetch()
        fetched = [row.fetch() if row.pool is not None else None for row in self._rows]
        shape_of = next((kv for kv in fetched if kv is not None), None)
        if shape_of is None:
            raise ValueError("the cache is empty: append before fetching (no row holds a pool yet)")

        def empty(a: mx.array) -> mx.array:
            return mx.zeros((1, a.shape[1], 0, a.shape[3]), a.dtype)

        return merge_kv_rows([kv if kv is not None else (empty(shape_of[0]), empty(shape_of[1])) for kv in fetched])

    def append_and_fetch(self, keys: mx.array, values: mx.array) -> RowsAttentionView:
        """Append, then one immutable attention view per row."""
        self.append(keys, values)
        return RowsAttentionView(tuple(row.view() for row in self._rows), tuple(self.left_pad))

    def make_mask(self, tokens: int, window: int | None = None):
        """Mask for the next ``tokens`` queries of every row (call before appending them)."""
        check_int("tokens", tokens, minimum=1)
        if window is not None:
            check_int("window", window, minimum=1)
        if self.attention_state is not None and window is None:
            return None if tokens == 1 else "causal"
        if len(self._rows) == 1:
            return self._rows[0].make_mask(tokens, window)
        if self.offset + tokens > MAX_EXTENT:  # (batched_decode_mask would name its total)
            raise ValueError(f"tokens={tokens} after the batch's {self.offset} puts positions past MLX's int32 "
                             f"({MAX_EXTENT})")
        return batched_decode_mask(self.batch_size, tokens, self.offset + tokens, self.left_pad, window)

    # --- lifecycle --------------------------------------------------------

    def is_trimmable(self) -> bool:
        return True

    def trim(self, tokens: int) -> int:
        """Drop the last ``tokens`` tokens of every row (at most the shortest row's length)."""
        tokens = check_trim(tokens, min(self.row_offsets, default=0))
        for row in self._rows:
            row.trim(tokens)
        return tokens

    def state(self) -> list[mx.array]:
        return [a for row in self._rows for a in row.state()]

    def projected_bytes(self, tokens: int) -> int:
        """Bytes one row's pool needs for ``tokens`` tokens: blocks x (packed + scales + biases, K and V)."""
        check_int("tokens", tokens, minimum=0)
        pool = next((row.pool for row in self._rows if row.pool is not None), None)
        if pool is None:
            return 0
        return pool_blocks_for(tokens, self.block_size) * pool.bytes_per_block

    def __repr__(self) -> str:
        return f"PagedKvRows(rows={self.row_offsets}, block_size={self.block_size}, quantization={self.quantization})"
