"""Direct paged attention: a few query rows read K/V blocks in place through a block table.

Contract (the seed's ``pagedAttentionView.attend`` direct path, mlx-bun 0.5.0
``paged-attention.ts`` / @mlx-bun/inference ``kernels/attention/paged.ts``)::

    paged_attention(q, storage, block_table, length, *, scale, arm=None, partition=None) -> [1, Hq, n, Dv]

* ``q`` [1, Hq, n, Dk], 1 <= n <= 8 (``DIRECT_MAX_QUERIES``; longer prefills
  belong to ``paged_attention_gather``), dtype float32 / float16 / bfloat16
  equal to ``storage.dtype``. Output in q's dtype.
* ``storage``: any ``PagedStorage`` (``impl.kv``'s ``BlockPool`` and its
  attention views, or plain arrays in a dataclass): ``keys`` [num_blocks, Hkv,
  block_size, Dk] and ``values`` [..., Dv] in ``dtype``, or, when
  ``quantization`` (affine, bits 4|8, ``group_size`` 32|64|128) is set, uint32 planes
  [..., D*bits/32] with ``*_scales`` / ``*_biases`` [..., D/group_size] in ``dtype``.
  A plain pool's ``keys`` / ``values`` start a multiple of 8 elements into
  their buffer: the partials read a lane's 4 or 8 elements with one load, and
  CUDA's ring copies 16-byte chunks. An array MLX allocates does, and so does
  every slice of one along blocks or heads, and along tokens when the head dim
  is a multiple of 8; a row-contiguous view with another offset
  (``flat[1:].reshape(...)``) is outside the contract. Its start is an address
  MLX does not expose before a launch, so no call can check it (a misaligned
  load faults on CUDA). Quantized planes are read by words and take any start.
* ``block_table``: an ``impl.block_table.BlockTable`` (checked and frozen once, e.g. per
  decode step: then a call checks it against the pool in O(1)), or 1-D ints (list, NumPy or
  mx.array: checked entry by entry per call; an mx.array is read back to the host for that);
  token t lives in slot ``t % block_size`` of physical block ``block_table[t // block_size]``.
* ``length``: live tokens, n <= length <= len(table) * block_size (and the pool's
  capacity). Bottom-right causal: query i sees tokens j <= length - n + i.
  Nothing at or past ``length`` is read: unused slots may hold anything, NaN included.
* GQA/MQA: query head h reads KV head h // (Hq / Hkv).
* Any pool size is eligible, the smallest too. An input of fewer than 8
  elements (K or V of a block or two of one KV head with a few dims; a small
  q, block table or scale / bias plane; the merge's partials of such a call)
  is what MLX passes to a Metal kernel in the ``constant`` address space
  instead of ``device`` (``max_constant_array_size``): the partial reads
  such K/V rows element by element (the constant-space overloads of
  ``load4`` / ``load8`` in ``paged_attention.h``: Metal makes no device
  pointer of a constant one), every other input is read by element anyway.
  Same numbers.
* Eligibility is validated before any launch; bad input raises ValueError /
  TypeError naming the argument. On a compiled arm with a frozen ``BlockTable``
  the checks run once per argument signature (``impl.recent_calls``).

Two partial bodies, one contract: plain bfloat16 / float16 pools whose head dims are multiples of 16
up to 128 take the matrix partial (``partial_matrix.metal``: the products on the SIMD groups' matrix
units; ``launch.matrix_eligible``), every other pool the SIMT partial (``partial.metal``); both feed
the same merge, and ``set_matrix_partial(False)`` puts the SIMT body on every pool (sweeps, its tests).
On the cuda arm the matrix partial takes its K / V through a ring of steps copied ahead by cp.async
where ``launch.ring_slots`` allows (K and V head dims equal and a multiple of 64; ``launch.MATRIX_RING``'s
comment has its figures; ``set_matrix_ring(0)`` puts register loads back, as Metal always has them); the
outputs are bit-identical to the register fetch's (``test_dense_pool_ring``).

The package: ``launch`` holds the kernels (the algorithm, the launch geometry, the specs and the
launches, over the bodies ``partial.metal``, ``partial_matrix.metal`` and ``merge.metal`` beside it), ``graph`` the graph arm
(the same computation in MLX ops, and where it differs), and this module the contract: the checks,
the call and the gather control.

Arms: ``metal`` / ``cuda`` compile the bodies (``launch``), ``graph`` runs MLX ops (``graph``). On a
compiled arm partial + merge run as one ``mx.compile``d pair per launch shape (``_plan`` remembers it
with the device [scale, length, partition] geometry per call shape; every ``set_*`` choice forgets the
plans and pairs traced before it, and ``forget_with_plans`` lets other callers' caches follow), and the
block table's device copies come with the ``BlockTable`` (raw tables are converted once per distinct
content, ``impl.block_table.freeze``): host-side work cost more than the kernels at N = 32k on the H200
(55 us of Python per call there before; a call with a BlockTable now costs ~3 us of Python here plus the
compiled call). The table is padded to a power of two and the partition buffers rounded up likewise, so
a growing sequence retraces rarely.

Gates: ``parity/test_paged_attention.py`` (error ratio against the float64
oracle ``reference.attention.attention_ref`` with FlashAttention's factor 2 and
the naive low-precision baseline, a KL gate through a fixed LM head; quantized
pools against the oracle on the dequantized K/V and against
``paged_attention_gather``); ``parity/test_small_inputs.py`` (the oracle
gate at pools, q and scale planes of fewer than 8 elements: Metal's constant
space); ``properties/test_paged_attention_props.py``
(Hypothesis: head layouts, head dims, block sizes, lengths across block and
partition edges, permuted tables, NaN-poisoned unused slots, KV4/KV8). The matrix partial holds
``test_dense_pool``'s 16-bit cases at head dims up to 128, the SIMT body the same cases under
``test_dense_pool_simt_partial``. The CUDA arm's record on an NVIDIA H200: ``records/h200-cuda/``
(``matrix-partial/`` for these bodies).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Protocol, runtime_checkable

import mlx.core as mx
import numpy as np

from impl.arms import resolve_arm
from impl.block_table import BlockTable, freeze
from impl.checks import check_int, check_mask, check_mask_shape, check_scale
from impl.kv.quantization import SUPPORTED_GROUP_SIZES
from impl.kernels import KernelSpec, Launch
from impl.recent_calls import RecentCalls, array_key, scalar_key

from . import launch
from .graph import graph_attention
# The kernels' names, re-exported: callers and tests read them here (``impl.paged_attention.PARTIAL``, ...).
from .launch import (HEADER, KVQ4, MATRIX_MAX_DIM, MATRIX_MIN_PARTITION, MATRIX_PARTIAL, MAX_ROWS, MERGE, PAGED, PARTIAL,
                     PARTITION_QUANTUM, QUANTIZED_MIN_PARTITION,
                     QUANTIZED_PARTIAL, QUANTIZED_TARGET_THREADGROUPS, SIMD, SIMDGROUPS, STRIDED_PARTIAL,
                     THREADGROUP_MEMORY, Layout, _CACHE_SIZE, _geometry, _partial_shape,
                     _quant_key, _span_of, merge_batch, ring_slots, merge_launch, pack_partials, partial_launch, partial_shape, partition_size,
                     matrix_eligible, matrix_rows_per_threadgroup, partition_span, rows_per_threadgroup,
                     single_block_table, strided_partial_launch)

__all__ = [
    "DIRECT_MAX_LENGTH",
    "DIRECT_MAX_QUERIES",
    "PAGED_DTYPES",
    "MATRIX_MAX_DIM",
    "MATRIX_MIN_PARTITION",
    "MATRIX_PARTIAL",
    "MAX_ROWS",
    "PARTITION_QUANTUM",
    "SIMDGROUPS",
    "QUANTIZED_MIN_PARTITION",
    "QUANTIZED_TARGET_THREADGROUPS",
    "TARGET_THREADGROUPS",
    "PagedStorage",
    "QUANTIZED_BITS",
    "QUANTIZED_GROUP_SIZES",
    "forget_with_plans",
    "merge_batch",
    "merge_launch",
    "paged_attention",
    "paged_attention_gather",
    "partial_launch",
    "pack_partials",
    "partial_shape",
    "partition_size",
    "partition_span",
    "single_block_table",
    "strided_partial_launch",
    "graph_attention",
    "Layout",
    "PAGED",
    "KVQ4",
    "matrix_eligible",
    "matrix_rows_per_threadgroup",
    "rows_per_threadgroup",
    "set_lane_map",
    "set_matrix_partial",
    "set_matrix_ring",
    "set_merge",
    "set_threadgroup_target",
]

DIRECT_MAX_QUERIES = 8
DIRECT_MAX_LENGTH = 2**24  # the kernels read the length from a float32 (exact integers below 2**24)
PAGED_DTYPES = (mx.bfloat16, mx.float16, mx.float32)
QUANTIZED_BITS = (4, 8)
QUANTIZED_GROUP_SIZES = SUPPORTED_GROUP_SIZES  # 32, 64, 128: those of impl.kv.Quantization


@runtime_checkable
class PagedStorage(Protocol):
    """What paged attention reads (``impl.kv.BlockPool`` and its views have these attributes)."""

    keys: mx.array  # [num_blocks, Hkv, block_size, Dk] in dtype, or uint32 [..., Dk*bits/32]
    values: mx.array  # [num_blocks, Hkv, block_size, Dv] in dtype, or uint32 [..., Dv*bits/32]
    key_scales: mx.array | None  # [num_blocks, Hkv, block_size, Dk/group] in dtype, quantized only
    key_biases: mx.array | None
    value_scales: mx.array | None  # [..., Dv/group]
    value_biases: mx.array | None
    block_size: int
    head_dim: int
    v_head_dim: int
    dtype: mx.Dtype
    quantization: object | None  # None, or has .bits in {4, 8} and .group_size


def set_matrix_partial(enabled: bool = True, token_tiles: int = 1) -> None:
    """Choose ``USE_MATRIX_PARTIAL`` and ``MATRIX_TOKEN_TILES`` for later calls (sweeps, tests: the SIMT body on a
    shape the matrix partial would take) and forget the launch shapes and plans remembered under the previous one."""
    launch.choose_matrix_partial(enabled, token_tiles)
    _forget_plans()


def set_lane_map(lanes_per_row: int | None = SIMD, wide_loads: bool = True) -> None:
    """Choose ``LANES_PER_ROW`` and ``WIDE_LOADS`` for later calls (sweeps, tests) and forget the
    launch shapes and plans remembered under the previous choice."""
    launch.choose_lane_map(lanes_per_row, wide_loads)
    _forget_plans()


def set_threadgroup_target(threadgroups: int) -> None:
    """Choose ``TARGET_THREADGROUPS`` for later calls' default partitions (sweeps: the kept 512 against others,
    records/h200-cuda/partition-target/) and forget the plans remembered under the previous one."""
    launch.choose_threadgroup_target(threadgroups)
    _forget_plans()


def set_matrix_ring(slots: int = 0) -> None:
    """Choose ``MATRIX_RING``, the matrix partial's ring fetch on CUDA (0: register loads; 2-4 slots), for later
    calls (sweeps, tests) and forget the plans remembered under the previous one."""
    launch.choose_matrix_ring(slots)
    _forget_plans()


def set_merge(slices: int = 32, batch: int = 8) -> None:
    """Choose ``MERGE_SLICES`` and ``MERGE_BATCH``, the merge's slices per output row and the partitions a slice reads
    at once (``launch.merge_batch``), for later calls (sweeps), and forget the plans remembered under the previous
    choice."""
    launch.choose_merge(slices, batch)
    _forget_plans()


_FORGETTING: list[Callable[[], None]] = []  # other callers' caches forgotten with the plans (forget_with_plans)


def forget_with_plans(forget: Callable[[], None]) -> None:
    """Have ``forget`` run whenever a ``set_*`` choice forgets the plans: a module that traces these kernels' launches
    into compiled calls of its own (kvq4_decode's direct body) hands its cache's clear here, since a traced call
    holds the launches of the choice it was traced under (the merge's slices, the partition target, the lane map)."""
    if not callable(forget):
        raise TypeError(f"forget must be callable, got {type(forget).__name__}")
    _FORGETTING.append(forget)


def _forget_plans() -> None:
    """Forget every compiled plan: the remembered plans, the compiled pairs (a pair holds the merge's launch as it was
    traced: ``set_merge``), and the recent calls that hold one (a recent call replays its plan without asking for it
    again, so a plan made under the previous choice would run on); then what ``forget_with_plans`` was handed."""
    _compiled_pair.cache_clear()
    _plan.cache_clear()
    _RECENT.clear()
    for forget in _FORGETTING:
        forget()


def __getattr__(name: str):
    """``LANES_PER_ROW``, ``WIDE_LOADS``, ``USE_MATRIX_PARTIAL``, ``MATRIX_TOKEN_TILES``, ``TARGET_THREADGROUPS`` and
    ``MATRIX_RING`` are read where they live (``launch``, which ``set_lane_map`` / ``set_matrix_partial`` /
    ``set_threadgroup_target`` / ``set_matrix_ring`` change), never from a copy taken at import."""
    if name in ("LANES_PER_ROW", "WIDE_LOADS", "USE_MATRIX_PARTIAL", "MATRIX_TOKEN_TILES", "TARGET_THREADGROUPS",
                "MATRIX_RING"):
        return getattr(launch, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- validation -------------------------------------------------------------


def _check_plane(name: str, array, shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    if not isinstance(array, mx.array):
        raise TypeError(f"storage.{name} must be an mx.array, got {type(array).__name__}")
    if tuple(array.shape) != shape:
        raise ValueError(f"storage.{name} must have shape {list(shape)}, got {list(array.shape)}")
    if array.dtype != dtype:
        raise ValueError(f"storage.{name} must have dtype {dtype}, got {array.dtype}")
    return array


_STORAGE_FIELDS = ("keys", "values", "block_size", "head_dim", "v_head_dim", "dtype", "quantization")


def _validate(q, storage, block_table, length, scale, *, direct: bool):
    """Checks everything a launch depends on; returns (BlockTable, scale float, planes, length int)."""
    if not isinstance(q, mx.array):
        raise TypeError(f"q must be an mx.array, got {type(q).__name__}")
    if q.ndim != 4 or q.shape[0] != 1:
        raise ValueError(f"q must have shape [1, Hq, n, Dk], got {list(q.shape)}")
    _, hq, n, dk = q.shape
    if hq < 1:
        raise ValueError(f"q must have at least one head, got shape {list(q.shape)}")
    missing = [field for field in _STORAGE_FIELDS if not hasattr(storage, field)]
    if missing:
        raise TypeError(f"storage must be a PagedStorage (a BlockPool, one of its views, or planes in a dataclass); "
                        f"{type(storage).__name__} has no {', '.join(missing)}")
    if direct and n > DIRECT_MAX_QUERIES:
        raise ValueError(f"q has n={n} query rows; the direct kernel takes at most {DIRECT_MAX_QUERIES}: "
                         "use paged_attention_gather (the gather + SDPA control) for longer prefills")
    if n < 1:
        raise ValueError("q must have at least one query row")
    scale = check_scale(scale)
    dtype = storage.dtype
    if not isinstance(dtype, mx.Dtype) or dtype not in PAGED_DTYPES:
        raise ValueError(f"storage.dtype must be one of {PAGED_DTYPES}, got {dtype}")
    if q.dtype != dtype:
        raise ValueError(f"q has dtype {q.dtype} but the pool's dtype (storage.dtype) is {dtype}")
    if not math.isfinite(_as_float32(scale)):  # the kernels read it from a float32 (geometry): inf would make NaN
        raise ValueError(f"scale={scale!r} is not finite as a float32 (the kernels apply it in float32)")
    block_size = check_int("storage.block_size", storage.block_size, minimum=1)
    head_dim = check_int("storage.head_dim", storage.head_dim, minimum=1)
    v_head_dim = check_int("storage.v_head_dim", storage.v_head_dim, minimum=1)
    if dk != head_dim:
        raise ValueError(f"q has Dk={dk} but storage.head_dim is {head_dim}")
    keys, values = storage.keys, storage.values
    if not isinstance(keys, mx.array):
        raise TypeError(f"storage.keys must be an mx.array [num_blocks, Hkv, block_size, width], got {type(keys).__name__}")
    if keys.ndim != 4:
        raise ValueError(f"storage.keys must be an mx.array [num_blocks, Hkv, block_size, width], got {list(keys.shape)}")
    num_blocks, hkv = keys.shape[0], keys.shape[1]
    if hkv < 1 or hq % hkv:
        raise ValueError(f"q has Hq={hq} heads, not a multiple of the pool's Hkv={hkv}")
    quant = storage.quantization
    if quant is None:
        _check_plane("keys", keys, (num_blocks, hkv, block_size, head_dim), dtype)
        _check_plane("values", values, (num_blocks, hkv, block_size, v_head_dim), dtype)
        planes = ()
    else:
        bits = getattr(quant, "bits", None)
        group = getattr(quant, "group_size", None)
        if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits not in QUANTIZED_BITS:
            raise ValueError(f"storage.quantization.bits must be one of {QUANTIZED_BITS}, got {bits!r}")
        bits = int(bits)
        group = check_int("storage.quantization.group_size", group, minimum=1)
        # The group sizes MLX's affine quantization makes (the graph arm dequantizes with it) and the oracle
        # models (reference.quant.GROUP_SIZES): the one contract every arm holds. Each is a multiple of the
        # 8 or 4 values a word packs, so a lane's word never straddles two scale groups.
        if group not in QUANTIZED_GROUP_SIZES:
            raise ValueError(f"storage.quantization.group_size must be one of {QUANTIZED_GROUP_SIZES}, got {group}")
        for name, dim in (("head_dim", head_dim), ("v_head_dim", v_head_dim)):
            if dim % group:
                raise ValueError(f"storage.quantization.group_size={group} does not divide storage.{name}={dim}")
        pack = 32 // bits
        _check_plane("keys", keys, (num_blocks, hkv, block_size, head_dim // pack), mx.uint32)
        _check_plane("values", values, (num_blocks, hkv, block_size, v_head_dim // pack), mx.uint32)
        planes = tuple(
            _check_plane(name, getattr(storage, name), (num_blocks, hkv, block_size, dim // group), dtype)
            for name, dim in (("key_scales", head_dim), ("key_biases", head_dim),
                              ("value_scales", v_head_dim), ("value_biases", v_head_dim)))
    length = check_int("length", length, minimum=1)
    table = freeze(block_table)
    table.check_pool(num_blocks)
    if length < n:
        raise ValueError(f"length={length} is shorter than the n={n} query rows it must contain")
    if length > num_blocks * block_size:
        raise ValueError(f"length={length} exceeds the pool's capacity {num_blocks} blocks x {block_size}")
    needed = -(-length // block_size)
    if len(table) < needed:
        raise ValueError(f"block_table has {len(table)} blocks but length={length} needs {needed} "
                         f"of block_size {block_size}")
    if direct and length >= DIRECT_MAX_LENGTH:
        raise ValueError(f"length={length} must be below 2**24 for the direct kernel")
    return table, float(scale), planes, length


@lru_cache(maxsize=64)
def _as_float32(scale: float) -> float:
    """``scale`` rounded to float32 as the kernels' geometry holds it (on the CPU stream: no device wait)."""
    return mx.array(scale, dtype=mx.float32).astype(mx.float32, stream=mx.cpu).item()


# --- the call ---------------------------------------------------------------


def check_partition(partition) -> int | None:
    if partition is None:
        return None
    return check_int("partition", partition, minimum=1)


def paged_attention(q: mx.array, storage: PagedStorage, block_table, length: int, *, scale: float,
                    arm: str | None = None, partition: int | None = None) -> mx.array:
    """Causal attention of q's n <= 8 rows over the first ``length`` paged tokens (module docstring).

    ``partition``: tokens per partition; None chooses it from the length and the heads
    (``partition_size``). It partitions the softmax, so it is part of the numbers (rounding only).
    A partition of ``length`` tokens or more is the one partition, and is run as ``length``.
    """
    # A compiled arm's call whose arguments were validated before goes straight to its compiled pair
    # (impl.recent_calls: the checks cost the H200's host about a tenth of the call). A frozen BlockTable is
    # keyed by identity (it is immutable); a list or array takes the checks (freeze converts it once).
    key, plan = _RECENT.lookup(lambda: (resolve_arm(arm), array_key(q), _storage_key(storage),
                                        _table_key(block_table), scalar_key(length), scalar_key(scale),
                                        scalar_key(partition)))
    if plan is None:
        arm = resolve_arm(arm)
        table, scale, planes, length = _validate(q, storage, block_table, length, scale, direct=True)
        partition = check_partition(partition)
        if arm == "graph":
            return graph_attention(q, storage, table.device, length, scale,
                                   partition_span(q, storage, length, partition))
        # The table comes zero-padded to a power-of-two length (entries past length are never read), so the
        # compiled pair sees a new table shape only when the sequence doubles.
        _, hq, n, _ = q.shape
        pair, geometry = _plan(arm, hq, n, storage.keys.shape[1], storage.head_dim, storage.v_head_dim,
                               storage.block_size, storage.dtype, _quant_key(storage.quantization), length,
                               partition, scale)
        plan = _RECENT.remember(key, (pair, table.padded, geometry))
    else:
        planes = () if storage.quantization is None else tuple(getattr(storage, name) for name in _PLANE_NAMES)
    pair, padded, geometry = plan
    return pair(q, storage.keys, storage.values, padded, geometry, *planes)


_RECENT = RecentCalls(_CACHE_SIZE)  # validated (arm, arguments) -> (compiled pair, padded table, geometry)
_PLANE_NAMES = ("key_scales", "key_biases", "value_scales", "value_biases")


def _storage_key(storage) -> tuple:
    """What the checks read of ``storage``: its scalars, its planes' shapes and dtypes, its quantization."""
    quant = storage.quantization
    if quant is None:
        quantization = planes = None
    else:
        quantization = type(quant), scalar_key(quant.bits), scalar_key(quant.group_size)
        planes = tuple(array_key(getattr(storage, name)) for name in _PLANE_NAMES)
    return (type(storage), storage.dtype, scalar_key(storage.block_size), scalar_key(storage.head_dim),
            scalar_key(storage.v_head_dim), array_key(storage.keys), array_key(storage.values), quantization, planes)


def _table_key(block_table) -> BlockTable:
    if type(block_table) is not BlockTable:
        raise TypeError("only a frozen BlockTable is keyed")
    return block_table


@lru_cache(maxsize=256)
def _plan(arm: str, hq: int, n: int, hk: int, dk: int, dv: int, block_size: int, dtype: mx.Dtype,
          quant: tuple[int, int] | None, length: int, partition: int | None, scale: float):
    """(compiled partial + merge, device geometry) of one call's scalars. Every layer of a decode
    step makes the same call, so after the first only this lookup remains between the checks and
    the launch: the host cost per call on the H200 was more than the kernels' time at N = 32k."""
    span = _span_of(hq, n, hk, dk, dv, dtype, quant, length, partition)
    shape = _partial_shape(hq, n, hk, dk, dv, block_size, dtype, quant, length, span, PAGED,
                           ring_slots(arm, dk, dv, dtype, quant, PAGED, span))
    pair = _compiled_pair(arm, shape.spec, shape.template, shape.grid, shape.threadgroup, shape.output_shapes, dtype,
                          shape.shared_memory)
    return pair, _geometry(scale, length, span)


@lru_cache(maxsize=64)
def _compiled_pair(arm: str, spec: KernelSpec, template, grid, threadgroup, output_shapes, out_dtype: mx.Dtype,
                   shared_memory: int = 0):
    """Partial + merge as one ``mx.compile``d function per launch configuration.

    A call then replays the traced pair instead of building two custom-kernel primitives in
    Python (measured on the H200: 80-140 us of host time per call, more than the kernels' GPU
    time at N = 32k). The cache key is everything the trace closes over but the merge's launch, which
    reads MERGE_SLICES / MERGE_BATCH when the pair is traced: ``set_merge`` forgets the pairs instead
    (``_forget_plans``). mx.compile itself retraces when an input's shape or dtype changes.
    """

    def pair(*inputs):
        partial = Launch(spec, inputs, template, grid, threadgroup, output_shapes, (mx.float32,), shared_memory)
        (parts,) = partial.run(arm)
        (out,) = merge_launch(parts, inputs[4], out_dtype).run(arm)
        return out

    return mx.compile(pair)



# --- the gather + SDPA control ---------------------------------------------


def _gather(plane: mx.array, table: mx.array, length: int) -> mx.array:
    """Blocks of ``plane`` in table order as one [1, Hkv, length, width] sequence."""
    picked = mx.take(plane, table, axis=0)  # [blocks, Hkv, bs, width]
    hkv, width = plane.shape[1], plane.shape[3]
    return picked.transpose(1, 0, 2, 3).reshape(1, hkv, -1, width)[:, :, :length]


def paged_attention_gather(q: mx.array, storage: PagedStorage, block_table, length: int, *, scale: float,
                           mask=None) -> mx.array:
    """The seed's numerical control: gather the live blocks, (dequantize,) then MLX's fused SDPA.

    Any n; ``mask`` is passed to ``mx.fast.scaled_dot_product_attention``
    (None, ``"causal"`` for bottom-right causal, or a boolean or additive
    floating array that broadcasts to [1, Hq, n, length]; anything else is a
    TypeError / ValueError naming mask). Quantized pools go through
    ``mx.dequantize`` (affine), whose output dtype is the scales'.
    """
    check_mask(mask)
    table, scale, _, length = _validate(q, storage, block_table, length, scale, direct=False)
    check_mask_shape(mask, (1, q.shape[1], q.shape[2], length), q.dtype)
    table = table.device[:-(-length // storage.block_size)]  # the live blocks
    k, v = _gather(storage.keys, table, length), _gather(storage.values, table, length)
    quant = storage.quantization
    if quant is not None:
        planes = [_gather(getattr(storage, name), table, length)
                  for name in ("key_scales", "key_biases", "value_scales", "value_biases")]
        k = mx.dequantize(k, planes[0], planes[1], group_size=quant.group_size, bits=quant.bits)
        v = mx.dequantize(v, planes[2], planes[3], group_size=quant.group_size, bits=quant.bits)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)
