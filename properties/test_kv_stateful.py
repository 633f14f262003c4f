"""Stateful test: random programs over PagedKvRows / PagedKVCache against a NumPy model.

The model is, per row, the token rows the cache must give back (NumPy arrays
[H, L, D] / [H, L, Dv] in the cache dtype; for quantized pools the rows'
``mx.quantize -> mx.dequantize``). Rules: batched append (update_and_fetch),
append_and_fetch (views), extract_row, append to an extracted cache, clone,
merge_rows, filter_rows, trim, pool growth, dropping a cache. After every step
the invariants run on a pool whose unused slots were just poisoned with NaN:

* every row and every detached cache reads back its model byte for byte
  (batched reads: left-padded with zeros to the longest row);
* block accounting: table length == ceil(offset / block_size), no block in two
  table slots, no table block on the free list, free + used == num_blocks;
* every view and snapshot taken earlier still reads the bytes it read when
  it was taken, whatever happened since (appends, trims, growth, filter,
  merge, its source dropped).

One machine per storage kind: float32, float16, bfloat16, and quantized
(bits, group size and dtype drawn).
"""

from __future__ import annotations

import gc

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from impl.kv import PagedKVCache, PagedKvRows
from properties.strategies.kv import (assert_accounting, assert_bytes, block_edge_lengths, host_bytes, kv_specs,
                                      poison_unused_slots, random_kv, stored_rows)

MACHINE_BLOCK_SIZES = (1, 2, 8, 16)  # 32/64 are covered by test_kv_blocks; small blocks cross edges often
MAX_TOKENS = 96  # per row; keeps each step well under 10 ms
MAX_ROWS = 4
MAX_SNAPSHOTS = 6  # older snapshots are released (and so also exercise "source dropped")


def model_append(row: tuple[np.ndarray, np.ndarray], k: np.ndarray, v: np.ndarray):
    return np.concatenate([row[0], k], axis=1), np.concatenate([row[1], v], axis=1)


def left_padded(rows: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The batched read a model predicts: rows left-padded with zeros to the longest, stacked."""
    longest = max(k.shape[1] for k, _ in rows)

    def pad(a: np.ndarray) -> np.ndarray:
        zeros = np.zeros((a.shape[0], longest - a.shape[1], a.shape[2]), dtype=a.dtype)
        return np.concatenate([zeros, a], axis=1)

    return np.stack([pad(k) for k, _ in rows]), np.stack([pad(v) for _, v in rows])


class PagedRowsMachine(RuleBasedStateMachine):
    SPECS = kv_specs(quantized=False)

    def __init__(self):
        super().__init__()
        self.rows: PagedKvRows | None = None
        self.model: list[tuple[np.ndarray, np.ndarray]] = []
        self.detached: list[tuple[PagedKVCache, tuple[np.ndarray, np.ndarray]]] = []
        self.snapshots: list[tuple[object, list[tuple[np.ndarray, np.ndarray]]]] = []
        self.seed = 0
        # drop_detached's collection then scans this example's objects only (young_heap); teardown undoes it
        # (Hypothesis calls it in a finally).
        gc.freeze()

    def teardown(self):
        gc.unfreeze()

    # --- helpers ----------------------------------------------------------

    def fresh(self, tokens: int, batch: int = 1):
        """New random K/V plus what the model stores for them (per batch row, [H, L, D])."""
        self.seed += 1
        k, v = random_kv(self.seed, self.spec, tokens, batch)
        ks, vs = host_bytes(stored_rows(self.spec, k)), host_bytes(stored_rows(self.spec, v))
        return k, v, [(ks[b], vs[b]) for b in range(batch)]

    def new_cache(self, tokens: int) -> tuple[PagedKVCache, tuple[np.ndarray, np.ndarray]]:
        cache = PagedKVCache(self.capacity, self.block_size, quantization=self.spec.quantization)
        k, v, stored = self.fresh(tokens)
        cache.append(k, v)
        return cache, stored[0]

    def keep_snapshot(self, reader, expected) -> None:
        self.snapshots.append((reader, expected))
        del self.snapshots[:-MAX_SNAPSHOTS]

    # --- rules ------------------------------------------------------------

    @initialize(data=st.data())
    def start(self, data):
        self.spec = data.draw(self.SPECS, label="spec")
        self.block_size = data.draw(st.sampled_from(MACHINE_BLOCK_SIZES), label="block_size")
        self.capacity = data.draw(st.integers(0, 3 * self.block_size), label="capacity_tokens")
        self.rows = PagedKvRows(self.capacity, self.block_size, quantization=self.spec.quantization)
        lengths = data.draw(st.lists(block_edge_lengths(self.block_size), min_size=1, max_size=3), label="prefill")
        sources = [self.new_cache(n) for n in lengths]
        self.rows.merge_rows([c for c, _ in sources])
        self.model = [m for _, m in sources]

    @precondition(lambda self: self.rows.batch_size > 0)
    @rule(data=st.data())
    def append(self, data):
        n = data.draw(block_edge_lengths(self.block_size), label="append")
        if self.rows.offset + n > MAX_TOKENS:
            n = 1
        k, v, stored = self.fresh(n, self.rows.batch_size)
        fetched_k, fetched_v = self.rows.update_and_fetch(k, v)
        self.model = [model_append(m, *s) for m, s in zip(self.model, stored)]
        expected_k, expected_v = left_padded(self.model)
        assert_bytes(fetched_k, expected_k, "update_and_fetch keys")
        assert_bytes(fetched_v, expected_v, "update_and_fetch values")

    @precondition(lambda self: self.rows.batch_size > 0)
    @rule(data=st.data())
    def append_and_fetch(self, data):
        n = data.draw(st.integers(1, 3), label="append_and_fetch")
        k, v, stored = self.fresh(n, self.rows.batch_size)
        view = self.rows.append_and_fetch(k, v)
        self.model = [model_append(m, *s) for m, s in zip(self.model, stored)]
        self.keep_snapshot(view, list(self.model))

    @precondition(lambda self: self.rows.batch_size > 0)
    @rule(data=st.data())
    def extract_row(self, data):
        i = data.draw(st.integers(0, self.rows.batch_size - 1), label="extract row")
        self.detached.append((self.rows.extract_row(i), self.model[i]))

    @precondition(lambda self: self.detached)
    @rule(data=st.data())
    def append_to_detached(self, data):
        i = data.draw(st.integers(0, len(self.detached) - 1), label="detached")
        cache, model = self.detached[i]
        n = data.draw(block_edge_lengths(self.block_size), label="append")
        if cache.offset + n > MAX_TOKENS:
            return
        k, v, stored = self.fresh(n)
        view = cache.append_and_fetch(k, v)
        model = model_append(model, *stored[0])
        self.detached[i] = (cache, model)
        self.keep_snapshot(view, [model])

    @precondition(lambda self: self.detached)
    @rule(data=st.data())
    def clone_detached(self, data):
        cache, model = self.detached[data.draw(st.integers(0, len(self.detached) - 1), label="clone")]
        self.detached.append((cache.clone(), model))

    @precondition(lambda self: self.detached)
    @rule(data=st.data())
    def drop_detached(self, data):
        """Views and merged rows taken from a cache outlive it."""
        del self.detached[data.draw(st.integers(0, len(self.detached) - 1), label="drop")]
        gc.collect()  # cycles included: the heap older than this example is frozen (__init__), so this is cheap

    @precondition(lambda self: self.detached and self.rows.batch_size < MAX_ROWS)
    @rule(data=st.data())
    def merge_detached(self, data):
        i = data.draw(st.integers(0, len(self.detached) - 1), label="merge")
        cache, model = self.detached[i]
        if cache.pool is None:
            return
        self.rows.merge_rows([self.rows, cache])
        self.model.append(model)

    @precondition(lambda self: self.rows.batch_size < MAX_ROWS)
    @rule(data=st.data())
    def merge_new(self, data):
        cache, model = self.new_cache(data.draw(block_edge_lengths(self.block_size), label="new row"))
        front = data.draw(st.booleans(), label="front")
        self.rows.merge_rows([cache, self.rows] if front else [self.rows, cache])
        self.model = [model] + self.model if front else self.model + [model]

    @precondition(lambda self: self.rows.batch_size > 0)
    @rule(data=st.data())
    def filter_rows(self, data):
        order = data.draw(st.permutations(range(self.rows.batch_size)), label="order")
        keep = order[:data.draw(st.integers(0, len(order)), label="kept")]
        self.rows.filter_rows(keep)
        self.model = [self.model[i] for i in keep]

    @precondition(lambda self: self.rows.batch_size > 0 and min(self.rows.row_offsets) > 0)
    @rule(data=st.data())
    def trim(self, data):
        n = data.draw(st.integers(0, min(self.rows.row_offsets)), label="trim")
        assert self.rows.trim(n) == n
        self.model = [(k[:, :k.shape[1] - n], v[:, :v.shape[1] - n]) for k, v in self.model]

    @precondition(lambda self: self.rows.batch_size > 0)
    @rule(data=st.data())
    def grow(self, data):
        row = self.rows.rows[data.draw(st.integers(0, self.rows.batch_size - 1), label="grow row")]
        row.pool.grow(row.pool.num_blocks + data.draw(st.integers(0, 3), label="extra blocks"))

    # --- invariants -------------------------------------------------------

    @invariant()
    def rows_match_model(self):
        if self.rows is None:
            return
        poison_unused_slots(self.rows)
        assert self.rows.row_offsets == [k.shape[1] for k, _ in self.model]
        for b, (row, (k, v)) in enumerate(zip(self.rows.rows, self.model)):
            assert_accounting(row, f"row {b}")
            if row.offset:
                got_k, got_v = row.fetch()
                assert_bytes(got_k, k[None], f"row {b} keys")
                assert_bytes(got_v, v[None], f"row {b} values")
        if self.rows.batch_size > 1 and self.rows.offset:
            got_k, got_v = self.rows.fetch()
            expected_k, expected_v = left_padded(self.model)
            assert_bytes(got_k, expected_k, "batched keys")
            assert_bytes(got_v, expected_v, "batched values")

    @invariant()
    def detached_match_model(self):
        for i, (cache, (k, v)) in enumerate(self.detached):
            poison_unused_slots(cache)
            assert_accounting(cache, f"detached {i}")
            assert cache.offset == k.shape[1]
            if cache.offset:
                got_k, got_v = cache.fetch()
                assert_bytes(got_k, k[None], f"detached {i} keys")
                assert_bytes(got_v, v[None], f"detached {i} values")

    @invariant()
    def snapshots_unchanged(self):
        for s, (view, model) in enumerate(self.snapshots):
            views = getattr(view, "rows", (view,))
            for r, (row_view, (k, v)) in enumerate(zip(views, model)):
                got_k, got_v = row_view.fetch()
                assert_bytes(got_k, k[None], f"snapshot {s} row {r} keys")
                assert_bytes(got_v, v[None], f"snapshot {s} row {r} values")


# Each example is a whole random program of up to STEPS rules with every invariant
# checked after each; the profile's example count applies unchanged (100 under ci,
# about 5 s per storage kind on one core, measured). STEPS is the only override:
# 25 steps reach growth, trims to zero and 4-row merges while keeping one failing
# program short enough to shrink.
STEPS = 25
MACHINE_SETTINGS = settings(stateful_step_count=STEPS)


class Float32Rows(PagedRowsMachine):
    SPECS = kv_specs(dtypes=("float32",), quantized=False)


class Float16Rows(PagedRowsMachine):
    SPECS = kv_specs(dtypes=("float16",), quantized=False)


class BFloat16Rows(PagedRowsMachine):
    SPECS = kv_specs(dtypes=("bfloat16",), quantized=False)


class QuantizedRows(PagedRowsMachine):
    SPECS = kv_specs(quantized=True)


TestFloat32Rows = Float32Rows.TestCase
TestFloat16Rows = Float16Rows.TestCase
TestBFloat16Rows = BFloat16Rows.TestCase
TestQuantizedRows = QuantizedRows.TestCase
for _case in (TestFloat32Rows, TestFloat16Rows, TestBFloat16Rows, TestQuantizedRows):
    _case.settings = MACHINE_SETTINGS
del _case  # a module-level TestCase name would be collected a second time
