"""Paged and dense KV caches (port of mlx-bun's lab/paged-kv).

* ``BlockPool`` (pool.py): per-layer block storage, optionally affine-quantized.
* ``PagedKVCache`` (paged.py): one sequence over a pool; bit-exact with ``KVCache``.
* ``PagedKvRows`` (rows.py): a batch of independent paged rows.
* ``KVCache`` (dense.py): the dense contiguous control.
* ``PagedAttentionView`` / ``RowsAttentionView`` (view.py): immutable attention snapshots.
* ``Quantization`` (quantization.py), ``PoolExhausted`` (errors.py).

Every array update is functional (no in-place ``a[...] = x``), so views,
clones and extracted rows never change after they are taken.
"""

from .dense import STEP, KVCache
from .errors import PoolExhausted
from .paged import PagedKVCache
from .pool import PLANE_NAMES, BlockPool, gather_blocks, gather_planes, next_pool_size, pool_blocks_for
from .quantization import SUPPORTED_BITS, SUPPORTED_GROUP_SIZES, Quantization
from .rows import PAD_VALUE, PagedKvRows, merge_kv_rows
from .validation import KV_DTYPES
from .view import DIRECT_MAX_QUERIES, PagedAttentionView, RowsAttentionView

__all__ = [
    "BlockPool", "DIRECT_MAX_QUERIES", "KVCache", "KV_DTYPES", "PAD_VALUE", "PLANE_NAMES", "PagedAttentionView",
    "PagedKVCache", "PagedKvRows", "PoolExhausted", "Quantization", "RowsAttentionView", "STEP",
    "SUPPORTED_BITS", "SUPPORTED_GROUP_SIZES", "gather_blocks", "gather_planes", "merge_kv_rows",
    "next_pool_size", "pool_blocks_for",
]
