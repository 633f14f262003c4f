"""Properties of ``impl.block_table.BlockTable`` and of paged attention fed one.

* ``BlockTable.of`` keeps the entries (host, device, padded copy; the padding is zeros up to a
  power of two), is a copy (editing the caller's array later changes nothing) and is read-only;
* paged attention given a ``BlockTable`` is bit-identical to the same call given the list, and the
  frozen table's pool check refuses exactly what the list path refuses (one bad entry anywhere);
* a table the list path would refuse is never served from the conversion cache (an int64 entry
  that wraps to a valid int32 one must not alias a cached table);
* ``freeze`` converts each distinct content once while it stays among the 16 most recently used
  (``_FROZEN_SIZE``, a few sequences' tables per decode step) and converts it again once it is not;
* every int32 entry is kept (the pool check refuses negative ones, not the conversion) and one
  past int32 either way is refused;
* bad input raises TypeError / ValueError naming the argument, from ``BlockTable.of`` and ``freeze``
  alike.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.block_table import BlockTable, freeze, padded_length
from impl.paged_attention import paged_attention
from properties import strategies as sts

ENTRIES = st.lists(st.integers(0, 2**31 - 1), max_size=300)


@given(entries=ENTRIES, kind=st.sampled_from(["list", "numpy64", "numpy32", "mlx"]))
def test_entries_are_kept_and_padded_with_zeros(entries, kind):
    given_as = {"list": lambda e: e, "numpy64": lambda e: np.array(e, np.int64),
                "numpy32": lambda e: np.array(e, np.int64).astype(np.int32),
                "mlx": lambda e: mx.array(np.array(e, np.int64).astype(np.int32))}[kind](entries)
    table = BlockTable.of(given_as)
    assert table.host.dtype == np.int32 and table.host.tolist() == entries
    assert np.array(table.device).tolist() == entries and table.device.dtype == mx.int32
    padded = np.array(table.padded)
    size = padded.size
    assert size >= max(len(entries), 1) and size & (size - 1) == 0 and size < 2 * max(len(entries), 1)
    assert padded[:len(entries)].tolist() == entries and not padded[len(entries):].any()
    assert len(table) == len(entries)
    assert (table.smallest, table.largest) == ((min(entries), max(entries)) if entries else (0, -1))


def test_padded_length_is_the_next_power_of_two():
    assert [padded_length(n) for n in (0, 1, 2, 3, 4, 5, 8, 9, 1000)] == [1, 1, 2, 4, 4, 8, 8, 16, 1024]
    assert padded_length(np.int64(5)) == 8


@pytest.mark.parametrize("count, error", [(2.5, TypeError), (-5, ValueError), (True, TypeError)])
def test_padded_length_refuses_what_is_not_a_count(count, error):
    with pytest.raises(error, match="count"):
        padded_length(count)


def test_unsigned_64_bit_tables_are_integer_tables():
    assert BlockTable.of(mx.array([3, 1], dtype=mx.uint64)).host.tolist() == [3, 1]
    with pytest.raises(ValueError, match="int32"):
        BlockTable.of(mx.array([2**32 + 1], dtype=mx.uint64))


def test_is_a_read_only_copy():
    source = np.array([3, 1, 2], np.int32)
    table = BlockTable.of(source)
    source[0] = 7
    assert table.host.tolist() == [3, 1, 2]
    with pytest.raises(ValueError):
        table.host[0] = 5
    assert BlockTable.of(table) is table


@pytest.mark.parametrize("entries, error, words", [
    ("abc", TypeError, "block_table"),
    (3, TypeError, "block_table"),
    ([1.5, 2.0], ValueError, "integers"),
    (np.zeros((2, 2), np.int32), ValueError, "1-D"),
    (mx.array([1.0, 2.0]), ValueError, "integers"),
    (np.array([2**31], np.int64), ValueError, "int32"),
    ([[1], [2, 3]], ValueError, "block_table must be a flat sequence"),
    ([True, 1], TypeError, "bools"),  # NumPy made it [1, 1]: a bool is never an int
    ((2, np.True_), TypeError, "bools"),
    (np.array(3), ValueError, "1-D"),  # a 0-d table
    (mx.array(3), ValueError, "1-D"),
    (np.int64(3), TypeError, "block_table"),
    ([-2**31 - 1], ValueError, "int32"),  # one below int32 (its range is [-2**31, 2**31 - 1])
    (np.array([0, -2**31 - 1], np.int64), ValueError, "int32"),
    (np.array([-2**32 + 1], np.int64), ValueError, "int32"),  # wraps to int32 1
    ([2**31], ValueError, "int32"),
])
@pytest.mark.parametrize("convert", [BlockTable.of, freeze], ids=["of", "freeze"])
def test_bad_input_names_the_argument(convert, entries, error, words):
    with pytest.raises(error, match=words):
        convert(entries)


@pytest.mark.parametrize("entries", [[-2**31], [2**31 - 1], [-2**31, 0, 2**31 - 1]])
@pytest.mark.parametrize("kind", ["list", "numpy64", "mlx64"])
def test_every_int32_entry_is_kept(entries, kind):
    """The conversion keeps any int32 (refusing a negative entry is the pool check's: ``check_pool``)."""
    given_as = {"list": list, "numpy64": lambda e: np.array(e, np.int64),
                "mlx64": lambda e: mx.array(e, dtype=mx.int64)}[kind](entries)
    for table in (BlockTable.of(given_as), freeze(given_as)):
        assert table.host.tolist() == entries
        assert (table.smallest, table.largest) == (min(entries), max(entries))


def test_freeze_converts_a_content_once_while_it_is_recent():
    """``freeze`` hands the same frozen table back for the same entries (a list or an int64 array: one
    conversion and transfer per step, not per layer), keeps the 16 most recently used contents and converts
    the least recently used one again once 16 others came after it."""
    base = 7_000_000  # entries no other test freezes, so the cache starts without them
    first = freeze([base])
    assert freeze([base]) is first and freeze(np.array([base], np.int64)) is first
    assert freeze(np.array([base], np.int32)) is not first  # another dtype, another key
    recent = [freeze([base + i]) for i in range(1, 15)]  # with [base] as int32: 15 came after [base]
    assert freeze([base]) is first  # 16 contents in all, the cache's size: still kept, now the newest
    assert all(freeze([base + i]) is table for i, table in enumerate(recent, 1))  # each the newest in turn
    freeze(np.array([base], np.int32))  # [base] as int64 is now the least recently used of the 16
    freeze([base + 15])  # a 17th content: the least recently used goes
    again = freeze([base])
    assert again is not first and again.host.tolist() == [base]


def small_case(**overrides):
    params = dict(dtype="float32", hq=4, hkv=2, n=2, dk=64, dv=64, block_size=8, length=37)
    return sts.build_paged_case(np.random.default_rng(3), **(params | overrides))


# The gate fixture is a stateless recorder: sharing it across examples is intended.
@settings(max_examples=20, deadline=None,
          suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture])
@given(case=sts.paged_cases(quantized=None, max_length=200))
def test_attention_with_a_frozen_table_equals_the_list(arm, gate, case):
    frozen = BlockTable.of(case.table)
    got = paged_attention(case.q_mx, case.storage, frozen, case.length, scale=case.scale, arm=arm)
    want = paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm=arm)
    gate.bit_exact(got, want, what="BlockTable vs the same entries as a list", kernel="paged_attention",
                   case=case.id)


@pytest.mark.parametrize("bad", [-1, "pool"], ids=["negative", "one-past-the-pool"])
@pytest.mark.parametrize("where", [0, -1], ids=["first", "last"])
def test_frozen_table_is_checked_against_the_pool(bad, where):
    case = small_case()
    entries = list(case.table)
    entries[where] = case.num_blocks if bad == "pool" else bad
    for table in (entries, BlockTable.of(entries)):
        with pytest.raises(ValueError, match=f"block_table entry {entries[where]} is outside"):
            paged_attention(case.q_mx, case.storage, table, case.length, scale=case.scale, arm="graph")


def test_a_wrapping_entry_is_not_served_from_the_cache():
    case = small_case()
    good = np.array(case.table, np.int64)
    paged_attention(case.q_mx, case.storage, good, case.length, scale=case.scale, arm="graph")  # cached now
    wrapped = good.copy()
    wrapped[0] += 2**32  # the same int32 bytes as a valid entry
    with pytest.raises(ValueError, match="block_table"):
        paged_attention(case.q_mx, case.storage, wrapped, case.length, scale=case.scale, arm="graph")


def test_a_short_frozen_table_is_refused():
    case = small_case()
    short = BlockTable.of(case.table[:-1])
    with pytest.raises(ValueError, match="block_table has"):
        paged_attention(case.q_mx, case.storage, short, case.length, scale=case.scale, arm="graph")
