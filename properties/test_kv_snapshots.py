"""Snapshot immutability: views, clones and extracted rows never change after they are taken.

MLX Python arrays can be written in place (``a[i] = x`` rewrites the array
object for every holder), so the caches only ever replace arrays
(``mx.slice_update``, ``mx.concatenate``). Each test here takes a snapshot
(an ``append_and_fetch`` view, a ``clone()``, an ``extract_row``), then does
one more thing to the source (append, append through a growth, trim and
rewrite the same slots, filter, merge, explicit grow, drop the source and
collect garbage), poisons the source's unused slots with NaN, and requires the
snapshot to read the same bytes as before.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import mlx.core as mx
import pytest

from impl.kv import PagedKvRows, PagedKVCache, Quantization
from properties.strategies.kv import KvSpec, assert_bytes, host_bytes, poison_unused_slots, random_kv, young_heap

SPECS = [KvSpec(2, 32, 64, "float32"), KvSpec(1, 64, 32, "bfloat16"), KvSpec(2, 32, 32, "float16"),
         KvSpec(1, 64, 64, "bfloat16", Quantization(4, 32)), KvSpec(2, 64, 32, "float16", Quantization(8, 32))]
BLOCK_SIZE = 4
PREFIX = 7  # two blocks, the second partly filled: the next append writes into a shared block


def start_rows(spec: KvSpec) -> PagedKvRows:
    """Two rows (7 and 3 tokens) whose pools are exactly full, so the next block forces growth."""
    caches = []
    for seed, tokens in ((1, PREFIX), (2, 3)):
        cache = PagedKVCache(tokens, BLOCK_SIZE, quantization=spec.quantization)
        cache.append(*random_kv(seed, spec, tokens))
        caches.append(cache)
    rows = PagedKvRows(PREFIX, BLOCK_SIZE, quantization=spec.quantization)
    rows.merge_rows(caches)
    return rows


def append(rows, spec, tokens, seed=10):
    rows.append(*random_kv(seed, spec, tokens, rows.batch_size))


def then_append(rows, spec):
    append(rows, spec, 1)  # fills the partial block of row 0 in place


def then_append_with_growth(rows, spec):
    append(rows, spec, 2 * BLOCK_SIZE + 1)


def then_trim_and_rewrite(rows, spec):
    rows.trim(3)
    append(rows, spec, 3, seed=11)  # the very slots the snapshot reads, rewritten


def then_filter(rows, spec):
    rows.filter_rows([1])


def then_merge(rows, spec):
    rows.merge_rows([rows, rows.extract_row(0)])
    append(rows, spec, 2)


def then_grow(rows, spec):
    for row in rows.rows:
        row.pool.grow(row.pool.num_blocks + 3)
    append(rows, spec, 1)


def then_drop_everything(rows, spec):
    rows.filter_rows([])


AFTER = [then_append, then_append_with_growth, then_trim_and_rewrite, then_filter, then_merge, then_grow,
         then_drop_everything]


def take_view(rows, spec):
    return rows.append_and_fetch(*random_kv(5, spec, 1, rows.batch_size)).rows[0]


def take_clone(rows, spec):
    return rows.rows[0].clone()


def take_extracted_row(rows, spec):
    return rows.extract_row(0)


SNAPSHOTS = [take_view, take_clone, take_extracted_row]


@pytest.mark.parametrize("after", AFTER, ids=lambda f: f.__name__.removeprefix("then_"))
@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda f: f.__name__.removeprefix("take_"))
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.id)
def test_snapshot_reads_the_same_after(spec, snapshot, after):
    with young_heap():  # the collection below scans this test's objects, not the worker's heap
        rows = start_rows(spec)
        taken = snapshot(rows, spec)
        before = [host_bytes(a) for a in taken.fetch()]
        after(rows, spec)
        poison_unused_slots(rows)
        for got, expected, name in zip(taken.fetch(), before, ("keys", "values")):
            assert_bytes(got, expected, f"{snapshot.__name__} {name} after {after.__name__}")
        del rows
        gc.collect()
        for got, expected, name in zip(taken.fetch(), before, ("keys", "values")):
            assert_bytes(got, expected, f"{snapshot.__name__} {name} after its source was dropped")


def test_views_hold_their_own_block_table_and_length():
    spec = SPECS[0]
    rows = start_rows(spec)
    view = take_view(rows, spec)
    table, length = view.block_table.tolist(), view.length
    then_trim_and_rewrite(rows, spec)
    then_append_with_growth(rows, spec)
    assert (view.block_table.tolist(), view.length) == (table, length)
    with pytest.raises(AttributeError):
        view.length = 0  # frozen


def test_mlx_in_place_assignment_rewrites_the_array_for_every_holder(gate):
    """The MLX fact that makes functional updates necessary, recorded as a finding.

    The project does not rely on what ``a[i] = x`` does (impl/kv never assigns into a subscript:
    ``test_impl_kv_never_assigns_into_a_subscript``), so that is recorded, not asserted. What it does rely on is
    asserted: ``mx.slice_update`` and ``mx.concatenate`` leave their inputs unchanged, so an array a view or clone
    holds is a snapshot (impl/kv/pool.py, dense.py; this module's tests).
    """
    pool_keys = mx.zeros((4,))
    mx.eval(pool_keys)
    same_object, copied, sliced = pool_keys, mx.array(pool_keys), pool_keys[:2]
    functional = mx.slice_update(pool_keys, mx.array([9.0]), mx.array([1]), axes=(0,))
    pool_keys[0] = 5.0
    evidence = {"same_object_after": same_object.tolist(), "mx_array_copy_after": copied.tolist(),
                "slice_taken_before_after": sliced.tolist(), "slice_update_result": functional.tolist(),
                "mlx": mx.__version__}
    # MLX 0.32.4: in place for every holder of the object; copies, earlier slices and (lazy) functional results
    # taken before the write keep the old data.
    seen = {"rewrites the object for every holder": evidence["same_object_after"] == [5.0, 0.0, 0.0, 0.0],
            "mx.array(a) copies": evidence["mx_array_copy_after"] == [0.0] * 4,
            "earlier slices keep the old data": evidence["slice_taken_before_after"] == [0.0, 0.0],
            "mx.slice_update results keep the old data": evidence["slice_update_result"] == [0.0, 9.0, 0.0, 0.0]}
    title = ("In-place `a[i] = x` rewrites the mx.array object for every Python holder; mx.array(a) copies, "
             "earlier slices and mx.slice_update results keep the old data" if all(seen.values()) else
             "In-place `a[i] = x` on this MLX: " + "; ".join(f"{'' if ok else 'NOT: '}{what}"
                                                             for what, ok in seen.items()))
    gate.finding(title, {**evidence, "seen": seen}, kernel="paged_kv")

    # What the caches rely on: a functional update never writes into its input.
    held = mx.zeros((4,))
    mx.eval(held)
    updated = mx.slice_update(held, mx.array([9.0]), mx.array([1]), axes=(0,))
    grown = mx.concatenate([held, mx.ones((2,))])
    mx.eval(updated, grown)
    relied = (f"MLX {mx.__version__} changed a functional update: impl/kv's pools and dense cache replace their "
              f"arrays with mx.slice_update / mx.concatenate and views, clones and extracted rows hold the old arrays "
              f"as snapshots (impl/kv/view.py), which would then change under them")
    assert held.tolist() == [0.0] * 4, \
        f"mx.slice_update / mx.concatenate wrote into its input: {held.tolist()}. {relied}"
    assert updated.tolist() == [0.0, 9.0, 0.0, 0.0] and grown.tolist() == [0.0] * 4 + [1.0, 1.0], \
        f"slice_update gave {updated.tolist()}, concatenate {grown.tolist()}. {relied}"


def test_impl_kv_never_assigns_into_a_subscript():
    """No ``x[...] = y`` (or ``x[...] += y``) anywhere in impl/kv: every array update is functional."""
    package = Path(__file__).resolve().parents[1] / "impl" / "kv"
    offenders = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            offenders += [f"{path.name}:{node.lineno}" for t in targets if isinstance(t, ast.Subscript)]
    assert not offenders, f"in-place subscript assignment at {offenders}"


def test_views_are_compared_by_identity():
    """A view is the snapshot object itself: another view over the same rows, or a copy of a row's view, is
    another view (no field-wise equality: a view's arrays have no single truth value, and both view types keep
    the one rule), and each hashes as itself."""
    from dataclasses import replace

    from impl.kv import RowsAttentionView

    spec = KvSpec(2, 32, 32, "float16")
    view = start_rows(spec).append_and_fetch(*random_kv(9, spec, 1, 2))
    again = RowsAttentionView(view.rows, view.left_pad)
    assert view == view and again != view and len({view, again}) == 2
    row = view.rows[0]
    assert replace(row) != row and len({row, replace(row)}) == 2
