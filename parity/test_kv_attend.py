"""The attention view's two paths (``PagedAttentionView.attend``), kernel "paged_kv".

* Control path (not direct; n > 8; array masks; mask None with n > 1): the
  gathered, length-sliced (dequantized) K/V go to
  ``mx.fast.scaled_dot_product_attention``; gated bit-exact against the same
  call on the dense cache's K/V (for quantized pools: on
  ``mx.dequantize(mx.quantize(rows))``). Unused slots are NaN-poisoned.
* Dispatch: which (direct, n, mask) combinations call
  ``impl.paged_attention.paged_attention`` and with which arguments, checked
  with a recording stand-in module (so it holds whatever that kernel does).
* Direct path with the real kernel: ``view.attend`` is bit-exact with calling
  ``paged_attention`` on the pool, block table and length the view
  snapshotted, per arm, even after the cache moved on (appends, trim, growth).
* ``RowsAttentionView``: each row attends its own view; a batched mask array
  is cut to the row (its batch slice, left-padded columns dropped), which is
  bit-exact with the row's own causal mask.
"""

from __future__ import annotations

import sys
import types

import mlx.core as mx
import numpy as np
import pytest

from impl.kv import KVCache, PagedAttentionView, PagedKVCache, PagedKvRows, Quantization
from impl.masks import batched_decode_mask, create_causal_mask
from properties.strategies.kv import KvSpec, poison_unused_slots, random_kv, stored_rows

KERNEL = "paged_kv"
SPECS = [KvSpec(2, 64, 32, "float32"), KvSpec(1, 32, 32, "float16"), KvSpec(2, 64, 64, "bfloat16"),
         KvSpec(2, 64, 64, "float16", Quantization(4, 32)), KvSpec(1, 64, 64, "bfloat16", Quantization(8, 64))]
MASKS = ["none", "causal", "array"]
QUERY_HEADS = 4
SCALE = 0.125


def filled(spec: KvSpec, tokens: int, block_size: int = 8, direct: bool = False) -> tuple[PagedKVCache, list]:
    """A cache holding ``tokens`` rows appended in three uneven pieces, and the dense K/V it must return."""
    cache = PagedKVCache(8, block_size, direct=direct, quantization=spec.quantization)
    pieces = [tokens // 3, tokens - tokens // 3 - 1, 1]
    dense = KVCache()
    for seed, n in enumerate(p for p in pieces if p):
        k, v = random_kv(seed, spec, n)
        cache.append(k, v)
        dense_k, dense_v = dense.update_and_fetch(stored_rows(spec, k), stored_rows(spec, v))
    return cache, [dense_k, dense_v]


def mask_for(kind: str, n: int, length: int):
    return {"none": None, "causal": "causal", "array": create_causal_mask(n, length - n)}[kind]


@pytest.mark.parametrize("n", [1, 3, 9])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_control_path_is_bit_exact_with_sdpa_on_dense_kv(gate, spec, mask, n):
    cache, (k, v) = filled(spec, 37)
    view = cache.view()
    poison_unused_slots(cache)
    q = random_kv(99, KvSpec(QUERY_HEADS, spec.head_dim, spec.head_dim, spec.dtype_name), n)[0]
    got = view.attend(q, SCALE, mask_for(mask, n, view.length))
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=SCALE, mask=mask_for(mask, n, view.length))
    gate.bit_exact(got, want, kernel=KERNEL, case=f"{spec.id}-n{n}-{mask}",
                   what="view.attend control path vs SDPA on the dense cache's K/V")


class Recorder:
    """Stand-in for impl.paged_attention: records its calls, returns a marker."""

    def __init__(self):
        self.calls = []

    def paged_attention(self, q, storage, block_table, length, *, scale, arm=None):
        self.calls.append((q, storage, block_table, length, scale, arm))
        return mx.full((1, q.shape[1], q.shape[2], storage.v_head_dim), 7.0, dtype=q.dtype)


@pytest.fixture
def stand_in(monkeypatch):
    recorder = Recorder()
    module = types.ModuleType("impl.paged_attention")
    module.paged_attention = recorder.paged_attention
    monkeypatch.setitem(sys.modules, "impl.paged_attention", module)
    return recorder


# (direct, n, mask) -> whether attend goes to the direct kernel.
DISPATCH = [
    (True, 1, "none", True), (True, 1, "causal", True), (True, 8, "causal", True),
    (True, 2, "none", False),  # None with n > 1 means "no causal mask": the kernel always masks
    (True, 9, "causal", False), (True, 3, "array", False), (True, 1, "array", False),
    (False, 1, "none", False), (False, 3, "causal", False),
]


@pytest.mark.parametrize("direct, n, mask, expect_direct", DISPATCH,
                         ids=[f"direct{d}-n{n}-{m}" for d, n, m, _ in DISPATCH])
def test_dispatch_between_direct_kernel_and_control_path(stand_in, direct, n, mask, expect_direct):
    spec = SPECS[0]
    cache, _ = filled(spec, 20, direct=direct)
    view = cache.view()
    q = random_kv(5, KvSpec(QUERY_HEADS, spec.head_dim, spec.head_dim, spec.dtype_name), n)[0]
    out = view.attend(q, SCALE, mask_for(mask, n, view.length), arm="graph")
    assert view.uses_direct(n, mask_for(mask, n, view.length)) == expect_direct
    if not expect_direct:
        assert stand_in.calls == [] and not mx.all(out == 7.0).item()
        return
    (got_q, storage, table, length, scale, arm), = stand_in.calls
    # the view hands the kernel its frozen table (checking it then reads no device array and converts nothing)
    assert got_q is q and storage is view and table is view.frozen_table
    assert not table.host.flags.writeable and table.host.tolist() == np.array(view.block_table).tolist()
    assert (length, scale, arm) == (view.length, SCALE, "graph")
    assert mx.all(out == 7.0).item()


@pytest.mark.parametrize("n", [1, 4, 8])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_direct_path_reads_the_snapshot_the_view_took(gate, arm, spec, n):
    from impl.paged_attention import paged_attention

    cache, _ = filled(spec, 70, direct=True)
    view = cache.view()
    pool = cache.pool.clone()  # the pool as the view saw it
    table, length = cache.block_table, cache.offset
    q = random_kv(7, KvSpec(QUERY_HEADS, spec.head_dim, spec.head_dim, spec.dtype_name), n)[0]
    cache.trim(20)
    cache.append(*random_kv(8, spec, 40))  # rewrites the trimmed slots and grows the pool
    poison_unused_slots(cache)
    got = view.attend(q, SCALE, "causal", arm=arm)
    want = paged_attention(q, pool, table, length, scale=SCALE, arm=arm)
    gate.bit_exact(got, want, kernel=KERNEL, arm=arm, case=f"{spec.id}-n{n}",
                   what="view.attend direct path vs paged_attention on the snapshotted pool")


def rows_of(spec: KvSpec, lengths: list[int]) -> PagedKvRows:
    rows = PagedKvRows(8, 4, quantization=spec.quantization)
    caches = []
    for b, n in enumerate(lengths):
        cache = PagedKVCache(8, 4, quantization=spec.quantization)
        cache.append(*random_kv(b, spec, n))
        caches.append(cache)
    rows.merge_rows(caches)
    return rows


@pytest.mark.parametrize("lengths", [[9, 20, 14], [9, 20]], ids=["3rows", "2rows"])
@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("spec", SPECS[:2] + SPECS[3:4], ids=lambda s: s.id)
def test_rows_view_cuts_a_batched_mask_to_each_row(gate, spec, window, lengths):
    rows = rows_of(spec, lengths)
    n = 3
    mask = batched_decode_mask(rows.batch_size, n, rows.offset + n, rows.left_pad, window)
    view = rows.append_and_fetch(*random_kv(50, spec, n, rows.batch_size))
    q = random_kv(51, KvSpec(QUERY_HEADS, spec.head_dim, spec.head_dim, spec.dtype_name), n, rows.batch_size)[0]
    got = view.attend(q, SCALE, mask)
    want = mx.concatenate([
        row.attend(q[b:b + 1], SCALE, create_causal_mask(n, row.length - n, window))
        for b, row in enumerate(view.rows)])
    gate.bit_exact(got, want, kernel=KERNEL, case=f"{spec.id}-w{window}-{len(lengths)}rows",
                   what="batched mask cut to each row vs the row's own causal mask")


@pytest.mark.parametrize("shape", ["4d", "2d"])
def test_rows_view_gives_a_mask_of_batch_one_to_every_row(gate, shape):
    """A mask of batch 1 ([1, 1, n, total] or [n, total]) is every row's: each gets its columns past its left
    padding (its batch slice would be empty for every row but the first)."""
    spec = SPECS[1]
    rows = rows_of(spec, [9, 20])
    n = 3
    total = rows.offset + n
    shared = (mx.arange(total)[None, :] % 3 != 1) | (mx.arange(n)[:, None] == 0)  # some keys hidden from rows 1, 2
    mask = shared[None, None] if shape == "4d" else shared
    view = rows.append_and_fetch(*random_kv(52, spec, n, rows.batch_size))
    q = random_kv(53, KvSpec(QUERY_HEADS, spec.head_dim, spec.head_dim, spec.dtype_name), n, rows.batch_size)[0]
    got = view.attend(q, SCALE, mask)
    want = mx.concatenate([row.attend(q[b:b + 1], SCALE, shared[:, view.left_pad[b]:])
                           for b, row in enumerate(view.rows)])
    gate.bit_exact(got, want, kernel=KERNEL, case=f"{spec.id}-shared-{shape}",
                   what="a batch-1 mask cut to each row's own keys vs the row attending that cut")


def test_rows_view_with_causal_string_attends_each_row_bottom_right():
    spec = SPECS[0]
    rows = PagedKvRows(8, 4)
    caches = []
    for b, n in enumerate([5, 11]):
        cache = PagedKVCache(8, 4)
        cache.append(*random_kv(b, spec, n))
        caches.append(cache)
    rows.merge_rows(caches)
    view = rows.append_and_fetch(*random_kv(3, spec, 2, 2))
    q = random_kv(4, KvSpec(QUERY_HEADS, spec.head_dim, spec.head_dim, spec.dtype_name), 2, 2)[0]
    got = view.attend(q, SCALE, "causal")
    for b, row in enumerate(view.rows):
        assert mx.array_equal(got[b:b + 1], row.attend(q[b:b + 1], SCALE, "causal")).item()
    assert isinstance(view.rows[0], PagedAttentionView) and view.left_pad == (6, 0)


def test_views_share_one_table_snapshot_until_the_table_changes(gate):
    """Views of a cache reuse one frozen table while no block is added or freed (converting a
    table costs ~us per entry), and a change makes a new one without touching older views."""
    spec = SPECS[0]
    cache = PagedKVCache(8, 4, direct=True)
    seen = []

    def step(tokens):
        cache.append(*random_kv(len(seen), spec, tokens))
        view = cache.view()
        seen.append((view, view.host_block_table.tolist()))
        return view

    first, same_block = step(3), step(1)  # 4 tokens: still one block
    assert same_block.host_block_table is first.host_block_table
    grown = step(1)  # a second block
    assert grown.host_block_table is not first.host_block_table
    cache.trim(1)
    trimmed = cache.view()
    assert trimmed.host_block_table is not grown.host_block_table
    for view, table in seen:  # every snapshot still holds the table of its moment
        gate.equal(view.host_block_table, np.array(table), kernel=KERNEL, case="snapshot-reuse",
                   what="a view's host table after later appends and trims")
        gate.equal(np.array(view.block_table), np.array(table), kernel=KERNEL, case="snapshot-reuse",
                   what="a view's device table equals its host copy")
    gate.equal(trimmed.host_block_table, np.array(seen[0][1]), kernel=KERNEL, case="snapshot-reuse",
               what="the table after trimming back to one block")
