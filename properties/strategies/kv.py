"""Strategies and test helpers for the KV caches (``impl.kv``).

Token data is built by NumPy from a drawn seed (drawing every element through
Hypothesis would be slow and shrink poorly); what Hypothesis draws is the
structure: block size, geometry, dtype, quantization and the append schedule,
whose lengths cluster around block edges (1, bs - 1, bs, bs + 1, k * bs + 1),
where a paged cache splits writes and allocates blocks.

Helpers:

* ``random_kv(seed, spec, tokens, batch=1)``: K [B, H, L, D], V [B, H, L, Dv]
  in the spec's dtype.
* ``stored_rows(spec, k)``: what a cache must give back for rows ``k``: the
  rows themselves, or for quantized pools their ``mx.dequantize(mx.quantize(k))``, computed by ``reference.quant``
  (bit-exact to it, and independent of the cache's own wrapper).
* ``poison_unused_slots(cache)``: replaces every pool slot that is not part of
  the live prefix (free blocks, the unused tail of the last block, slots
  freed by trim) with NaN, functionally (new arrays; views are untouched), so
  any read past the live length shows up as NaN. Quantized pools get NaN
  scales and biases (and all-ones packed words) there.
* ``host_bytes(a)``: NumPy copy of an MLX array (bf16 kept via ml_dtypes).
* ``assert_bytes(actual, expected, what)``: same dtype, shape and bytes.
* ``assert_accounting(cache, what)``: the block-table / free-list invariants.
* ``young_heap()``: a context in which ``gc.collect()`` scans only what was made
  inside it (for tests that must see their own garbage gone).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import mlx.core as mx
import numpy as np
from hypothesis import strategies as st

from impl.kv import PagedKVCache, PagedKvRows, Quantization, pool_blocks_for
from reference import quant as ref_quant
from reference.metrics import to_numpy

__all__ = [
    "BLOCK_SIZES", "KV_DTYPES_BY_NAME", "KV_QUANTIZATIONS", "KvSpec", "append_schedules", "assert_accounting",
    "assert_bytes", "block_edge_lengths",
    "host_bytes", "kv_specs", "poison_unused_slots", "random_kv", "stored_rows", "young_heap",
]

BLOCK_SIZES = (1, 2, 8, 16, 32, 64)
KV_DTYPES_BY_NAME = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}
KV_QUANTIZATIONS = (Quantization(4, 32), Quantization(8, 32), Quantization(4, 64), Quantization(8, 64))
HEAD_DIMS = (32, 64)  # the smallest MLX quantization group is 32, so every head dim is quantizable
MAX_KV_HEADS = 2


@dataclass(frozen=True)
class KvSpec:
    """Geometry of one cache: kv heads, head dims, dtype, quantization."""

    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    dtype_name: str
    quantization: Quantization | None = None

    @property
    def dtype(self) -> mx.Dtype:
        return KV_DTYPES_BY_NAME[self.dtype_name]

    @property
    def id(self) -> str:
        q = "" if self.quantization is None else f"-q{self.quantization.bits}g{self.quantization.group_size}"
        return f"{self.dtype_name}-h{self.num_kv_heads}-d{self.head_dim}v{self.v_head_dim}{q}"


@st.composite
def kv_specs(draw, dtypes=tuple(KV_DTYPES_BY_NAME), quantized: bool | None = False) -> KvSpec:
    """A KvSpec; ``quantized`` True/False forces it, None draws it."""
    if quantized is None:
        quantized = draw(st.booleans())
    head_dim = draw(st.sampled_from(HEAD_DIMS))
    v_head_dim = draw(st.sampled_from(HEAD_DIMS))
    quantization = None
    if quantized:
        quantization = draw(st.sampled_from([q for q in KV_QUANTIZATIONS
                                             if head_dim % q.group_size == 0 and v_head_dim % q.group_size == 0]))
    return KvSpec(draw(st.integers(1, MAX_KV_HEADS)), head_dim, v_head_dim, draw(st.sampled_from(dtypes)),
                  quantization)


def block_edge_lengths(block_size: int, max_multiple: int = 3) -> st.SearchStrategy[int]:
    """Append lengths at and around block edges: 1, bs - 1, bs, bs + 1, k * bs + 1 (k <= max_multiple)."""
    edges = {1, block_size - 1, block_size, block_size + 1}
    edges |= {k * block_size + 1 for k in range(2, max_multiple + 1)}
    return st.sampled_from(sorted(e for e in edges if e >= 1))


@st.composite
def append_schedules(draw, block_size: int, max_tokens: int = 192, max_appends: int = 8) -> list[int]:
    """A list of append lengths (each around a block edge, or small) totalling at most ``max_tokens``."""
    lengths = st.one_of(block_edge_lengths(block_size), st.integers(1, 4))
    schedule, total = [], 0
    for _ in range(draw(st.integers(1, max_appends))):
        n = draw(lengths)
        if total + n > max_tokens:
            break
        schedule.append(n)
        total += n
    return schedule or [1]


def random_kv(seed: int, spec: KvSpec, tokens: int, batch: int = 1) -> tuple[mx.array, mx.array]:
    """K [batch, H, tokens, D], V [batch, H, tokens, Dv]: standard normal values rounded to the spec dtype."""
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((batch, spec.num_kv_heads, tokens, spec.head_dim), dtype=np.float32)
    v = rng.standard_normal((batch, spec.num_kv_heads, tokens, spec.v_head_dim), dtype=np.float32)
    return mx.array(k).astype(spec.dtype), mx.array(v).astype(spec.dtype)


def stored_rows(spec: KvSpec, rows: mx.array) -> mx.array:
    """What a cache with ``spec`` returns for ``rows``: themselves, or their quantize -> dequantize computed by the
    independent oracle ``reference.quant`` (bit-exact to MLX's; not ``impl.kv.Quantization``, the wrapper the cache
    itself calls: a model built from it would agree with any bug of it), as an mx.array in the rows' dtype."""
    q = spec.quantization
    if q is None:
        return rows
    planes = ref_quant.quantize(to_numpy(rows), group_size=q.group_size, bits=q.bits)
    decoded = ref_quant.dequantize(*planes, group_size=q.group_size, bits=q.bits)
    return mx.array(decoded.astype(np.float32)).astype(rows.dtype)  # (via float32: exact for every KV dtype)


def host_bytes(a: mx.array) -> np.ndarray:
    return to_numpy(a)


def _live_slots(cache: PagedKVCache) -> np.ndarray:
    """bool [num_blocks, 1, block_size, 1]: True at the slots holding the cache's live tokens."""
    pool = cache.pool
    live = np.zeros((pool.num_blocks, 1, pool.block_size, 1), dtype=bool)
    for token in range(cache.offset):
        live[cache.block_table[token // pool.block_size], 0, token % pool.block_size, 0] = True
    return live


def poison_unused_slots(cache) -> None:
    """NaN (functionally) every pool slot outside the live prefix of ``cache`` (or of every row)."""
    if isinstance(cache, PagedKvRows):
        for row in cache.rows:
            poison_unused_slots(row)
        return
    pool = cache.pool
    if pool is None:
        return
    live = mx.array(_live_slots(cache))
    nan = mx.array(float("nan"), dtype=pool.dtype)
    if pool.quantization is None:
        pool.keys = mx.where(live, pool.keys, nan)
        pool.values = mx.where(live, pool.values, nan)
        return
    ones = mx.array(0xFFFFFFFF, dtype=mx.uint32)
    pool.keys = mx.where(live, pool.keys, ones)
    pool.values = mx.where(live, pool.values, ones)
    for name in ("key_scales", "key_biases", "value_scales", "value_biases"):
        setattr(pool, name, mx.where(live, getattr(pool, name), nan))


def assert_bytes(actual: mx.array, expected: np.ndarray, what: str) -> None:
    got = host_bytes(actual)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (
        f"{what}: got {got.dtype} {got.shape}, expected {expected.dtype} {expected.shape}")
    differs = got.view(np.uint8) != expected.view(np.uint8)
    assert not differs.any(), f"{what}: {int(differs.sum())} bytes differ; first at byte {np.flatnonzero(differs)[0]}"


def assert_accounting(cache: PagedKVCache, what: str) -> None:
    table = cache.block_table
    assert len(table) == pool_blocks_for(cache.offset, cache.block_size), f"{what}: table {table} vs {cache.offset}"
    if cache.pool is None:
        return
    assert len(set(table)) == len(table), f"{what}: block handed out twice: {table}"
    assert not any(cache.pool.is_free(b) for b in table), f"{what}: table block on the free list"
    assert cache.pool.free_blocks + len(table) == cache.pool.num_blocks, f"{what}: free + used != num_blocks"
    assert len(set(cache.pool.free_list)) == cache.pool.free_blocks, f"{what}: free list repeats a block"


@contextmanager
def young_heap() -> Iterator[None]:
    """Within it, ``gc.collect()`` scans only the objects made since entry.

    Everything older (modules, Hypothesis's engine, earlier tests' data) waits in gc's permanent generation
    (``gc.freeze``) until exit, then is collectable again. A test that drops a cache and needs its cycles gone (views
    outliving their source, active memory after release) pays for its own objects, not for the worker's whole heap:
    a full collection in a suite worker took ~0.25 s, 25 of them per stateful machine example run.
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
