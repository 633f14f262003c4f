"""A block table checked once and frozen: what one decode step hands every layer's attention call.

A paged-attention call needs its block table three ways: on the host, to check every entry
against the pool before a launch (a table is trusted by nothing else: a bad entry would read
outside the pool); on the device unpadded, for the gather control; and on the device
zero-padded to a power of two, for the compiled kernels (a growing sequence then changes the
kernels' input shape only when its block count doubles). Building those from a list or NumPy
array costs microseconds per entry-batch and a host-to-device transfer: on the H200 that was
more than the kernel at N = 32k (``perf/RESULTS.md``). A decode step calls attention once per
layer with the same table, so ``BlockTable.of`` does the work once and every call reuses it:
``paged_attention`` then checks only the pool bounds against the precomputed extremes.

``BlockTable`` is immutable: its host array is read-only and MLX arrays are values, so sharing
one between views, layers and threads is safe. ``impl.kv``'s caches keep one per table state
and make a new one when a block is added or freed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from impl.checks import check_int

__all__ = ["BlockTable", "freeze", "padded_length"]

_INTEGER_DTYPES = (mx.int8, mx.int16, mx.int32, mx.int64, mx.uint8, mx.uint16, mx.uint32, mx.uint64)


def padded_length(count: int) -> int:
    """The power of two the kernels' table (and partition buffers) are padded to: >= count, >= 1."""
    count = check_int("count", count, minimum=0)
    return 1 << (max(count, 1) - 1).bit_length()


@dataclass(frozen=True, eq=False)
class BlockTable:
    """Logical block i lives in physical block ``host[i]``; see the module docstring."""

    host: np.ndarray  # read-only int32 [blocks]
    device: mx.array  # the same int32 entries on the device
    padded: mx.array  # int32 [padded_length(blocks)]: the entries, then zeros (never read)
    smallest: int  # min entry (0 for an empty table)
    largest: int  # max entry (-1 for an empty table)

    @classmethod
    def of(cls, entries, *, name: str = "block_table") -> "BlockTable":
        """A frozen copy of ``entries`` (a BlockTable, a sequence of ints, a 1-D integer NumPy or MLX
        array). Bad input raises TypeError / ValueError naming ``name``."""
        if isinstance(entries, BlockTable):
            return entries
        host = _host_ints(entries, name)
        if host.size and (host.min() < -2**31 or host.max() >= 2**31):
            raise ValueError(f"{name} entries must fit int32, got range [{host.min()}, {host.max()}]")
        host = host.astype(np.int32)  # a copy: later edits to the caller's array cannot reach it
        host.flags.writeable = False
        padded = np.zeros(padded_length(host.size), np.int32)
        padded[:host.size] = host
        smallest, largest = (int(host.min()), int(host.max())) if host.size else (0, -1)
        return cls(host, mx.array(host), mx.array(padded), smallest, largest)

    def __len__(self) -> int:
        return self.host.size

    def check_pool(self, num_blocks: int, *, name: str = "block_table") -> None:
        """Every entry names one of the pool's ``num_blocks`` blocks, else ValueError naming ``name``."""
        num_blocks = check_int("num_blocks", num_blocks, minimum=0)
        if self.smallest < 0 or self.largest >= num_blocks:
            bad = self.smallest if self.smallest < 0 else self.largest
            raise ValueError(f"{name} entry {bad} is outside the pool's {num_blocks} blocks")


def freeze(entries, *, name: str = "block_table") -> BlockTable:
    """``entries`` as a ``BlockTable``: a BlockTable as is; a 1-D integer list (no bools) or NumPy array converted
    once per distinct content (the conversion and its device copies are reused while the same entries
    come back: a caller that passes one list per layer pays one conversion and transfer per step);
    anything else converted (or refused) by ``BlockTable.of``."""
    if isinstance(entries, BlockTable):
        return entries
    try:
        host = None if isinstance(entries, mx.array) else np.asarray(entries)
    except (ValueError, TypeError, OverflowError):  # ragged nesting and the like: BlockTable.of names the argument
        host = None
    if (host is None or host.ndim != 1 or not np.issubdtype(host.dtype, np.integer)
            or (not isinstance(entries, np.ndarray) and _holds_bools(entries))):
        return BlockTable.of(entries, name=name)  # (NumPy makes [True, 1] ints: BlockTable.of refuses the bools)
    key = (host.dtype.str, host.tobytes())  # the dtype too: int64 2**32 + b has b's int32 bytes
    table = _FROZEN.get(key)
    if table is None:
        table = _FROZEN[key] = BlockTable.of(host, name=name)
        if len(_FROZEN) > _FROZEN_SIZE:
            _FROZEN.popitem(last=False)
    else:
        _FROZEN.move_to_end(key)
    return table


_FROZEN: OrderedDict = OrderedDict()  # recent conversions, least recently used first
_FROZEN_SIZE = 16  # a few sequences' tables per decode step


def _holds_bools(entries) -> bool:
    """Whether the sequence ``entries`` holds a bool (or NumPy bool): each distinct type asked once, at C speed."""
    return any(issubclass(kind, (bool, np.bool_)) for kind in set(map(type, entries)))


def _host_ints(entries, name: str) -> np.ndarray:
    """``entries`` as a 1-D NumPy integer array (not yet a copy)."""
    if isinstance(entries, mx.array):
        if entries.dtype not in _INTEGER_DTYPES:
            raise ValueError(f"{name} must hold integers, got dtype {entries.dtype}")
        host = np.array(entries)  # in its own dtype: uint64 past 2**63 must not wrap before the range check
    elif isinstance(entries, np.ndarray):
        host = entries if entries.size else entries.astype(np.int64)
    elif isinstance(entries, Sequence) and not isinstance(entries, (str, bytes)):
        if any(isinstance(entry, (bool, np.bool_)) for entry in entries):  # NumPy would make [True, 1] ints
            raise TypeError(f"{name} entries must be ints, not bools")
        try:
            host = np.asarray(entries) if len(entries) else np.zeros(0, np.int64)
        except (ValueError, TypeError, OverflowError) as error:  # ragged nesting, entries NumPy cannot hold
            raise ValueError(f"{name} must be a flat sequence of ints: {error}") from None
    else:
        raise TypeError(f"{name} must be a BlockTable, a sequence of ints or a 1-D integer array, "
                        f"got {type(entries).__name__}")
    if not np.issubdtype(host.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got dtype {host.dtype}")
    if host.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {host.shape}")
    return host
