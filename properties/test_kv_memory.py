"""Memory: append / view / extract / filter / merge / trim cycles keep MLX's active memory bounded.

The bound, per cycle, after evaluating the rows' state and collecting garbage:

    active - baseline <= live + planes * 2 * page_size + SMALL

* ``live``: the bytes the surviving rows' pools hold (``sum(row.nbytes)``);
  everything else (fetched K/V, views, extracted rows, replaced arrays) is
  garbage by then. Clones share arrays, which can only make the real figure
  smaller.
* ``planes * 2 * page_size``: MLX's buffer cache may satisfy a request with a
  cached buffer up to min(2x, size + 2 pages) larger (mlx
  backend/common/buffer_cache.h, ``reuse_from_cache``), and active memory
  counts the buffer's real size (measured: a 12288-byte pool plane landing in
  a freed 15360-byte buffer shows as 15360). One such slack per live plane.
* ``SMALL`` = 4 KiB: MLX's global RNG key and other scalars that outlive a
  cycle (16 bytes measured).

``live`` itself is bounded because rows are trimmed back under MAX_TOKENS and
the batch never exceeds MAX_ROWS: each pool is at most the x1.5 growth
sequence's first size that covers MAX_TOKENS + the largest append.
"""

from __future__ import annotations

import gc
import resource
import time

import mlx.core as mx
import pytest

from impl.kv import PagedKvRows, PagedKVCache, Quantization, next_pool_size, pool_blocks_for
from properties.strategies.kv import KvSpec, random_kv, young_heap

CYCLES = 40
BLOCK_SIZE = 8
CAPACITY = 16
MAX_TOKENS = 48
MAX_ROWS = 4
SMALL = 4096
SPECS = [KvSpec(2, 64, 64, "float16"), KvSpec(2, 64, 32, "bfloat16", Quantization(4, 32))]


def settle() -> int:
    """Active bytes once garbage is collected and MLX's stream has released its references."""
    gc.collect()
    mx.synchronize()
    time.sleep(0.01)  # buffers captured by finished CPU tasks are dropped on the stream thread
    return mx.get_active_memory()


def max_pool_blocks() -> int:
    blocks = max(1, pool_blocks_for(CAPACITY, BLOCK_SIZE))
    while blocks < pool_blocks_for(MAX_TOKENS + 2 * BLOCK_SIZE, BLOCK_SIZE):
        blocks = next_pool_size(blocks)
    return blocks


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_cycles_keep_active_memory_bounded(spec):
    with young_heap():  # settle()'s collections scan this test's objects, not the worker's whole heap
        baseline = settle()
        seed = 0

        def new_row(tokens: int) -> PagedKVCache:
            nonlocal seed
            seed += 1
            cache = PagedKVCache(CAPACITY, BLOCK_SIZE, quantization=spec.quantization)
            cache.append(*random_kv(seed, spec, tokens))
            return cache

        rows = PagedKvRows(CAPACITY, BLOCK_SIZE, quantization=spec.quantization)
        rows.merge_rows([new_row(5), new_row(17), new_row(30)])
        page = resource.getpagesize()
        worst = 0
        for cycle in range(CYCLES):
            seed += 1
            keys, values = rows.update_and_fetch(*random_kv(seed, spec, 1 + cycle % BLOCK_SIZE, rows.batch_size))
            mx.eval(keys, values)
            view = rows.append_and_fetch(*random_kv(seed + 10_000, spec, 1, rows.batch_size))
            mx.eval(view.rows[-1].fetch())
            extracted = rows.extract_row(cycle % rows.batch_size)
            rows.filter_rows([i for i in range(rows.batch_size) if i != cycle % rows.batch_size])
            if extracted.offset > MAX_TOKENS:
                extracted.trim(extracted.offset - MAX_TOKENS // 2)
            rows.merge_rows([rows, extracted])
            if rows.batch_size < MAX_ROWS and cycle % 3 == 0:
                rows.merge_rows([rows, new_row(1 + cycle % 20)])
            for cache in rows.rows:  # every row back under MAX_TOKENS
                if cache.offset > MAX_TOKENS:
                    cache.trim(cache.offset - MAX_TOKENS)
            del cache
            del keys, values, view, extracted
            mx.eval(rows.state())
            live = sum(row.nbytes for row in rows.rows)
            planes = len(rows.state())
            used = settle() - baseline
            bound = live + planes * 2 * page + SMALL
            assert used <= bound, f"cycle {cycle}: {used} active bytes > bound {bound} (live pools {live})"
            assert max(row.pool.num_blocks for row in rows.rows) <= max_pool_blocks()
            worst = max(worst, used)
        del rows
        assert settle() - baseline <= SMALL, "memory not returned after the rows were dropped"
