"""The dense control ``KVCache``: 256-token growth steps, functional writes, trim.

* The buffer holds ceil(total / 256) * 256 rows when every append fits in a
  step, and an append of L that does not fit adds ceil(L / 256) steps.
* ``update_and_fetch`` returns exactly the rows appended so far (after trims).
* Arrays fetched earlier never change (trim then re-append rewrites the same
  buffer rows functionally).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from impl.kv import STEP, KVCache
from properties.strategies.kv import KvSpec, assert_bytes, host_bytes, kv_specs, random_kv


@given(spec=kv_specs(), lengths=st.lists(st.integers(1, 300), min_size=1, max_size=5), seed=st.integers(0, 2**31))
def test_buffer_grows_in_256_token_steps(spec, lengths, seed):
    cache = KVCache()
    expected = []
    capacity = 0
    for step, n in enumerate(lengths):
        k, v = random_kv(seed + step, spec, n)
        if cache.offset + n > capacity:
            capacity = (cache.offset if capacity else 0) + -(-n // STEP) * STEP
        got_k, _ = cache.update_and_fetch(k, v)
        expected.append(host_bytes(k))
        assert cache.keys.shape[2] == capacity
        assert_bytes(got_k, np.concatenate(expected, axis=2), f"keys after append {step}")


@given(seed=st.integers(0, 2**31), trim=st.integers(0, 10))
def test_fetched_arrays_never_change(seed, trim):
    spec = KvSpec(2, 32, 32, "bfloat16")
    cache = KVCache()
    k, v = random_kv(seed, spec, 10)
    fetched = cache.update_and_fetch(k, v)
    before = [host_bytes(a) for a in fetched]
    assert cache.trim(trim) == trim and cache.offset == 10 - trim
    cache.update_and_fetch(*random_kv(seed + 1, spec, 12))
    for got, want, name in zip(fetched, before, ("keys", "values")):
        assert_bytes(got, want, f"{name} fetched before trim {trim} and re-append")
