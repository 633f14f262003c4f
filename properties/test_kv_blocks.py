"""Block boundaries: appends of every length around block edges land where the contract says.

For block sizes {1, 2, 8, 16, 32, 64} and append schedules drawn around the
edges (1, bs - 1, bs, bs + 1, k * bs + 1), with the unused pool slots
poisoned with NaN before every read:

* ``update_and_fetch`` returns exactly the rows appended so far (bytes);
* token t is stored in physical block ``block_table[t // bs]`` at row
  ``t % bs`` (read straight from the pool planes);
* the table holds exactly ceil(offset / bs) blocks, each once;
* a fresh pool hands out blocks 0, 1, 2, ... in order.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.kv import PagedKVCache, gather_blocks, pool_blocks_for
from properties.strategies.kv import (BLOCK_SIZES, append_schedules, assert_accounting, assert_bytes, host_bytes,
                                      kv_specs, poison_unused_slots, random_kv, stored_rows)


@st.composite
def block_cases(draw, quantized: bool | None = None):
    block_size = draw(st.sampled_from(BLOCK_SIZES), label="block_size")
    spec = draw(kv_specs(quantized=quantized), label="spec")
    schedule = draw(append_schedules(block_size, max_tokens=4 * block_size + 8), label="schedule")
    capacity = draw(st.integers(0, sum(schedule)), label="capacity_tokens")
    return block_size, spec, schedule, capacity, draw(st.integers(0, 2**31), label="seed")


@given(block_cases(quantized=None))
def test_appends_across_block_edges_read_back_exactly(case):
    block_size, spec, schedule, capacity, seed = case
    cache = PagedKVCache(capacity, block_size, quantization=spec.quantization)
    expected_k = expected_v = None
    for step, n in enumerate(schedule):
        k, v = random_kv(seed + step, spec, n)
        poison_unused_slots(cache)
        got_k, got_v = cache.update_and_fetch(k, v)
        sk, sv = host_bytes(stored_rows(spec, k)), host_bytes(stored_rows(spec, v))
        expected_k = sk if expected_k is None else np.concatenate([expected_k, sk], axis=2)
        expected_v = sv if expected_v is None else np.concatenate([expected_v, sv], axis=2)
        assert_bytes(got_k, expected_k, f"keys after append {step} of {n}")
        assert_bytes(got_v, expected_v, f"values after append {step} of {n}")
        assert_accounting(cache, f"after append {step}")
    assert cache.offset == sum(schedule)


@given(block_cases(quantized=False))
def test_token_t_lives_in_block_table_t_div_bs_at_row_t_mod_bs(case):
    block_size, spec, schedule, capacity, seed = case
    cache = PagedKVCache(capacity, block_size)
    rows = []
    for step, n in enumerate(schedule):
        k, v = random_kv(seed + step, spec, n)
        cache.append(k, v)
        rows.append(host_bytes(k)[0])
    rows = np.concatenate(rows, axis=1)  # [H, offset, D]
    pool_keys = host_bytes(cache.pool.keys)  # [blocks, H, bs, D]
    table = cache.block_table
    for t in range(cache.offset):
        stored = pool_keys[table[t // block_size], :, t % block_size]
        assert stored.tobytes() == rows[:, t].tobytes(), f"token {t} is not at block {table[t // block_size]}"


@given(block_size=st.sampled_from(BLOCK_SIZES), tokens=st.integers(1, 200))
def test_fresh_pool_hands_out_low_blocks_first(block_size, tokens):
    spec_k = mx.zeros((1, 1, tokens, 32), mx.float16)
    cache = PagedKVCache(tokens, block_size)
    cache.append(spec_k, spec_k)
    blocks = pool_blocks_for(tokens, block_size)
    assert cache.block_table == tuple(range(blocks))
    assert cache.pool.num_blocks == blocks  # sized from capacity: no growth needed
    assert cache.pool.free_blocks == 0


@given(block_cases(quantized=False))
def test_gather_lays_blocks_end_to_end_in_table_order(case):
    block_size, spec, schedule, capacity, seed = case
    cache = PagedKVCache(capacity, block_size)
    k, v = random_kv(seed, spec, sum(schedule))
    cache.append(k, v)
    gathered = host_bytes(gather_blocks(cache.pool.keys, mx.array(cache.block_table, dtype=mx.int32)))
    pool = host_bytes(cache.pool.keys)
    for i, block in enumerate(cache.block_table):
        assert gathered[0, :, i * block_size:(i + 1) * block_size].tobytes() == pool[block].tobytes()
