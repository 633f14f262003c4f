"""Bad input to the KV caches: refused with ValueError / TypeError naming the argument, state untouched.

Each case builds a populated target (a PagedKVCache, a PagedKvRows, a
BlockPool, a KVCache), snapshots everything observable (offset, block table,
every pool plane's bytes, the free list, pool size, row offsets), makes the bad
call, and requires both the error (type and the argument's name in the
message) and an identical snapshot afterwards: every mutator validates before
it mutates.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

from impl.kv import BlockPool, KVCache, PagedKVCache, PagedKvRows, PoolExhausted, Quantization
from properties.strategies.kv import KvSpec, host_bytes, random_kv

SPEC = KvSpec(2, 32, 32, "float16")
QSPEC = KvSpec(2, 64, 64, "bfloat16", Quantization(4, 32))
BLOCK = 4


def kv(tokens=3, heads=2, dim=32, vdim=None, dtype=mx.float16, batch=1):
    vdim = dim if vdim is None else vdim
    spec = KvSpec(heads, dim, vdim, {mx.float16: "float16", mx.float32: "float32", mx.bfloat16: "bfloat16"}[dtype])
    return random_kv(11, spec, tokens, batch)


def paged(spec=SPEC, tokens=6, **options) -> PagedKVCache:
    cache = PagedKVCache(8, BLOCK, quantization=spec.quantization, **options)
    cache.append(*random_kv(1, spec, tokens))
    return cache


def rows(spec=SPEC) -> PagedKvRows:
    batch = PagedKvRows(8, BLOCK, quantization=spec.quantization)
    batch.merge_rows([paged(spec, 6), paged(spec, 3)])
    return batch


def pool() -> BlockPool:
    p = BlockPool(3, BLOCK, 2, 32, dtype=mx.float16)
    p.write_block(p.alloc(), *kv(2), 0)
    return p


def dense() -> KVCache:
    cache = KVCache()
    cache.update_and_fetch(*kv(5))
    return cache


def snapshot(target):
    """Everything observable about ``target``'s state, as plain comparable values."""
    if isinstance(target, PagedKvRows):
        return ("rows", target.batch_size, tuple(snapshot(row) for row in target.rows))
    if isinstance(target, PagedKVCache):
        return ("cache", target.offset, target.block_table, snapshot(target.pool) if target.pool else None)
    if isinstance(target, BlockPool):
        return ("pool", target.num_blocks, target.free_list, tuple(host_bytes(a).tobytes() for a in target.arrays()))
    if isinstance(target, KVCache):
        return ("dense", target.offset, tuple(host_bytes(a).tobytes() for a in target.state()))
    raise TypeError(type(target))


def exhausted_rows() -> PagedKvRows:
    """Two rows; the second has max_blocks=2 and 7 tokens, so a 2-token append cannot fit it."""
    batch = PagedKvRows(8, BLOCK)
    batch.merge_rows([paged(SPEC, 6), paged(SPEC, 7, max_blocks=2)])
    return batch


CASES = [
    # PagedKVCache appends
    ("head count", paged, lambda c: c.append(*kv(heads=1)), ValueError, "kv heads"),
    ("head dim", paged, lambda c: c.append(*kv(dim=64)), ValueError, "head_dim"),
    ("v head dim", paged, lambda c: c.append(*kv(vdim=64)), ValueError, "v_head_dim"),
    ("dtype", paged, lambda c: c.append(*kv(dtype=mx.float32)), ValueError, "dtype"),
    ("k/v dtype", paged, lambda c: c.append(kv()[0], kv(dtype=mx.bfloat16)[1]), ValueError, "values dtype"),
    ("k/v tokens", paged, lambda c: c.append(kv(3)[0], kv(2)[1]), ValueError, "values shape"),
    ("batch", paged, lambda c: c.append(*kv(batch=2)), ValueError, "batch"),
    ("rank", paged, lambda c: c.append(kv()[0][0], kv()[1][0]), ValueError, "keys"),
    ("not an array", paged, lambda c: c.append([[1.0]], kv()[1]), TypeError, "keys"),
    ("head dim, quantized", lambda: paged(QSPEC), lambda c: c.append(*kv(dim=32, dtype=mx.bfloat16)), ValueError,
     "head_dim"),
    ("pool exhausted", lambda: paged(tokens=7, max_blocks=2), lambda c: c.append(*kv(2)), PoolExhausted,
     "max_blocks=2"),
    # trim
    ("trim beyond offset", paged, lambda c: c.trim(7), ValueError, "tokens"),
    ("trim negative", paged, lambda c: c.trim(-1), ValueError, "tokens"),
    ("trim not int", paged, lambda c: c.trim(1.0), TypeError, "tokens"),
    ("dense trim beyond offset", dense, lambda c: c.trim(6), ValueError, "tokens"),
    ("dense head count", dense, lambda c: c.update_and_fetch(*kv(heads=1)), ValueError, "kv heads"),
    ("dense dtype", dense, lambda c: c.update_and_fetch(*kv(dtype=mx.bfloat16)), ValueError, "dtype"),
    # PagedKvRows
    ("filter out of range", rows, lambda r: r.filter_rows([0, 2]), ValueError, "keep"),
    ("filter negative", rows, lambda r: r.filter_rows([-1]), ValueError, "keep"),
    ("filter repeated", rows, lambda r: r.filter_rows([1, 1]), ValueError, "keep"),
    ("filter not a sequence", rows, lambda r: r.filter_rows(1), TypeError, "keep"),
    ("merge a dense cache", rows, lambda r: r.merge_rows([r, KVCache()]), TypeError, r"rows\[1\]"),
    ("merge another block size", rows,
     lambda r: r.merge_rows([r, PagedKVCache(8, 8)]), ValueError, "rows"),
    ("merge another dtype", rows, lambda r: r.merge_rows([r, paged(KvSpec(2, 32, 32, "float32"))]), ValueError,
     "rows"),
    ("merge quantized into plain", rows, lambda r: r.merge_rows([r, paged(QSPEC)]), ValueError, "rows"),
    ("extract out of range", rows, lambda r: r.extract_row(2), ValueError, "row"),
    ("rows batch", rows, lambda r: r.append(*kv(batch=3)), ValueError, "batch"),
    ("rows head dim", rows, lambda r: r.append(*kv(dim=64, batch=2)), ValueError, "head_dim"),
    ("rows trim beyond shortest", rows, lambda r: r.trim(4), ValueError, "tokens"),
    ("one row exhausted", exhausted_rows, lambda r: r.append(*kv(2, batch=2)), PoolExhausted, "max_blocks=2"),
    ("rows tokens for mask", rows, lambda r: r.make_mask(0), ValueError, "tokens"),
    # BlockPool
    ("write a free block", pool, lambda p: p.write_block(2, *kv(1), 0), ValueError, "phys"),
    ("write out of range", pool, lambda p: p.write_block(3, *kv(1), 0), ValueError, "phys"),
    ("write past the block", pool, lambda p: p.write_block(0, *kv(2), 3), ValueError, "within"),
    ("write dtype", pool, lambda p: p.write_block(0, *kv(1, dtype=mx.float32), 0), ValueError, "dtype"),
    ("double free", pool, lambda p: p.free(1), ValueError, "already free"),
    ("grow not int", pool, lambda p: p.grow(4.5), TypeError, "blocks"),
    ("gather out of range", pool, lambda p: p.gather([0, 3]), ValueError, "table"),
    ("restore wrong count", pool, lambda p: p.restore_arrays(p.arrays()[:1], [0]), ValueError, "arrays"),
    ("restore wrong shape", pool, lambda p: p.restore_arrays([p.keys[:2], p.values], [0]), ValueError, "arrays"),
    ("restore repeated", pool, lambda p: p.restore_arrays(p.arrays(), [0, 0]), ValueError, "occupied"),
    ("restore out of range", pool, lambda p: p.restore_arrays(p.arrays(), [3]), ValueError, "occupied"),
]


@pytest.mark.parametrize("make, call, error, name", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(make, call, error, name):
    target = make()
    before = snapshot(target)
    with pytest.raises(error, match=name):
        call(target)
    assert snapshot(target) == before, "a refused call changed the state"


CONSTRUCTORS = [
    ("block_size 0", lambda: PagedKVCache(8, 0), ValueError, "block_size"),
    ("block_size negative", lambda: PagedKvRows(8, -2), ValueError, "block_size"),
    ("pool block_size 0", lambda: BlockPool(2, 0, 1, 32), ValueError, "block_size"),
    ("capacity negative", lambda: PagedKVCache(-1, 4), ValueError, "capacity_tokens"),
    ("rows capacity negative", lambda: PagedKvRows(-8, 4), ValueError, "capacity_tokens"),
    ("bits 3", lambda: Quantization(3, 32), ValueError, "bits"),
    ("bits 16", lambda: Quantization(16, 32), ValueError, "bits"),
    ("group size 48", lambda: Quantization(4, 48), ValueError, "group_size"),
    ("group size not int", lambda: Quantization(4, 32.0), TypeError, "group_size"),
    ("group size vs head dim", lambda: BlockPool(2, 4, 1, 32, quantization=Quantization(4, 64)), ValueError,
     "group_size 64 does not divide head_dim"),
    ("group size vs v head dim", lambda: BlockPool(2, 4, 1, 64, v_head_dim=32, quantization=Quantization(8, 64)),
     ValueError, "v_head_dim"),
    ("quantization type", lambda: PagedKVCache(8, 4, quantization=(4, 32)), TypeError, "quantization"),
    ("direct type", lambda: PagedKVCache(8, 4, direct="yes"), TypeError, "direct"),
    ("pool dtype", lambda: BlockPool(2, 4, 1, 32, dtype=mx.int32), ValueError, "dtype"),
    ("max_blocks below capacity", lambda: PagedKVCache(64, 4, max_blocks=8), ValueError, "max_blocks"),
]


@pytest.mark.parametrize("build, error, name", [c[1:] for c in CONSTRUCTORS], ids=[c[0] for c in CONSTRUCTORS])
def test_bad_construction_is_refused_by_name(build, error, name):
    with pytest.raises(error, match=name):
        build()


def test_group_size_not_dividing_head_dim_is_refused_at_the_first_append_without_state():
    cache = PagedKVCache(8, 4, quantization=Quantization(4, 64))
    with pytest.raises(ValueError, match="group_size 64 does not divide head_dim=32"):
        cache.append(*kv(dim=32))
    assert (cache.offset, cache.block_table, cache.pool) == (0, (), None)


@pytest.mark.parametrize("q_shape, mask, error, name", [
    ((1, 4, 2, 64), None, ValueError, "q"),   # head dim 64, the view holds 32
    ((1, 3, 2, 32), None, ValueError, "q"),   # 3 query heads over 2 kv heads
    ((2, 4, 2, 32), None, ValueError, "q"),   # a single-row view takes batch 1
    ((1, 4, 2, 32), "full", ValueError, "mask"),
    ((1, 4, 2, 32), 1, TypeError, "mask"),
])
def test_attend_refuses_bad_queries_and_masks(q_shape, mask, error, name):
    view = paged().view()
    with pytest.raises(error, match=name):
        view.attend(mx.zeros(q_shape, mx.float16), 0.1, mask)
