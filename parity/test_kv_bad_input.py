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
import numpy as np
import pytest

from impl.kv import (BlockPool, KVCache, PagedKVCache, PagedKvRows, PoolExhausted, Quantization, gather_blocks,
                     gather_planes, merge_kv_rows, next_pool_size, pool_blocks_for)
from impl.kv.view import PagedAttentionView
from properties.strategies.kv import KvSpec, assert_bytes, host_bytes, random_kv

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


def dense(batch: int = 1) -> KVCache:
    cache = KVCache()
    cache.update_and_fetch(*kv(5, batch=batch))
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
    ("v more tokens than k", paged, lambda c: c.append(kv(2)[0], kv(3)[1]), ValueError, "values shape"),
    ("v more heads than k", paged, lambda c: c.append(kv(heads=1)[0], kv(heads=2)[1]), ValueError, "values shape"),
    ("batch", paged, lambda c: c.append(*kv(batch=2)), ValueError, "batch"),
    ("rank", paged, lambda c: c.append(kv()[0][0], kv()[1][0]), ValueError, "keys"),
    ("keys rank 5", paged, lambda c: c.append(kv()[0][None], kv()[1]), ValueError, r"keys must be \[batch"),
    ("values rank 5", paged, lambda c: c.append(kv()[0], kv()[1][None]), ValueError, r"values must be \[batch"),
    ("values rank 3", paged, lambda c: c.append(kv()[0], kv()[1][0]), ValueError, r"values must be \[batch"),
    # smaller as well as larger: an append of narrower rows must not be padded into the pool
    ("head dim smaller", paged, lambda c: c.append(*kv(dim=16)), ValueError, "head_dim 16 differs"),
    ("v head dim smaller", paged, lambda c: c.append(*kv(vdim=16)), ValueError, "values head dim 16 differs"),
    ("values head dim 0", paged, lambda c: c.append(kv(dim=8)[0], mx.zeros((1, 2, 3, 0), mx.float16)), ValueError,
     "got keys 8, values 0"),
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
    ("dense batch", dense, lambda c: c.update_and_fetch(*kv(batch=2)), ValueError, "keys has batch 2, the cache holds 1"),
    ("dense smaller batch", lambda: dense(batch=2), lambda c: c.update_and_fetch(*kv()), ValueError,
     "keys has batch 1, the cache holds 2"),
    ("keys head dim 0", lambda: PagedKVCache(8, BLOCK), lambda c: c.append(mx.zeros((1, 2, 3, 0), mx.float16), kv()[1]),
     ValueError, "head dims must be >= 1, got keys 0, values 32"),
    ("dense keys head dim 0", KVCache, lambda c: c.update_and_fetch(mx.zeros((1, 2, 3, 0), mx.float16), kv()[1]),
     ValueError, "head dims must be >= 1, got keys 0"),
    ("dense keys rank 5", dense, lambda c: c.update_and_fetch(kv()[0][None], kv()[1]), ValueError,
     r"keys must be \[batch"),
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
    ("rows window 0", rows, lambda r: r.make_mask(1, 0), ValueError, "window must be >= 1, got 0"),
    ("rows window negative", rows, lambda r: r.make_mask(1, -1), ValueError, "window must be >= 1, got -1"),
    ("rows window float", rows, lambda r: r.make_mask(1, 2.0), TypeError, "window"),
    # BlockPool
    ("write a free block", pool, lambda p: p.write_block(2, *kv(1), 0), ValueError, "phys"),
    ("write out of range", pool, lambda p: p.write_block(3, *kv(1), 0), ValueError, "phys"),
    ("write past the block", pool, lambda p: p.write_block(0, *kv(2), 3), ValueError, "within"),
    ("write dtype", pool, lambda p: p.write_block(0, *kv(1, dtype=mx.float32), 0), ValueError, "dtype"),
    ("double free", pool, lambda p: p.free(1), ValueError, "already free"),
    ("grow not int", pool, lambda p: p.grow(4.5), TypeError, "blocks"),
    ("gather out of range", pool, lambda p: p.gather([0, 3]), ValueError, "table"),
    # 2**32 as int64 would become block 0 in an int32 cast: refused before the cast
    ("gather int64 past int32", pool, lambda p: p.gather(mx.array([2**32], dtype=mx.int64)), ValueError, "table"),
    ("gather int past int32", pool, lambda p: p.gather([2**32]), ValueError, "table entry"),
    # a view is a reader: it must refuse a table or length that would read outside its pool
    ("view table outside the pool", pool, lambda p: PagedAttentionView.of(p, [0, 5], 4, False), ValueError, "table"),
    ("view array table outside", pool, lambda p: PagedAttentionView.of(p, mx.array([3]), 4, False), ValueError,
     "table"),
    ("view length past the table", pool, lambda p: PagedAttentionView.of(p, [0], 5, False), ValueError, "length"),
    ("view length negative", pool, lambda p: PagedAttentionView.of(p, [0], -1, False), ValueError, "length"),
    ("view length float", pool, lambda p: PagedAttentionView.of(p, [0], 2.5, False), TypeError, "length"),
    ("view direct not bool", pool, lambda p: PagedAttentionView.of(p, [0], 2, "no"), TypeError, "direct"),
    ("restore wrong count", pool, lambda p: p.restore_arrays(p.arrays()[:1], [0]), ValueError, "arrays"),
    ("restore wrong shape", pool, lambda p: p.restore_arrays([p.keys[:2], p.values], [0]), ValueError, "arrays"),
    ("restore repeated", pool, lambda p: p.restore_arrays(p.arrays(), [0, 0]), ValueError, "occupied"),
    ("restore out of range", pool, lambda p: p.restore_arrays(p.arrays(), [3]), ValueError, "occupied"),
    ("restore not a sequence", pool, lambda p: p.restore_arrays(None, [0]), TypeError, "arrays"),
    ("restore a dict", pool, lambda p: p.restore_arrays(dict(enumerate(p.arrays())), [0]), TypeError, "arrays"),
    # is_free takes a block of the pool: a bool or float 1.0 is not block 1 (it answered True for both)
    ("is_free bool", pool, lambda p: p.is_free(True), TypeError, "block"),
    ("is_free float", pool, lambda p: p.is_free(1.0), TypeError, "block"),
    ("is_free past the pool", pool, lambda p: p.is_free(3), ValueError, "block"),
    # -1 is no block (Python's last-item index): a write there would land outside the planes
    ("is_free -1", pool, lambda p: p.is_free(-1), ValueError, "block must be >= 0"),
    ("free -1", pool, lambda p: p.free(-1), ValueError, "block must be >= 0"),
    ("write block -1", pool, lambda p: p.write_block(-1, *kv(1), 0), ValueError, "phys must be >= 0"),
    ("view array table past the pool", pool, lambda p: PagedAttentionView.of(p, mx.array([0, 7]), 4, False),
     ValueError, "table entry 7"),
    ("view of a non-pool", pool, lambda p: PagedAttentionView.of(None, [0], 0, False), TypeError, "pool"),
    ("view table None", pool, lambda p: PagedAttentionView.of(p, None, 0, False), TypeError, "table"),
    ("merge other kv heads", rows, lambda r: r.merge_rows([r, paged(KvSpec(1, 32, 32, "float16"))]), ValueError,
     "rows"),
    ("merge other v head dim", rows, lambda r: r.merge_rows([r, paged(KvSpec(2, 32, 64, "float16"))]), ValueError,
     "rows"),
    ("merge other bits", lambda: rows(QSPEC),
     lambda r: r.merge_rows([r, paged(KvSpec(2, 64, 64, "bfloat16", Quantization(8, 32)))]), ValueError, "rows"),
    ("merge other group size", lambda: rows(QSPEC),
     lambda r: r.merge_rows([r, paged(KvSpec(2, 64, 64, "bfloat16", Quantization(4, 64)))]), ValueError, "rows"),
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
    ("pool no kv heads", lambda: BlockPool(2, 4, 0, 32), ValueError, "num_kv_heads"),
    ("pool head_dim 0", lambda: BlockPool(2, 4, 1, 0), ValueError, "head_dim"),
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
    ("pool dtype None", lambda: BlockPool(2, 4, 1, 32, dtype=None), TypeError, "dtype"),
    # a name or a NumPy dtype is the wrong kind of dtype, not one out of range
    ("pool dtype str", lambda: BlockPool(2, 4, 1, 32, dtype="float16"), TypeError, "dtype must be an mx.Dtype"),
    ("pool dtype NumPy", lambda: BlockPool(2, 4, 1, 32, dtype=np.float16), TypeError, "dtype must be an mx.Dtype"),
    ("max_blocks below capacity", lambda: PagedKVCache(64, 4, max_blocks=8), ValueError, "max_blocks"),
    ("max_blocks 0", lambda: PagedKVCache(0, 4, max_blocks=0), ValueError, "max_blocks must be >= 1"),
    # extents past MLX's int32 shapes (they raised OverflowError or std::bad_cast inside MLX, naming nothing)
    ("pool num_blocks 2**31", lambda: BlockPool(2**31, 4, 2, 32), ValueError, "num_blocks must be <="),
    ("pool block_size 2**40", lambda: BlockPool(2, 2**40, 2, 32), ValueError, "block_size must be <="),
    ("pool head_dim 10**20", lambda: BlockPool(1, 4, 2, 10**20), ValueError, "head_dim must be <="),
    ("capacity past a pool's blocks", lambda: PagedKVCache(2**40, 4), ValueError, "capacity_tokens"),
    ("capacity 10**20", lambda: PagedKVCache(10**20, 4), ValueError, "capacity_tokens"),
    ("rows capacity past a pool's blocks", lambda: PagedKvRows(2**40, 4), ValueError, "capacity_tokens"),
    # every axis within int32 but 2**64 elements a plane: MLX's byte count wrapped to 0 and the first write faulted
    ("pool bytes past 64 bits", lambda: BlockPool(65536, 65536, 65536, 65536), ValueError,
     "num_blocks=65536 blocks of .* pass MAX_POOL_BYTES"),
    # a cap no pool can reach: every append failed in the pool it made, never here
    ("max_blocks 2**40", lambda: PagedKVCache(16, 4, max_blocks=2**40), ValueError, "max_blocks must be <="),
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


NO_HEADS = mx.zeros((1, 0, 3, 32), mx.float16)


@pytest.mark.parametrize("make", [lambda: PagedKVCache(8, BLOCK), KVCache, lambda: paged(), dense],
                         ids=["fresh paged", "fresh dense", "paged", "dense"])
def test_keys_without_kv_heads_are_refused_by_name(make):
    # a fresh paged cache refused them naming the pool's num_kv_heads; a fresh dense cache stored a 0-head cache
    cache = make()
    before = (cache.offset, cache.block_table, snapshot(cache.pool) if cache.pool else None) \
        if isinstance(cache, PagedKVCache) else snapshot(cache)
    with pytest.raises(ValueError, match="keys"):
        cache.update_and_fetch(NO_HEADS, NO_HEADS)
    after = (cache.offset, cache.block_table, snapshot(cache.pool) if cache.pool else None) \
        if isinstance(cache, PagedKVCache) else snapshot(cache)
    assert after == before


# Both attend paths (control: gather + SDPA; direct: the kernel) take the same arguments and refuse the same ones.
ATTEND_CASES = [
    ("scale None", dict(scale=None), TypeError, "scale"),
    ("scale nan", dict(scale=float("nan")), ValueError, "scale"),
    ("scale bool", dict(scale=True), TypeError, "scale"),
    ("arm type", dict(arm=123), TypeError, "arm"),
    ("arm name", dict(arm="vulkan"), ValueError, "arm"),
    ("q int", dict(q=mx.zeros((1, 4, 1, 32), mx.int32)), ValueError, "dtype"),
    ("q float32", dict(q=mx.zeros((1, 4, 1, 32), mx.float32)), ValueError, "dtype"),
    ("mask keys", dict(q=mx.zeros((1, 4, 2, 32), mx.float16), mask=mx.ones((2, 5), dtype=mx.bool_)), ValueError,
     "mask"),
    ("mask rows", dict(mask=mx.ones((1, 1, 4, 6), dtype=mx.bool_)), ValueError, "mask"),
    ("mask dtype", dict(mask=mx.ones((1, 6), dtype=mx.int32)), ValueError, "mask"),
    # each was refused only by MLX's SDPA on the control path (a message naming no argument) or only by the kernel
    ("mask does not promote", dict(mask=mx.zeros((1, 6), dtype=mx.float32)), ValueError, "mask dtype"),
    ("q without heads", dict(q=mx.zeros((1, 0, 1, 32), mx.float16)), ValueError, "q has 0 heads"),
    ("causal without queries", dict(q=mx.zeros((1, 4, 0, 32), mx.float16), mask="causal"), ValueError, "n=0"),
    ("causal past the keys", dict(q=mx.zeros((1, 4, 7, 32), mx.float16), mask="causal"), ValueError, "length=6"),
    # 5-D: a q or mask of one more leading axis is no [1, Hq, n, D] / [B, Hq, n, keys] (SDPA would broadcast it)
    ("q 5-d", dict(q=mx.zeros((1, 4, 1, 32, 32), mx.float16)), ValueError, r"q must be \[1, Hq, n, 32\]"),
    ("q head dim short", dict(q=mx.zeros((1, 4, 1, 16), mx.float16)), ValueError, r"q must be \[1, Hq, n, 32\]"),
    ("mask 5-d", dict(mask=mx.ones((1, 1, 1, 1, 6), dtype=mx.bool_)), ValueError, "does not broadcast"),
    # a mask of batch 0 broadcasts the one query to no batch at all: no [1, Hq, n, keys]
    ("mask batch 0", dict(mask=mx.ones((0, 4, 1, 6), dtype=mx.bool_)), ValueError, "does not broadcast"),
]


@pytest.mark.parametrize("direct", [False, True], ids=["control", "direct"])
@pytest.mark.parametrize("change, error, name", [c[1:] for c in ATTEND_CASES], ids=[c[0] for c in ATTEND_CASES])
def test_attend_refuses_the_same_arguments_on_both_paths(direct, change, error, name):
    view = paged(direct=direct).view()
    args = dict(q=mx.zeros((1, 4, 1, 32), mx.float16), scale=0.1, mask=None, arm="graph") | change
    with pytest.raises(error, match=name):
        view.attend(args["q"], args["scale"], args["mask"], args["arm"])


@pytest.mark.parametrize("direct", [False, True], ids=["control", "direct"])
def test_attend_over_no_keys_is_refused_on_both_paths(direct):
    cache = paged(direct=direct)
    cache.trim(cache.offset)
    view = cache.view()
    with pytest.raises(ValueError, match="length=0"):  # the control path returned zeros, the kernel refused
        view.attend(mx.zeros((1, 4, 1, 32), mx.float16), 0.1)


def test_rows_attend_refuses_a_mask_of_another_batch():
    view = rows().append_and_fetch(*kv(1, batch=2))
    with pytest.raises(ValueError, match="mask"):
        view.attend(mx.zeros((2, 4, 2, 32), mx.float16), 0.1, mx.ones((3, 1, 2, 7), dtype=mx.bool_))


@pytest.mark.parametrize("shape", [(3, 4, 1, 32), (1, 4, 1, 32), (2, 4, 32), (2, 4, 1, 32, 1)],
                         ids=["more rows", "fewer rows", "3-D", "5-D"])
def test_rows_attend_refuses_q_of_another_shape(shape):
    view = rows().append_and_fetch(*kv(1, batch=2))
    with pytest.raises(ValueError, match=r"q must be \[2, Hq, n, D\]"):
        view.attend(mx.zeros(shape, mx.float16), 0.1)


NUMPY_INTS = [np.int64, np.int32, np.uint16]


@pytest.mark.parametrize("kind", NUMPY_INTS)
def test_numpy_integers_are_stored_as_python_ints(kind):
    # check_int takes NumPy integers; a mutator that kept one would hand it to mx.array([...], dtype=mx.int32)
    # at a later write, which refuses it: after the table had grown (state changed by a failed call).
    quantization = Quantization(kind(4), kind(32))
    assert (type(quantization.bits), type(quantization.group_size)) == (int, int)
    assert quantization == Quantization(4, 32) and hash(quantization) == hash(Quantization(4, 32))
    cache = PagedKVCache(kind(8), kind(BLOCK), max_blocks=kind(16))
    cache.append(*kv(6))
    assert cache.trim(kind(2)) == 2
    cache.append(*kv(3))
    assert type(cache.offset) is int and cache.offset == 7
    assert len(cache.block_table) == -(-cache.offset // BLOCK)
    p = pool()
    block = p.alloc()
    p.free(kind(block))
    block = p.alloc()
    assert type(block) is int
    p.write_block(kind(block), *kv(1), kind(1))
    p.grow(kind(5))
    assert p.num_blocks == 5 and all(type(b) is int for b in p.free_list)
    batch = rows()
    batch.trim(kind(1))
    assert batch.rope_offsets.tolist() == [5, 2]
    d = dense()
    d.trim(kind(1))
    d.update_and_fetch(*kv(300))
    assert type(d.offset) is int and d.offset == 304


def test_a_row_that_never_had_an_append_is_all_padding():
    batch = PagedKvRows(8, BLOCK)
    batch.merge_rows([paged(SPEC, 3), PagedKVCache(8, BLOCK)])
    keys, values = batch.fetch()
    assert keys.shape == (2, 2, 3, 32) and values.shape == (2, 2, 3, 32)
    assert batch.left_pad == [0, 3]
    assert not mx.any(keys[1]).item() and not mx.any(values[1]).item()
    assert mx.array_equal(keys[0:1], batch.rows[0].fetch()[0]).item()
    empty = PagedKvRows(8, BLOCK)
    empty.merge_rows([PagedKVCache(8, BLOCK), PagedKVCache(8, BLOCK)])
    with pytest.raises(ValueError, match="empty"):
        empty.fetch()
    # keys and values of different head dims: the empty row's padding takes each plane's own shape
    wide = KvSpec(2, 32, 48, "float16")
    batch = PagedKvRows(8, BLOCK)
    batch.merge_rows([PagedKVCache(8, BLOCK), paged(wide, 3)])
    keys, values = batch.fetch()
    assert keys.shape == (2, 2, 3, 32) and values.shape == (2, 2, 3, 48)
    assert not mx.any(keys[0]).item() and not mx.any(values[0]).item() and batch.left_pad == [3, 0]


# The module-level helpers the caches are built from are public too (``impl.kv.__all__``).
K4 = mx.zeros((1, 2, 3, 4))


def quantized_planes(packed_dtype=mx.uint32):
    """(packed, scales, biases) of 2 rows of 64 dims at 4 bits, groups of 32; packed as ``packed_dtype``."""
    packed, scales, biases = Quantization(4, 32).quantize(mx.ones((2, 64)))
    return packed.astype(packed_dtype), scales, biases
HELPERS = [
    ("gather_blocks id past the pool", lambda: gather_blocks(pool().keys, [3]), ValueError, r"table entries .* \[0, 3\)"),
    ("gather_blocks negative id", lambda: gather_blocks(pool().keys, mx.array([-1])), ValueError, "table entries"),
    ("gather_blocks plane 3-D", lambda: gather_blocks(pool().keys[0], [0]), ValueError, "plane"),
    ("gather_blocks plane not an array", lambda: gather_blocks(np.zeros((3, 2, 4, 32)), [0]), TypeError, "plane"),
    ("gather_planes length past the blocks", lambda: gather_planes(pool(), [0], 5), ValueError, "length"),
    ("gather_planes length bool", lambda: gather_planes(pool(), [0], True), TypeError, "length"),
    ("gather_planes storage without planes", lambda: gather_planes(object(), [0]), TypeError, "storage"),
    ("gather_planes id past the pool", lambda: gather_planes(pool(), [0, 3]), ValueError, "table entries"),
    ("merge_kv_rows empty", lambda: merge_kv_rows([]), ValueError, "rows must hold at least one"),
    ("merge_kv_rows int32 rows", lambda: merge_kv_rows([(mx.zeros((1, 2, 3, 4), mx.int32),) * 2]), ValueError,
     r"rows\[0\] K's dtype"),
    ("merge_kv_rows K and V dtypes differ", lambda: merge_kv_rows([(K4, K4.astype(mx.float16))]), ValueError,
     r"rows\[0\]'s K and V must share a dtype"),
    ("merge_kv_rows not pairs", lambda: merge_kv_rows([K4]), TypeError, r"rows\[0\]"),
    ("merge_kv_rows a 1-tuple", lambda: merge_kv_rows([(K4,)]), TypeError, r"rows\[0\] must be a \(K, V\) pair"),
    ("merge_kv_rows a 3-tuple", lambda: merge_kv_rows([(K4, K4, K4)]), TypeError, r"rows\[0\] must be a \(K, V\) pair"),
    ("merge_kv_rows batch 0", lambda: merge_kv_rows([(K4[:0], K4[:0])]), ValueError, r"rows\[0\] K must be \[1, H"),
    ("merge_kv_rows batch 2", lambda: merge_kv_rows([(mx.zeros((2, 2, 3, 4)),) * 2]), ValueError,
     r"rows\[0\] K must be \[1, H"),
    ("merge_kv_rows K/V heads differ", lambda: merge_kv_rows([(K4, K4[:, :1])]), ValueError, r"rows\[0\]'s K and V"),
    ("merge_kv_rows K/V tokens differ", lambda: merge_kv_rows([(K4, K4[:, :, :2])]), ValueError, r"rows\[0\]'s K and V"),
    ("merge_kv_rows V longer than K", lambda: merge_kv_rows([(K4[:, :, :2], K4)]), ValueError,
     r"rows\[0\]'s K and V .* got \(1, 2, 2, 4\) and \(1, 2, 3, 4\)"),
    ("merge_kv_rows V with more heads", lambda: merge_kv_rows([(K4[:, :1], K4)]), ValueError, r"rows\[0\]'s K and V"),
    ("merge_kv_rows dtypes differ", lambda: merge_kv_rows([(K4, K4), (K4.astype(mx.float16), K4)]), ValueError,
     r"rows\[1\] K"),
    ("merge_kv_rows 3-D", lambda: merge_kv_rows([(K4[0], K4[0])]), ValueError, r"rows\[0\] K"),
    ("next_pool_size bool", lambda: next_pool_size(True), TypeError, "num_blocks"),
    ("next_pool_size negative", lambda: next_pool_size(-1), ValueError, "num_blocks"),
    ("next_pool_size cap below the pool", lambda: next_pool_size(4, 3), ValueError, "max_blocks"),
    ("pool_blocks_for float", lambda: pool_blocks_for(1.5, 4), TypeError, "tokens"),
    ("check_divides a str dim", lambda: Quantization(4, 32).check_divides("x", "head_dim"), TypeError, "head_dim"),
    ("check_divides None", lambda: Quantization(4, 32).check_divides(None, "head_dim"), TypeError, "head_dim"),
    ("check_divides 0", lambda: Quantization(4, 32).check_divides(0, "head_dim"), ValueError, "head_dim"),
    ("check_divides negative", lambda: Quantization(4, 32).check_divides(-32, "head_dim"), ValueError, "head_dim"),
    ("quantize NumPy rows", lambda: Quantization(4, 32).quantize(np.zeros((1, 32), np.float32)), TypeError, "rows"),
    ("quantize int32 rows", lambda: Quantization(4, 32).quantize(mx.zeros((1, 32), mx.int32)), ValueError, "rows"),
    ("quantize 33 dims", lambda: Quantization(4, 32).quantize(mx.zeros((1, 33))), ValueError, "rows"),
    ("quantize 1-D rows", lambda: Quantization(4, 32).quantize(mx.zeros((32,))), ValueError, "rows"),
    ("dequantize None", lambda: Quantization(4, 32).dequantize(None, K4, K4), TypeError, "packed"),
    ("dequantize int32 packed", lambda: Quantization(4, 32).dequantize(*quantized_planes(mx.int32)), ValueError,
     "packed"),
    ("dequantize biases of another shape",
     lambda: Quantization(4, 32).dequantize(*quantized_planes()[:2], quantized_planes()[2][..., :1, :]), ValueError,
     "biases"),
    ("dequantize biases of another dtype",
     lambda: Quantization(4, 32).dequantize(*quantized_planes()[:2], quantized_planes()[2].astype(mx.float16)),
     ValueError, "biases"),
]


@pytest.mark.parametrize("call, error, name", [c[1:] for c in HELPERS], ids=[c[0] for c in HELPERS])
def test_bad_helper_input_is_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_helpers_take_what_they_documented():
    p = pool()
    assert gather_blocks(p.keys, np.array([2, 0])).shape == (1, 2, 2 * BLOCK, 32)
    keys, values = gather_planes(p, [0], np.int64(3))
    assert keys.shape == values.shape == (1, 2, 3, 32)
    assert (next_pool_size(4), next_pool_size(4, 5), next_pool_size(np.int32(4), 4)) == (6, 5, 4)
    k, v = merge_kv_rows([(K4, K4), (K4[:, :, :1], K4[:, :, :1])])
    assert k.shape == v.shape == (2, 2, 3, 4)


# What the caches take that the refusals above border on: one head, head dim 1, head dims past 256 (a latent-attention
# cache stores keys of 576 and values of 512), more than 256 batch rows. (CPython keeps one object per int only up to
# 256: a check comparing sizes by identity refused a second append of such a geometry.)
EDGE_SPECS = [KvSpec(1, 1, 1, "float16"), KvSpec(1, 576, 512, "bfloat16")]


@pytest.mark.parametrize("spec", EDGE_SPECS, ids=lambda s: f"D{s.head_dim}-Dv{s.v_head_dim}")
@pytest.mark.parametrize("make", [KVCache, lambda: PagedKVCache(4, BLOCK), lambda: PagedKvRows(4, BLOCK)],
                         ids=["dense", "paged", "rows"])
def test_edge_geometries_are_stored_across_appends(make, spec):
    cache = make()
    if isinstance(cache, PagedKvRows):
        cache.merge_rows([PagedKVCache(4, BLOCK)])
    first, second = random_kv(1, spec, 3), random_kv(2, spec, 6)
    cache.update_and_fetch(*first)
    keys, values = cache.update_and_fetch(*second)
    for got, part in ((keys, 0), (values, 1)):
        assert_bytes(got, np.concatenate([host_bytes(first[part]), host_bytes(second[part])], axis=2),
                     f"{'kv'[part]} after two appends")


def test_more_than_256_rows_are_one_batch():
    batch = 300
    spec = KvSpec(1, 1, 1, "float16")
    dense_cache = KVCache()
    dense_cache.update_and_fetch(*random_kv(1, spec, 1, batch))
    keys, _ = dense_cache.update_and_fetch(*random_kv(2, spec, 2, batch))
    assert keys.shape == (batch, 1, 3, 1)
    rows_cache = PagedKvRows(1, 1)
    rows_cache.merge_rows([PagedKVCache(1, 1)] * batch)
    rows_cache.filter_rows(list(range(batch - 1, -1, -1)))
    assert rows_cache.batch_size == batch
    keys, values = random_kv(3, spec, 1, batch)
    view = rows_cache.append_and_fetch(keys, values)
    got = view.attend(random_kv(4, spec, 1, batch)[0], 1.0)
    assert_bytes(got, host_bytes(values), "each row's one key: its attention is its one value")


def test_more_than_256_heads_and_dims_are_compared_by_value():
    """Shapes past CPython's small-int cache (256) are distinct int objects each time MLX reports them: a second
    append of the same geometry must match by value."""
    spec = KvSpec(300, 1, 260, "float16")
    cache = PagedKVCache(4, 2)
    cache.append(*random_kv(1, spec, 1))
    cache.append(*random_kv(2, spec, 1))
    assert cache.offset == 2 and cache.pool.num_kv_heads == 300 and cache.pool.v_head_dim == 260


def test_a_batch_without_rows_is_empty():
    batch = PagedKvRows(8, BLOCK)
    assert (batch.offset, batch.row_offsets, batch.left_pad, batch.batch_size) == (0, [], [], 0)
    assert PagedKVCache(8, BLOCK).nbytes == 0 and batch.projected_bytes(5) == 0
    assert (KVCache().signature, PagedKVCache(8, BLOCK).signature, batch.signature) == (
        "kv:dense", "kv:paged", "kv:paged-rows")


def test_an_append_that_fills_max_blocks_exactly_is_taken():
    cache = PagedKVCache(2 * BLOCK, BLOCK, max_blocks=3)  # 2 blocks to start, room for 1 more
    cache.append(*kv(BLOCK))  # 1 block used, 1 free, 1 the pool may still grow by: 2 blocks available
    cache.append(*kv(2 * BLOCK))
    assert (cache.offset, len(cache.block_table), cache.pool.num_blocks) == (3 * BLOCK, 3, 3)
    before = snapshot(cache)
    with pytest.raises(PoolExhausted, match="max_blocks=3"):
        cache.append(*kv(1))
    assert snapshot(cache) == before


def test_one_query_head_over_one_kv_head_is_attended():
    spec = KvSpec(1, 32, 32, "float16")
    cache = PagedKVCache(8, BLOCK)
    k, v = random_kv(5, spec, 6)
    cache.append(k, v)
    q = random_kv(6, spec, 2)[0]
    got = cache.view().attend(q, 0.1, "causal")
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1, mask="causal")
    assert_bytes(got, host_bytes(want), "one query head, one kv head vs SDPA on the appended rows")


@pytest.mark.parametrize("direct", [False, True], ids=["control", "direct"])
def test_attend_takes_a_mask_per_query_head(direct):
    """An array mask may differ per query head ([1, Hq, n, length], Hq = 4 here, n = 2): SDPA's own layout."""
    cache = paged(direct=direct)
    k, v = cache.fetch()
    q = kv(2, heads=4)[0]
    mask = (mx.arange(4 * 2 * 6).reshape(1, 4, 2, 6) % 5) != 2
    got = cache.view().attend(q, 0.1, mask)
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=0.1, mask=mask)
    assert_bytes(got, host_bytes(want), "a per-head mask vs SDPA on the cache's rows")


def test_rows_attend_takes_a_batched_mask_per_query_head():
    """The batch's mask [B, Hq, n, total] with Hq (4) other than B (2): each row gets its slice, its own keys."""
    batch = rows()
    view = batch.append_and_fetch(*kv(2, batch=2))
    q = kv(2, heads=4, batch=2)[0]
    total = batch.offset
    mask = (mx.arange(2 * 4 * 2 * total).reshape(2, 4, 2, total) % 7) != 3
    got = view.attend(q, 0.1, mask)
    want = mx.concatenate([row.attend(q[b:b + 1], 0.1, mask[b:b + 1, :, :, view.left_pad[b]:])
                           for b, row in enumerate(view.rows)])
    assert_bytes(got, host_bytes(want), "a per-head batched mask cut to each row")


@pytest.mark.parametrize("quantization", [None, Quantization(4, 32)], ids=["plain", "q4g32"])
def test_a_views_arrays_are_its_planes(quantization):
    """``PagedAttentionView.arrays()``: the planes the view holds (what a caller evaluates or measures), each an
    mx.array, none left out: K and V, plus the four scale and bias planes of a quantized pool."""
    p = BlockPool(3, BLOCK, 2, 32, dtype=mx.bfloat16, quantization=quantization)
    view = PagedAttentionView.of(p, [0], 1, False)
    arrays = view.arrays()
    assert all(isinstance(a, mx.array) for a in arrays)
    assert [id(a) for a in arrays] == [id(a) for a in p.arrays()], "the view's planes are the pool's"
    assert len(arrays) == (2 if quantization is None else 6)


# --- failures past the checks: memory --------------------------------------------------------------------------------
# What no check can refuse (MLX out of memory while a pool grows or is made) must still leave the state as it was:
# the failure is simulated at the operation's last allocation.


def test_a_grow_that_fails_leaves_the_pool_as_it_was(monkeypatch):
    """``grow`` builds every enlarged plane and the free list before it assigns any: an allocation failing at the last
    plane leaves num_blocks, the free list and the planes as they were (they were assigned one by one before)."""
    target = pool()
    before = snapshot(target)
    calls, concatenate = [], mx.concatenate

    def failing(arrays, axis=0):
        calls.append(axis)
        if len(calls) == 2:  # the values plane: the keys plane is already built
            raise MemoryError("simulated")
        return concatenate(arrays, axis=axis)

    monkeypatch.setattr(mx, "concatenate", failing)
    with pytest.raises(MemoryError):
        target.grow(6)
    monkeypatch.undo()
    assert len(calls) == 2 and snapshot(target) == before
    target.grow(6)  # and the pool still grows
    assert target.num_blocks == 6 and target.free_blocks == 5


def test_a_rows_append_whose_pool_cannot_be_made_changes_no_row(monkeypatch):
    """Each row makes its pool at its first append; a batch append makes every missing pool before it writes any row,
    and drops the ones it made when one fails: row 0 is neither written nor left holding a pool."""
    import impl.kv.paged as paged_module

    batch = PagedKvRows(8, BLOCK)
    batch.merge_rows([PagedKVCache(8, BLOCK), PagedKVCache(8, BLOCK)])
    before = snapshot(batch)
    made, block_pool = [], paged_module.BlockPool

    def failing(*args, **kwargs):
        made.append(args)
        if len(made) == 2:
            raise MemoryError("simulated")
        return block_pool(*args, **kwargs)

    monkeypatch.setattr(paged_module, "BlockPool", failing)
    with pytest.raises(MemoryError):
        batch.append(*kv(2, batch=2))
    monkeypatch.undo()
    assert len(made) == 2 and snapshot(batch) == before and batch.row_offsets == [0, 0]
    batch.append(*kv(2, batch=2))
    assert batch.row_offsets == [2, 2]


def test_masks_past_int32_positions_name_tokens():
    """make_mask's positions stop at MAX_EXTENT with tokens named (MLX's arange raised naming nothing)."""
    batch = PagedKvRows(8, BLOCK)
    batch.merge_rows([paged(SPEC, 6), paged(SPEC, 3)])
    for target, call in [(paged(), lambda c: c.make_mask(2**31, 4)), (batch, lambda b: b.make_mask(10**20)),
                         (dense(), lambda c: c.make_mask(10**20, 4))]:
        before = snapshot(target)
        with pytest.raises(ValueError, match="tokens"):
            call(target)
        assert snapshot(target) == before


@pytest.mark.parametrize("num_blocks, error", [(None, TypeError), (3.5, TypeError), (True, TypeError),
                                                (mx.array(4), TypeError), (-1, ValueError)])
def test_check_pool_refuses_a_bad_block_count_by_name(num_blocks, error):
    from impl.block_table import BlockTable

    with pytest.raises(error, match="num_blocks"):
        BlockTable.of([0, 3]).check_pool(num_blocks)


@pytest.mark.parametrize("row, error", [(2, ValueError), (-1, ValueError), (None, TypeError), ("0", TypeError),
                                        (1.5, TypeError), (True, TypeError)])
@pytest.mark.parametrize("mask", [None, mx.zeros((2, 1, 1, 5), mx.bool_)], ids=["no mask", "mask"])
def test_row_mask_refuses_a_row_outside_the_batch(row, error, mask):
    view = rows().append_and_fetch(*kv(1, batch=2))
    with pytest.raises(error, match="row"):
        view.row_mask(mask, row)


def test_an_append_whose_growth_passes_max_pool_bytes_changes_nothing():
    """The size the growth policy reaches in an append is checked before a block is taken: an append needing a
    second block of 2**62 bytes is refused with no pool made (one block fits in MLX's 64-bit byte count, two do
    not). The K/V are lazy zeros: nothing of that size is ever allocated."""
    keys = mx.zeros((1, 2**10, 2**30 + 1, 2**20), mx.float16)  # one token past a block of 2**30
    cache = PagedKVCache(1, 2**30)
    with pytest.raises(ValueError, match="blocks=2 blocks of 4611686018427387904 bytes .* MAX_POOL_BYTES"):
        cache.append(keys, keys)
    assert (cache.pool, cache.offset, cache.block_table) == (None, 0, ())
    batch = PagedKvRows(1, 2**30)
    batch.merge_rows([PagedKVCache(1, 2**30), PagedKVCache(1, 2**30)])
    pair = mx.zeros((2, 2**10, 2**30 + 1, 2**20), mx.float16)
    with pytest.raises(ValueError, match="MAX_POOL_BYTES"):
        batch.append(pair, pair)
    assert [row.pool for row in batch.rows] == [None, None] and batch.row_offsets == [0, 0]


@pytest.mark.parametrize("quantization", [Quantization(4, 32), Quantization(8, 64)], ids=["q4g32", "q8g64"])
def test_dequantize_takes_what_quantize_returns_for_no_rows(quantization):
    """No rows quantize to empty planes, and those dequantize to no rows of the head dim (MLX's dequantize could
    not reshape an empty array)."""
    rows_out = quantization.dequantize(*quantization.quantize(mx.zeros((2, 0, 128), mx.bfloat16)))
    assert rows_out.shape == (2, 0, 128) and rows_out.dtype == mx.bfloat16


def rows_view():
    """A 2-row view of ``rows()`` after one more token: row 0 holds 7 tokens, row 1 holds 4 (left pad 3)."""
    return rows().append_and_fetch(*kv(1, batch=2))


@pytest.mark.parametrize("mask", [mx.array(True), mx.ones((2, 1, 1, 1), mx.bool_), mx.zeros((1, 1), mx.float16)],
                         ids=["0-d", "batch x 1 key", "2-D x 1 key"])
def test_rows_attend_takes_a_mask_broadcast_along_the_keys(mask):
    """A mask with no key axis to slice (0-d, or 1 key broadcast) holds no padded column: each row takes it as it
    is, the same as each row's own view with that mask (the rows slicing it dropped the only column)."""
    view = rows_view()
    q = mx.random.normal((2, 2, 1, 32), key=mx.random.key(3)).astype(mx.float16)
    got = view.attend(q, 0.125, mask)
    for b, row in enumerate(view.rows):
        own = mask if mask.ndim < 4 else mask[b:b + 1]
        assert mx.array_equal(got[b:b + 1], row.attend(q[b:b + 1], 0.125, own)).item()
    assert view.row_mask(mask, 0) is mask or view.row_mask(mask, 0).shape == (1, 1, 1, 1)


@pytest.mark.parametrize("rows_of, left_pad, error, name", [
    (list, (1, 0), TypeError, "rows must be a tuple of PagedAttentionView"),
    (tuple, (), ValueError, r"left_pad must hold one pad per row \(2\), got 0"),
    (tuple, (0, -1), ValueError, r"left_pad\[1\] must be >= 0"),
    (tuple, (0, 1.0), TypeError, r"left_pad\[1\]"),
    (tuple, 0, TypeError, "left_pad must be a tuple"),
])
def test_a_rows_view_checks_its_rows_and_pads(rows_of, left_pad, error, name):
    from impl.kv.view import RowsAttentionView

    with pytest.raises(error, match=name):
        RowsAttentionView(rows_of(rows_view().rows), left_pad)


def test_row_mask_refuses_a_mask_of_the_wrong_kind():
    with pytest.raises(TypeError, match="mask"):
        rows_view().row_mask(42, 0)
