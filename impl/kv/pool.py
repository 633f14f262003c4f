"""``BlockPool``: one layer's paged K/V storage (vLLM-style blocks).

Layout (the contract the paged-attention kernel reads):

* ``keys``   [num_blocks, num_kv_heads, block_size, head_dim]    in ``dtype``
* ``values`` [num_blocks, num_kv_heads, block_size, v_head_dim]  in ``dtype``

With ``quantization`` (affine, ``bits`` 4|8, ``group_size``) the same token
rows are stored as ``mx.quantize`` planes instead:

* ``keys`` / ``values``  uint32 [..., head_dim * bits / 32]
* ``key_scales``, ``key_biases``, ``value_scales``, ``value_biases``
  in ``dtype``, [..., head_dim / group_size] (v_head_dim for the value planes);
  ``None`` when the pool is not quantized.

Physical block ``p`` holds ``block_size`` consecutive token rows of one
sequence; the owner's block table maps logical block ``i`` to ``p``.

Immutability: every write replaces an array attribute with a new array
(``mx.slice_update`` / ``mx.concatenate``); nothing ever assigns into a pool
array in place. A view or clone that holds the old arrays therefore keeps
reading the old bytes, and MLX still writes in place (buffer donation) when
nothing else holds the array. In-place ``pool.keys[...] = x`` is forbidden: in
MLX Python it rewrites that array object for every holder.

Free list: a LIFO stack. A new pool hands out 0, 1, 2, ... (low indices first,
a deterministic layout for tests); ``free`` pushes, so the block freed last is
handed out next; ``grow`` pushes the new blocks so the lowest new index comes
out first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from impl.checks import MAX_EXTENT

from .errors import PoolExhausted
from .quantization import Quantization, check_quantization
from .validation import check_array, check_dtype, check_int, kv_geometry

PLANE_NAMES = ("keys", "values", "key_scales", "key_biases", "value_scales", "value_biases")


def pool_blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``tokens`` token rows: ceil(tokens / block_size)."""
    check_int("tokens", tokens, minimum=0)
    check_int("block_size", block_size, minimum=1)
    return -(-tokens // block_size)


def next_pool_size(num_blocks: int, max_blocks: int | None = None) -> int:
    """The growth policy: x1.5 rounded up, at least one more block, capped at ``max_blocks`` (which a pool of
    ``num_blocks`` has not passed: the policy never shrinks a pool)."""
    num_blocks = check_int("num_blocks", num_blocks, minimum=0)
    if max_blocks is not None:
        max_blocks = check_int("max_blocks", max_blocks, minimum=num_blocks)
    size = max(num_blocks + 1, math.ceil(num_blocks * 1.5))
    return size if max_blocks is None else min(size, max_blocks)


def grown_size(pool: "BlockPool", needed: int, max_blocks: int | None = None) -> int:
    """The pool's ``num_blocks`` once ``needed`` more blocks are taken, growing by ``next_pool_size`` whenever
    the free list is empty (so, for ``needed`` past what ``max_blocks`` allows, ``max_blocks``)."""
    num, free = pool.num_blocks, pool.free_blocks
    while free < needed and (max_blocks is None or num < max_blocks):
        size = next_pool_size(num, max_blocks)
        free, num = free + size - num, size
    return num


def gather_blocks(plane: mx.array, table) -> mx.array:
    """Blocks ``table`` of ``plane`` [N, H, bs, W] laid end to end: [1, H, len(table) * bs, W].

    Pure data movement (take + transpose + reshape), so the bytes are the
    stored ones: a paged fetch is bit-identical to a dense cache's. ``table``'s
    entries are checked to be blocks of ``plane`` (``mx.take`` does not check).
    """
    plane = check_array("plane", plane)
    if plane.ndim != 4:
        raise ValueError(f"plane must be [blocks, heads, block_size, width], got shape {tuple(plane.shape)}")
    return _gather_blocks(plane, _block_ids(table, plane.shape[0]))


def _block_ids(table, num_blocks: int) -> mx.array:
    """``table`` as int32 block ids, each in [0, num_blocks)."""
    idx = table_array(table)
    if idx.size and (mx.min(idx).item() < 0 or mx.max(idx).item() >= num_blocks):
        raise ValueError(f"table entries must lie in [0, {num_blocks}), got {idx.tolist()}")
    return idx


def _gather_blocks(plane: mx.array, table: mx.array) -> mx.array:
    """``gather_blocks`` for callers whose table is already checked against the pool."""
    _, heads, block_size, width = plane.shape
    picked = mx.take(plane, table, axis=0)
    return picked.transpose(1, 0, 2, 3).reshape(1, heads, table.size * block_size, width)


INT32_MAX = 2**31 - 1


def table_array(table) -> mx.array:
    """A block table as int32 [n] (from a sequence of ints or an integer mx.array or NumPy array). Entries are
    block indices: checked to be >= 0 and to fit int32 before the cast (an int64 2**32 would become block 0)."""
    if isinstance(table, np.ndarray):
        if table.ndim != 1 or not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"table must be a 1-D integer array, got {table.dtype} {table.shape}")
        if table.size and (table.min() < 0 or table.max() > INT32_MAX):
            raise ValueError(f"table entries must be block indices in [0, {INT32_MAX}], "
                             f"got range [{table.min()}, {table.max()}]")
        return mx.array(table.astype(np.int32))
    if isinstance(table, mx.array):
        if table.ndim != 1 or not mx.issubdtype(table.dtype, mx.integer):
            raise ValueError(f"table must be a 1-D integer array, got {table.dtype} {tuple(table.shape)}")
        if table.size:
            low, high = mx.min(table).item(), mx.max(table).item()
            if low < 0 or high > INT32_MAX:
                raise ValueError(f"table entries must be block indices in [0, {INT32_MAX}], got range [{low}, {high}]")
        return table.astype(mx.int32)
    if not isinstance(table, Sequence) or isinstance(table, (str, bytes)):
        raise TypeError(f"table must be a sequence of ints or an mx.array, got {type(table).__name__}")
    return mx.array([check_int("table entry", i, minimum=0, maximum=INT32_MAX) for i in table], dtype=mx.int32)


# MLX counts an array's elements and bytes in 64 bits: a pool past MAX_POOL_BYTES wraps that count (a plane of
# 2**64 elements reports nbytes 0) and its first write faults. The sizes that reach it are refused by name.
MAX_POOL_BYTES = 2**63 - 1


class BlockPool:
    """Fixed-size block storage for one layer; see the module docstring for the layout."""

    def __init__(self, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, *,
                 v_head_dim: int | None = None, dtype=mx.float16, quantization: Quantization | None = None,
                 max_blocks: int | None = None):
        # Each check returns the value as a Python int (a NumPy integer passes the check but must not be
        # stored: it would reach mx.array([...], dtype=mx.int32) later, which refuses it).
        # Every extent at most MAX_EXTENT (MLX's int32 shapes).
        num_blocks = check_int("num_blocks", num_blocks, minimum=0, maximum=MAX_EXTENT)
        block_size = check_int("block_size", block_size, minimum=1, maximum=MAX_EXTENT)
        num_kv_heads = check_int("num_kv_heads", num_kv_heads, minimum=1, maximum=MAX_EXTENT)
        head_dim = check_int("head_dim", head_dim, minimum=1, maximum=MAX_EXTENT)
        v_head_dim = head_dim if v_head_dim is None else check_int("v_head_dim", v_head_dim, minimum=1,
                                                                   maximum=MAX_EXTENT)
        check_dtype("dtype", dtype)
        check_quantization(quantization)
        if quantization is not None:
            quantization.check_divides(head_dim, "head_dim")
            quantization.check_divides(v_head_dim, "v_head_dim")
        if max_blocks is not None:
            max_blocks = check_int("max_blocks", max_blocks, minimum=1, maximum=MAX_EXTENT)
            if num_blocks > max_blocks:
                raise ValueError(f"num_blocks={num_blocks} exceeds max_blocks={max_blocks}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.v_head_dim = v_head_dim
        self.dtype = dtype
        self.quantization = quantization
        self.max_blocks = max_blocks
        self._check_bytes("num_blocks", num_blocks)
        planes = self._zero_planes(num_blocks)
        self.keys, self.values, self.key_scales, self.key_biases, self.value_scales, self.value_biases = planes
        self._free = list(range(num_blocks - 1, -1, -1))
        self._free_set = set(self._free)

    # --- geometry ---------------------------------------------------------

    def _zero_planes(self, blocks: int) -> list[mx.array | None]:
        """Zero-filled planes for ``blocks`` blocks (zeros dequantize to 0: scale 0, bias 0)."""
        lead = (blocks, self.num_kv_heads, self.block_size)
        q = self.quantization
        if q is None:
            return [mx.zeros(lead + (self.head_dim,), self.dtype), mx.zeros(lead + (self.v_head_dim,), self.dtype),
                    None, None, None, None]
        kd, vd = self.head_dim, self.v_head_dim
        return [mx.zeros(lead + (kd // q.pack,), mx.uint32), mx.zeros(lead + (vd // q.pack,), mx.uint32),
                mx.zeros(lead + (kd // q.group_size,), self.dtype), mx.zeros(lead + (kd // q.group_size,), self.dtype),
                mx.zeros(lead + (vd // q.group_size,), self.dtype), mx.zeros(lead + (vd // q.group_size,), self.dtype)]

    def arrays(self) -> list[mx.array]:
        """Every stored plane: [keys, values] (+ [key_scales, key_biases, value_scales, value_biases])."""
        planes = [getattr(self, name) for name in PLANE_NAMES]
        return [p for p in planes if p is not None]

    @property
    def nbytes(self) -> int:
        """Bytes of every stored plane (packed + scales + biases when quantized)."""
        return sum(a.nbytes for a in self.arrays())

    @property
    def bytes_per_block(self) -> int:
        lead = self.num_kv_heads * self.block_size
        q, itemsize = self.quantization, self.dtype.size
        if q is None:
            return lead * (self.head_dim + self.v_head_dim) * itemsize
        words = (self.head_dim + self.v_head_dim) // q.pack
        groups = (self.head_dim + self.v_head_dim) // q.group_size
        return lead * (words * 4 + 2 * groups * itemsize)

    def _check_bytes(self, name: str, blocks: int) -> None:
        """ValueError naming ``name`` when ``blocks`` blocks of this geometry pass ``MAX_POOL_BYTES``."""
        if blocks * self.bytes_per_block > MAX_POOL_BYTES:
            raise ValueError(f"{name}={blocks} blocks of {self.bytes_per_block} bytes ({self.num_kv_heads} kv heads x "
                             f"{self.block_size} tokens x head dims {self.head_dim}, {self.v_head_dim}) pass "
                             f"MAX_POOL_BYTES={MAX_POOL_BYTES}: MLX counts an array's bytes in 64 bits")

    # --- allocation -------------------------------------------------------

    @property
    def free_blocks(self) -> int:
        return len(self._free)

    @property
    def free_list(self) -> tuple[int, ...]:
        """The free stack, bottom first (the last entry is handed out next)."""
        return tuple(self._free)

    def is_free(self, block: int) -> bool:
        """Whether ``block`` (one of the pool's blocks) is on the free list."""
        return self._check_block("block", block) in self._free_set

    def alloc(self) -> int:
        """Pop a free block; PoolExhausted when none is left (callers grow first)."""
        if not self._free:
            raise PoolExhausted(needed=1, available=0, max_blocks=self.max_blocks)
        block = self._free.pop()
        self._free_set.discard(block)
        return block

    def free(self, block: int) -> None:
        """Return ``block`` to the free list; its data stays until it is rewritten."""
        block = self._check_block("block", block)
        if block in self._free_set:
            raise ValueError(f"block {block} is already free")
        self._free.append(block)
        self._free_set.add(block)

    def check_grow(self, blocks: int) -> int:
        """``blocks`` as a Python int when ``grow(blocks)`` would succeed (memory aside): an int within
        ``MAX_EXTENT``, ``max_blocks`` (else PoolExhausted) and ``MAX_POOL_BYTES``. Callers that take blocks in
        a loop check the size they will reach first, so a failure comes before any block is taken."""
        blocks = check_int("blocks", blocks, minimum=0, maximum=MAX_EXTENT)
        if blocks <= self.num_blocks:
            return blocks
        if self.max_blocks is not None and blocks > self.max_blocks:
            raise PoolExhausted(needed=blocks - self.num_blocks,
                                available=self.max_blocks - self.num_blocks, max_blocks=self.max_blocks)
        self._check_bytes("blocks", blocks)
        return blocks

    def grow(self, blocks: int) -> None:
        """Grow to ``blocks`` blocks (no-op when not larger): written values stay, new blocks go on the free list."""
        blocks = self.check_grow(blocks)
        if blocks <= self.num_blocks:
            return
        # Everything new is built before anything is assigned: a grow that fails (memory) leaves the pool as it was.
        extra = self._zero_planes(blocks - self.num_blocks)
        planes = {name: mx.concatenate([getattr(self, name), tail], axis=0)
                  for name, tail in zip(PLANE_NAMES, extra) if tail is not None}
        new = list(range(blocks - 1, self.num_blocks - 1, -1))
        free, free_set = self._free + new, self._free_set.union(new)
        for name, plane in planes.items():
            setattr(self, name, plane)
        self._free, self._free_set, self.num_blocks = free, free_set, blocks

    # --- data -------------------------------------------------------------

    def _check_block(self, name: str, block) -> int:
        return check_int(name, block, minimum=0, maximum=self.num_blocks - 1)

    def write_block(self, phys: int, k: mx.array, v: mx.array, within: int) -> None:
        """Write token rows ``k`` [1, H, l, D], ``v`` [1, H, l, Dv] at rows ``within..within+l`` of block ``phys``.

        ``phys`` must be allocated, ``within + l <= block_size`` and the rows must
        have the pool's heads, head dims and dtype. Quantized pools store
        ``mx.quantize`` of the incoming rows.
        """
        phys = self._check_block("phys", phys)
        if phys in self._free_set:
            raise ValueError(f"phys={phys} is a free block; alloc() it before writing")
        g = kv_geometry(k, v)
        if g.batch != 1:
            raise ValueError(f"k must hold one sequence (batch 1), got batch {g.batch}")
        if (g.num_kv_heads, g.head_dim, g.v_head_dim) != (self.num_kv_heads, self.head_dim, self.v_head_dim):
            raise ValueError(f"k/v heads and head dims {(g.num_kv_heads, g.head_dim, g.v_head_dim)} differ from the "
                             f"pool's {(self.num_kv_heads, self.head_dim, self.v_head_dim)}")
        if g.dtype != self.dtype:
            raise ValueError(f"k dtype {g.dtype} differs from the pool dtype {self.dtype}")
        within = check_int("within", within, minimum=0)
        if within + g.tokens > self.block_size:
            raise ValueError(f"within={within} + {g.tokens} rows exceeds block_size={self.block_size}")
        start = mx.array([phys, 0, within, 0], dtype=mx.int32)
        if self.quantization is None:
            updates = {"keys": k, "values": v}
        else:
            kq, vq = self.quantization.quantize(k), self.quantization.quantize(v)
            updates = dict(zip(PLANE_NAMES, (kq[0], vq[0], kq[1], kq[2], vq[1], vq[2])))
        for name, update in updates.items():
            setattr(self, name, mx.slice_update(getattr(self, name), update, start, axes=(0, 1, 2, 3)))

    def gather(self, table) -> tuple[mx.array, mx.array]:
        """K, V of the blocks in ``table`` end to end: [1, H, len(table) * block_size, D / Dv].

        Full blocks (the caller slices to its length); dequantized (to ``dtype``)
        when the pool is quantized.
        """
        return _gather_planes(self, _block_ids(table, self.num_blocks))

    # --- ownership --------------------------------------------------------

    def clone(self) -> "BlockPool":
        """An independent pool: same arrays (safe to share, writes are functional), own free list."""
        copy = object.__new__(BlockPool)
        copy.__dict__.update(self.__dict__)
        copy._free = list(self._free)
        copy._free_set = set(self._free_set)
        return copy

    def restore_arrays(self, arrays: Sequence[mx.array], occupied: Sequence[int]) -> None:
        """Adopt ``arrays`` (as ``arrays()`` returns them) and rebuild the free list as all but ``occupied``.

        Shapes and dtypes must equal the current planes'. The rebuilt free list
        hands out low indices first.
        """
        current = self.arrays()
        if isinstance(arrays, (str, bytes)) or not isinstance(arrays, Sequence):
            raise TypeError(f"arrays must be a sequence of {len(current)} planes, got {type(arrays).__name__}")
        if len(arrays) != len(current):
            raise ValueError(f"arrays must hold {len(current)} planes "
                             f"({', '.join(PLANE_NAMES[:len(current)])}), got {len(arrays)}")
        for name, new, old in zip(PLANE_NAMES, arrays, current):
            check_array(f"arrays[{name}]", new)
            if tuple(new.shape) != tuple(old.shape) or new.dtype != old.dtype:
                raise ValueError(f"arrays[{name}] is {new.dtype} {tuple(new.shape)}, "
                                 f"the pool holds {old.dtype} {tuple(old.shape)}")
        if isinstance(occupied, (str, bytes)) or not isinstance(occupied, Sequence):
            raise TypeError(f"occupied must be a sequence of block indices, got {type(occupied).__name__}")
        used = {self._check_block("occupied entry", b) for b in occupied}
        if len(used) != len(occupied):
            raise ValueError(f"occupied holds repeated blocks: {list(occupied)}")
        for name, new in zip(PLANE_NAMES, arrays):
            setattr(self, name, new)
        self._free = [b for b in range(self.num_blocks - 1, -1, -1) if b not in used]
        self._free_set = set(self._free)

    def __repr__(self) -> str:
        q = "" if self.quantization is None else f", quantization={self.quantization}"
        return (f"BlockPool(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"num_kv_heads={self.num_kv_heads}, head_dim={self.head_dim}, v_head_dim={self.v_head_dim}, "
                f"dtype={self.dtype}{q}, free={self.free_blocks})")


def gather_planes(storage, table, length: int | None = None) -> tuple[mx.array, mx.array]:
    """K, V of ``table``'s blocks from anything with the pool's plane attributes (a pool or a view).

    ``length`` keeps only the first ``length`` token rows (sliced before
    dequantizing, so rows past it are never decoded).
    """
    missing = [a for a in (*PLANE_NAMES, "quantization", "block_size", "num_kv_heads", "head_dim", "v_head_dim",
                           "dtype") if not hasattr(storage, a)]
    if missing:
        raise TypeError(f"storage must have a pool's planes and geometry; {type(storage).__name__} lacks {missing}")
    idx = _block_ids(table, check_array("storage.keys", storage.keys).shape[0])
    if length is not None:
        length = check_int("length", length, minimum=0, maximum=idx.size * storage.block_size)
    return _gather_planes(storage, idx, length)


def _gather_planes(storage, table: mx.array, length: int | None = None) -> tuple[mx.array, mx.array]:
    """``gather_planes`` for callers whose table and length are already checked against the storage."""

    def read(name: str) -> mx.array:
        rows = _gather_blocks(getattr(storage, name), table)
        return rows if length is None else rows[:, :, :length, :]

    q = storage.quantization
    if q is None:
        return read("keys"), read("values")
    rows = table.size * storage.block_size if length is None else length
    if rows == 0:  # mx.dequantize cannot reshape an empty array; nothing to decode anyway
        empty = (1, storage.num_kv_heads, 0)
        return mx.zeros(empty + (storage.head_dim,), storage.dtype), mx.zeros(empty + (storage.v_head_dim,), storage.dtype)
    return (q.dequantize(read("keys"), read("key_scales"), read("key_biases")),
            q.dequantize(read("values"), read("value_scales"), read("value_biases")))
