"""BlockPool allocation and growth, and PagedKVCache growth under pressure.

* Random alloc / free / grow / write programs on a bare pool against a model
  (the set of handed-out blocks and what was written in each): no block is
  handed out twice, free + used == num_blocks, a fresh pool hands out low
  indices first, the free list is LIFO, growth keeps every written value and
  puts the new blocks on the free list lowest-first.
* A cache sized for one block grows by max(n + 1, ceil(1.5 n)) each time its
  free list runs dry, and after every growth every earlier token reads back
  unchanged (unused slots poisoned with NaN).
* ``max_blocks``: the typed ``PoolExhausted`` and what it leaves behind.
* clone and restore_arrays: independent free lists, round trip of the planes.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.kv import BlockPool, PagedKVCache, PoolExhausted, next_pool_size, pool_blocks_for
from properties.strategies.kv import (BLOCK_SIZES, KvSpec, assert_accounting, assert_bytes, host_bytes, kv_specs,
                                      poison_unused_slots, random_kv, stored_rows)

POOL_OPS = st.lists(st.one_of(st.just(("alloc",)), st.tuples(st.just("free"), st.integers(0, 63)),
                              st.tuples(st.just("grow"), st.integers(0, 4)),
                              st.tuples(st.just("write"), st.integers(0, 63))), max_size=40)


@given(spec=kv_specs(quantized=None), block_size=st.sampled_from((1, 2, 8)), blocks=st.integers(0, 4), ops=POOL_OPS)
def test_pool_program_keeps_allocation_and_data_consistent(spec, block_size, blocks, ops):
    pool = BlockPool(blocks, block_size, spec.num_kv_heads, spec.head_dim, v_head_dim=spec.v_head_dim,
                     dtype=spec.dtype, quantization=spec.quantization)
    assert [pool.alloc() for _ in range(blocks)] == list(range(blocks)), "fresh pool: low indices first"
    used: list[int] = list(range(blocks))
    written: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    last_freed = None
    for step, op in enumerate(ops):
        if op[0] == "alloc":
            if not pool.free_blocks:
                with pytest.raises(PoolExhausted):
                    pool.alloc()
                continue
            block = pool.alloc()
            if last_freed is not None:
                assert block == last_freed, "LIFO: the block freed last comes out first"
            assert block not in used, f"block {block} handed out twice"
            used.append(block)
            last_freed = None
        elif op[0] == "free" and used:
            block = used.pop(op[1] % len(used))
            pool.free(block)
            written.pop(block, None)
            last_freed = block
        elif op[0] == "grow":
            before = pool.num_blocks
            pool.grow(before + op[1])
            assert pool.free_list[-op[1]:] == tuple(range(before + op[1] - 1, before - 1, -1)) if op[1] else True
            last_freed = before if op[1] else last_freed
        elif op[0] == "write" and used:
            block = used[op[1] % len(used)]
            k, v = random_kv(step, spec, block_size)
            pool.write_block(block, k, v, 0)
            written[block] = (host_bytes(stored_rows(spec, k)), host_bytes(stored_rows(spec, v)))
        assert pool.free_blocks + len(used) == pool.num_blocks
        assert not set(used) & set(pool.free_list)
        for block, (k, v) in written.items():
            got_k, got_v = pool.gather([block])
            assert_bytes(got_k, k, f"block {block} keys after {op}")
            assert_bytes(got_v, v, f"block {block} values after {op}")


@given(spec=kv_specs(quantized=None), block_size=st.sampled_from(BLOCK_SIZES),
       lengths=st.lists(st.integers(1, 40), min_size=1, max_size=8), seed=st.integers(0, 2**31))
def test_cache_growth_keeps_every_token(spec, block_size, lengths, seed):
    cache = PagedKVCache(block_size, block_size, quantization=spec.quantization)  # room for one block
    expected = []
    sizes = [1]
    for step, n in enumerate(lengths):
        k, v = random_kv(seed + step, spec, n)
        poison_unused_slots(cache)
        cache.append(k, v)
        expected.append((host_bytes(stored_rows(spec, k)), host_bytes(stored_rows(spec, v))))
        while sizes[-1] < cache.pool.num_blocks:
            sizes.append(next_pool_size(sizes[-1]))
        assert sizes[-1] == cache.pool.num_blocks, f"pool size {cache.pool.num_blocks} is off the x1.5 sequence {sizes}"
        assert_accounting(cache, f"after append {step}")
        poison_unused_slots(cache)
        got_k, got_v = cache.fetch()
        assert_bytes(got_k, np.concatenate([k for k, _ in expected], axis=2), f"keys after growth to {sizes[-1]}")
        assert_bytes(got_v, np.concatenate([v for _, v in expected], axis=2), f"values after growth to {sizes[-1]}")
    # The pool never grew further than the tokens required.
    needed = pool_blocks_for(cache.offset, block_size)
    assert len(sizes) == 1 or sizes[-2] < needed


@pytest.mark.parametrize("n, expected", [(0, 1), (1, 2), (2, 3), (3, 5), (4, 6), (5, 8), (10, 15), (11, 17)])
def test_growth_policy_is_x1_5_rounded_up_at_least_one(n, expected):
    assert next_pool_size(n) == expected == max(n + 1, math.ceil(1.5 * n))


def test_growth_is_capped_by_max_blocks():
    assert next_pool_size(10, max_blocks=12) == 12


def make_full_cache(max_blocks: int, block_size: int = 2):
    spec = KvSpec(1, 32, 32, "float16")
    cache = PagedKVCache(block_size, block_size, max_blocks=max_blocks)
    k, v = random_kv(0, spec, block_size * max_blocks - 1)
    cache.append(k, v)
    return cache, spec


def test_pool_exhausted_when_max_blocks_is_reached_and_nothing_changes():
    cache, spec = make_full_cache(max_blocks=3)
    before = (cache.offset, cache.block_table, cache.pool.free_list, cache.pool.num_blocks,
              [host_bytes(a).tobytes() for a in cache.state()])
    k, v = random_kv(1, spec, 2)  # one fits in the last block, the second needs a fourth block
    with pytest.raises(PoolExhausted) as info:
        cache.append(k, v)
    assert (info.value.needed, info.value.available, info.value.max_blocks) == (1, 0, 3)
    after = (cache.offset, cache.block_table, cache.pool.free_list, cache.pool.num_blocks,
             [host_bytes(a).tobytes() for a in cache.state()])
    assert after == before
    cache.append(k[:, :, :1], v[:, :, :1])  # exactly filling the last block is allowed
    assert cache.offset == 6


def test_an_append_past_max_blocks_counts_the_free_blocks_and_the_growth_left():
    """available = free + max_blocks - num_blocks, with free blocks in the pool: 1 free of 2, max_blocks 4, so
    3 can still be had; an append that needs 4 is refused before anything changes, one that needs 3 fits."""
    spec = KvSpec(1, 32, 32, "float16")
    cache = PagedKVCache(4, 2, max_blocks=4)  # 2 blocks of 2 tokens
    cache.append(*random_kv(0, spec, 2))  # one block taken, one free
    assert (cache.pool.num_blocks, cache.pool.free_blocks) == (2, 1)
    before = (cache.offset, cache.block_table, cache.pool.free_list, cache.pool.num_blocks)
    with pytest.raises(PoolExhausted) as info:
        cache.append(*random_kv(1, spec, 8))
    assert (info.value.needed, info.value.available, info.value.max_blocks) == (4, 3, 4)
    assert (cache.offset, cache.block_table, cache.pool.free_list, cache.pool.num_blocks) == before
    cache.append(*random_kv(2, spec, 6))
    assert cache.offset == 8 and cache.pool.num_blocks == 4


def test_pool_alloc_and_grow_raise_pool_exhausted():
    """Each with its typed fields (needed, available: free plus the growth still allowed, max_blocks) and the
    pool as it was."""
    pool = BlockPool(1, 4, 1, 32, max_blocks=2)
    pool.alloc()
    before = (pool.num_blocks, pool.free_list)
    with pytest.raises(PoolExhausted) as info:
        pool.alloc()
    assert (info.value.needed, info.value.available, info.value.max_blocks) == (1, 0, 2)
    assert "1 block(s) needed, 0 available (max_blocks=2)" in str(info.value)
    with pytest.raises(PoolExhausted) as info:
        pool.grow(3)
    assert (info.value.needed, info.value.available, info.value.max_blocks) == (2, 1, 2)  # 2 more, 1 allowed
    assert (pool.num_blocks, pool.free_list) == before
    pool.grow(2)
    assert pool.alloc() == 1


def test_capacity_beyond_max_blocks_is_refused():
    with pytest.raises(ValueError, match="max_blocks"):
        PagedKVCache(100, 8, max_blocks=4)


@given(spec=kv_specs(quantized=None), seed=st.integers(0, 2**31))
def test_clone_has_its_own_free_list_and_arrays(spec, seed):
    cache = PagedKVCache(8, 4, quantization=spec.quantization)
    k, v = random_kv(seed, spec, 5)
    cache.append(k, v)
    twin = cache.clone()
    before = (cache.offset, cache.block_table, cache.pool.num_blocks, cache.pool.free_list)
    k2, v2 = random_kv(seed + 1, spec, 6)
    twin.append(k2, v2)  # allocates (the last free block) and grows the clone's pool
    assert (cache.offset, cache.block_table, cache.pool.num_blocks, cache.pool.free_list) == before
    assert twin.pool.num_blocks > cache.pool.num_blocks
    assert_bytes(cache.fetch()[0], host_bytes(stored_rows(spec, k)), "source after the clone's append")
    assert_accounting(cache, "source")
    assert_accounting(twin, "clone")


@given(spec=kv_specs(quantized=None), seed=st.integers(0, 2**31), tokens=st.integers(1, 24))
def test_restore_arrays_round_trips_state(spec, seed, tokens):
    cache = PagedKVCache(8, 4, quantization=spec.quantization)
    k, v = random_kv(seed, spec, tokens)
    cache.append(k, v)
    saved = [mx.array(a) for a in cache.state()]  # new array objects, as a restore from storage would give
    fresh = BlockPool(cache.pool.num_blocks, 4, spec.num_kv_heads, spec.head_dim, v_head_dim=spec.v_head_dim,
                      dtype=spec.dtype, quantization=spec.quantization)
    fresh.restore_arrays(saved, cache.block_table)
    assert fresh.free_blocks == fresh.num_blocks - len(cache.block_table)
    assert not set(fresh.free_list) & set(cache.block_table)
    # the rebuilt free list hands out low indices first (restore_arrays' contract): the stack's top is the lowest
    assert fresh.free_list == tuple(sorted(fresh.free_list, reverse=True))
    got_k, got_v = fresh.gather(cache.block_table)
    assert_bytes(got_k[:, :, :tokens], host_bytes(stored_rows(spec, k)), "restored keys")
    assert_bytes(got_v[:, :, :tokens], host_bytes(stored_rows(spec, v)), "restored values")


@pytest.mark.parametrize("occupied, free_list", [([0], (3, 2, 1)), ([2], (3, 1, 0)), ([3, 1], (2, 0)), ([], (3, 2, 1, 0))])
def test_restore_arrays_hands_out_low_indices_first(occupied, free_list):
    """A restored pool allocates like a new one: the free blocks in ascending order from the top of the stack."""
    pool = BlockPool(4, 4, 1, 32)
    for _ in range(3):  # a used pool: its own stack order must not survive the restore
        pool.alloc()
    pool.free(1)
    pool.restore_arrays(pool.arrays(), occupied)
    assert pool.free_list == free_list
    assert [pool.alloc() for _ in free_list] == sorted(free_list)


@given(spec=kv_specs(quantized=None), used=st.integers(0, 3), taken=st.integers(1, 4))
def test_clone_allocations_never_touch_the_source_free_list(spec, used, taken):
    # Without growth in between: a clone sharing the free-list stack would pop
    # the source's entries here, which the append-then-grow test above cannot see
    # (growth pushes and pops the same new blocks).
    pool = BlockPool(8, 4, spec.num_kv_heads, spec.head_dim, v_head_dim=spec.v_head_dim, dtype=spec.dtype,
                     quantization=spec.quantization)
    for _ in range(used):
        pool.alloc()
    before = pool.free_list
    twin = pool.clone()
    got = [twin.alloc() for _ in range(taken)]
    assert pool.free_list == before
    assert [pool.alloc() for _ in range(taken)] == got  # the same LIFO order, independently
    twin.free(got[0])
    assert got[0] not in pool.free_list
