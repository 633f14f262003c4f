"""Attention views: what ``append_and_fetch`` returns.

A ``PagedAttentionView`` is a frozen snapshot of one sequence's paged K/V at
one moment: the pool's arrays as they were (the pool replaces its arrays on
every write and never writes into them, so holding them is holding a
snapshot), a frozen copy of the block table (``impl.block_table.BlockTable``: host, device
and the kernels' padded copy; a cache hands consecutive views one copy until a block is added or freed), the live ``length`` and the
``direct`` flag. It carries the same attribute names as ``BlockPool``
(``keys``, ``values``, ``key_scales``, ..., ``block_size``, ``head_dim``,
``v_head_dim``, ``dtype``, ``quantization``) so the paged-attention kernel can
read either. Later appends, trims, row filtering, pool growth or dropping the
cache cannot change what a view reads.

``attend(q, scale, mask=None, arm=None)``, q [1, Hq, n, head_dim]:

* control path (the numerical oracle of the seed): not ``direct``, or n > 8,
  or ``mask`` is an array, or ``mask`` is None with n > 1 (None means "no
  causal mask", which the direct kernel cannot express): gather the blocks
  through the table, slice to ``length``, dequantize when quantized, then
  ``mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)``.
* direct path (``direct`` and n <= 8 and mask "causal", or None with n == 1):
  ``impl.paged_attention.paged_attention(q, self, table, self.length,
  scale=scale, arm=arm)`` (``table``: the host copy of the block table when
  the view has one, so validating it never reads the device), which reads the blocks in place and
  applies bottom-right causal masking (query i sees keys <= length - n + i).

``RowsAttentionView`` is the batched form (one ``PagedAttentionView`` per row
of a ``PagedKvRows``): it attends row by row and stacks the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from impl.arms import resolve_arm
from impl.block_table import BlockTable
from impl.checks import check_int, check_mask, check_mask_shape, check_scale

from .pool import _gather_planes, table_array
from .quantization import Quantization
from .validation import check_array

DIRECT_MAX_QUERIES = 8  # the direct kernel's query-row limit (speculative verify sizes)


def snapshot_table(table) -> BlockTable:
    """``table`` (a sequence of ints or a 1-D NumPy array) frozen for views: host, device and the kernels' padded
    copy."""
    if isinstance(table, (str, bytes)) or not isinstance(table, (Sequence, np.ndarray)):
        raise TypeError(f"table must be a sequence of ints or a 1-D NumPy array, got {type(table).__name__}")
    return BlockTable.of([check_int("table entry", i) for i in table], name="table")


POOL_FIELDS = ("keys", "values", "key_scales", "key_biases", "value_scales", "value_biases", "num_blocks",
               "block_size", "num_kv_heads", "head_dim", "v_head_dim", "dtype", "quantization")


@dataclass(frozen=True, eq=False)
class PagedAttentionView:
    """Immutable snapshot of one sequence's paged K/V; see the module docstring."""

    keys: mx.array
    values: mx.array
    key_scales: mx.array | None
    key_biases: mx.array | None
    value_scales: mx.array | None
    value_biases: mx.array | None
    block_table: mx.array  # int32 [blocks], logical block i -> physical block
    length: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    dtype: mx.Dtype
    quantization: Quantization | None
    direct: bool
    # The same table frozen (host, device, padded) when it was built from ints: the direct kernel
    # checks it in O(1) and reads its padded device copy, instead of reading block_table back from
    # the device (on a GPU a synchronization, once per layer and step) and converting it again.
    frozen_table: BlockTable | None = None

    @property
    def host_block_table(self) -> np.ndarray | None:
        """Read-only int32 host copy of ``block_table`` (None when the view was built from an mx.array)."""
        return None if self.frozen_table is None else self.frozen_table.host

    @classmethod
    def of(cls, pool, table, length: int, direct: bool) -> "PagedAttentionView":
        """Snapshot ``pool``'s current arrays with a copy of ``table`` (ints, an mx.array, or a
        ``BlockTable``: a frozen copy already made, which a cache reuses while its table is unchanged).
        Every entry must name one of ``pool``'s blocks (an mx.array table is read back for that), ``length``
        lie in [0, len(table) * block_size] and ``direct`` be a bool: a view never reads outside its pool."""
        missing = [name for name in POOL_FIELDS if not hasattr(pool, name)]
        if missing:
            raise TypeError(f"pool must be a BlockPool (its planes and geometry); "
                            f"{type(pool).__name__} lacks {missing}")
        if isinstance(table, BlockTable):
            frozen, device_table = table, table.device
        elif isinstance(table, mx.array):
            frozen, device_table = None, table_array(table)
        else:
            frozen = snapshot_table(table)
            device_table = frozen.device
        if frozen is not None:
            frozen.check_pool(pool.num_blocks, name="table")
        elif device_table.size and mx.max(device_table).item() >= pool.num_blocks:
            raise ValueError(f"table entry {mx.max(device_table).item()} is outside the pool's {pool.num_blocks} blocks")
        length = check_int("length", length, minimum=0, maximum=device_table.size * pool.block_size)
        if not isinstance(direct, bool):
            raise TypeError(f"direct must be a bool, got {type(direct).__name__}")
        return cls(keys=pool.keys, values=pool.values, key_scales=pool.key_scales, key_biases=pool.key_biases,
                   value_scales=pool.value_scales, value_biases=pool.value_biases,
                   block_table=device_table, length=length, block_size=pool.block_size,
                   num_kv_heads=pool.num_kv_heads, head_dim=pool.head_dim, v_head_dim=pool.v_head_dim,
                   dtype=pool.dtype, quantization=pool.quantization, direct=direct,
                   frozen_table=frozen)

    def arrays(self) -> list[mx.array]:
        planes = (self.keys, self.values, self.key_scales, self.key_biases, self.value_scales, self.value_biases)
        return [p for p in planes if p is not None]

    def fetch(self) -> tuple[mx.array, mx.array]:
        """K [1, H, length, head_dim], V [1, H, length, v_head_dim] in ``dtype`` (dequantized)."""
        return _gather_planes(self, self.block_table, self.length)  # table and length checked by ``of``

    def uses_direct(self, queries: int, mask) -> bool:
        """Whether ``attend`` with ``queries`` rows and ``mask`` takes the direct kernel."""
        if not self.direct or queries > DIRECT_MAX_QUERIES or isinstance(mask, mx.array):
            return False
        return mask == "causal" or (mask is None and queries == 1)

    def attend(self, q: mx.array, scale: float, mask=None, arm: str | None = None) -> mx.array:
        """Attention of ``q`` [1, Hq, n, head_dim] over this view: [1, Hq, n, v_head_dim] in q's dtype.

        Both paths take the same arguments and refuse the same ones (q's dtype must be the view's, ``scale``
        finite, ``arm`` one this machine runs, an array ``mask`` one that broadcasts to [1, Hq, n, length] and
        promotes to the view's dtype, at least one query head, ``length`` >= 1, and with "causal" 1 <= n <= length)."""
        check_array("q", q)
        if q.ndim != 4 or q.shape[0] != 1 or q.shape[3] != self.head_dim:
            raise ValueError(f"q must be [1, Hq, n, {self.head_dim}], got {tuple(q.shape)}")
        if q.shape[1] < 1 or q.shape[1] % self.num_kv_heads:
            raise ValueError(f"q has {q.shape[1]} heads, not a positive multiple of the {self.num_kv_heads} kv heads")
        if q.dtype != self.dtype:
            raise ValueError(f"q has dtype {q.dtype} but the cache holds {self.dtype}")
        scale = check_scale(scale)
        resolve_arm(arm)
        check_mask(mask)
        check_mask_shape(mask, (1, q.shape[1], q.shape[2], self.length), self.dtype)
        # What the direct kernel refuses, refused on the control path too (the same call must not depend on direct):
        if self.length < 1:
            raise ValueError("length=0: the view holds no keys to attend")
        if isinstance(mask, str) and not 1 <= q.shape[2] <= self.length:
            raise ValueError(f"q has n={q.shape[2]} query rows; a causal mask needs 1 <= n <= length={self.length}")
        if self.uses_direct(q.shape[2], mask):
            # Imported here: the kernel module is optional for the control path.
            from impl.paged_attention import paged_attention

            table = self.block_table if self.frozen_table is None else self.frozen_table
            return paged_attention(q, self, table, self.length, scale=scale, arm=arm)
        k, v = self.fetch()
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)


@dataclass(frozen=True, eq=False)
class RowsAttentionView:
    """One ``PagedAttentionView`` per batch row; row b is left-padded by ``left_pad[b]`` in batched masks."""

    rows: tuple[PagedAttentionView, ...]
    left_pad: tuple[int, ...]

    def __post_init__(self):
        if not isinstance(self.rows, tuple) or not all(isinstance(v, PagedAttentionView) for v in self.rows):
            raise TypeError(f"rows must be a tuple of PagedAttentionView, got {type(self.rows).__name__}")
        if not isinstance(self.left_pad, (tuple, list)):
            raise TypeError(f"left_pad must be a tuple of ints, got {type(self.left_pad).__name__}")
        if len(self.left_pad) != len(self.rows):
            raise ValueError(f"left_pad must hold one pad per row ({len(self.rows)}), got {len(self.left_pad)}")
        pads = tuple(check_int(f"left_pad[{b}]", pad, minimum=0) for b, pad in enumerate(self.left_pad))
        object.__setattr__(self, "left_pad", pads)  # frozen: Python ints, whatever integers came in

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    def row_mask(self, mask, row: int):
        """Row ``row``'s share of a batched mask: its batch slice, left-padded key columns dropped.

        A mask array [B, 1, n, total] (or one broadcast to every row: 2-D or
        batch 1) becomes [.., n, total - left_pad[row]], the row's own keys.
        A mask broadcast along the keys (last axis 1, or 0-d) stays as it is:
        it has no padded column to drop.
        """
        row = check_int("row", row, minimum=0, maximum=self.batch_size - 1)
        check_mask(mask)
        if not isinstance(mask, mx.array):
            return mask
        if mask.ndim == 4 and mask.shape[0] == self.batch_size and self.batch_size > 1:
            mask = mask[row:row + 1]
        if mask.ndim == 0 or mask.shape[-1] == 1:
            return mask
        return mask[..., self.left_pad[row]:]

    def attend(self, q: mx.array, scale: float, mask=None, arm: str | None = None) -> mx.array:
        """q [B, Hq, n, D] -> [B, Hq, n, Dv]: each row attends its own view."""
        check_array("q", q)
        if q.ndim != 4 or q.shape[0] != self.batch_size:
            raise ValueError(f"q must be [{self.batch_size}, Hq, n, D], got {tuple(q.shape)}")
        check_mask(mask)
        if not self.rows:
            raise ValueError("the view has no rows to attend")
        if isinstance(mask, mx.array):  # the batch's mask: [B or 1, .., n, every row's padded keys]
            keys = self.rows[0].length + self.left_pad[0]
            check_mask_shape(mask, (self.batch_size, q.shape[1], q.shape[2], keys))
        outputs = [view.attend(q[b:b + 1], scale, self.row_mask(mask, b), arm) for b, view in enumerate(self.rows)]
        return mx.concatenate(outputs, axis=0)
