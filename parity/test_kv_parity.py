"""Bit-exact gates for the paged KV caches (kernel "paged_kv").

* Paged ``update_and_fetch`` equals the dense ``KVCache`` byte for byte in
  float32, float16 and bfloat16, over random append schedules and block sizes
  (unused pool slots NaN-poisoned before every read): paging only moves data.
* ``PagedKvRows.update_and_fetch`` equals each row's dense cache, left-padded
  with zeros (PAD_VALUE) to the longest row.
* Quantized pools: the stored planes (packed, scales, biases) gathered through
  the block table equal ``mx.quantize`` of the same rows, and the fetched K/V
  equals ``mx.dequantize`` of them: quantization runs per token row along the
  head dim, so writing rows block by block gives the planes quantizing them all
  at once gives.
* ``projected_bytes`` counts every stored plane.

Each example's steps are gathered into one flat array per tensor, so one gate
call (one record) covers a whole schedule.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.kv import PLANE_NAMES, KVCache, PagedKVCache, PagedKvRows, Quantization, gather_blocks, pool_blocks_for
from properties.strategies.kv import (BLOCK_SIZES, KvSpec, append_schedules, kv_specs, poison_unused_slots,
                                      random_kv, stored_rows)

KERNEL = "paged_kv"
DTYPES = ("float32", "float16", "bfloat16")
# The gate fixture only records (it holds no per-example state), so sharing it across examples is safe.
GATED = settings(suppress_health_check=list(settings.default.suppress_health_check)
                 + [HealthCheck.function_scoped_fixture])


def flat(arrays: list[mx.array]) -> mx.array:
    return mx.concatenate([a.reshape(-1) for a in arrays])


@st.composite
def schedules(draw, dtype: str | None = None, quantized: bool = False):
    spec = draw(kv_specs(dtypes=(dtype,) if dtype else DTYPES, quantized=quantized), label="spec")
    block_size = draw(st.sampled_from(BLOCK_SIZES), label="block_size")
    schedule = draw(append_schedules(block_size, max_tokens=160), label="schedule")
    capacity = draw(st.integers(0, sum(schedule)), label="capacity_tokens")
    return spec, block_size, schedule, capacity, draw(st.integers(0, 2**31), label="seed")


def test_dense_cache_grows_before_it_writes():
    """The dense control's offset and buffer (``STEP`` = 256 rows a step) before anything is read: a buffer that
    did not grow would take a write past its end (MLX's slice_update does not check), which no read-back can
    be trusted to show. (Run first: the gates below read such a buffer back.)"""
    spec = KvSpec(1, 8, 8, "float16")
    cache = KVCache()
    capacities = []
    for step, tokens in enumerate([5, 251, 1, 256, 300]):
        cache.update_and_fetch(*random_kv(step, spec, tokens))
        capacities.append((cache.offset, cache.keys.shape[2], cache.values.shape[2]))
    # 5 -> one step; 256 fill it exactly; one more -> a second step; 256 more do not fit (257 + 256 > 512): a
    # step holding them (256) after the 257 rows; 300 more: two steps (512) after the 513
    assert capacities == [(5, 256, 256), (256, 256, 256), (257, 512, 512), (513, 513, 513), (813, 1025, 1025)]


def test_dense_state_is_the_live_prefix():
    """``state`` is what mlx-lm's ``KVCache.state`` is: K/V of the ``offset`` live tokens, not the buffer (its
    256-row step of zeros, a trimmed token)."""
    spec = KvSpec(2, 8, 8, "float16")
    cache = KVCache()
    keys, values = random_kv(3, spec, 3)
    cache.update_and_fetch(keys, values)
    cache.trim(1)
    state = cache.state()
    assert [tuple(a.shape) for a in state] == [(1, 2, 2, 8), (1, 2, 2, 8)]
    assert mx.array_equal(state[0], keys[:, :, :2]).item() and mx.array_equal(state[1], values[:, :, :2]).item()


@pytest.mark.parametrize("max_blocks", [1, 3])
def test_paged_cache_takes_the_blocks_it_needs(max_blocks):
    """A bounded paged cache's table and pool before anything is read: one block per ``block_size`` tokens, a
    pool grown only as far as they need (an allocation loop that ran past them stops at ``max_blocks`` here, where
    an unbounded pool would grow without end). (Run first, as the dense test above.)"""
    spec = KvSpec(1, 8, 8, "float16")
    cache = PagedKVCache(0, 4, max_blocks=max_blocks)  # one block to start (at least one)
    for step, tokens in enumerate([3, 1]):  # 4 tokens: the one block, full
        cache.append(*random_kv(step, spec, tokens))
    assert (cache.offset, cache.block_table, cache.pool.num_blocks, cache.pool.free_blocks) == (4, (0,), 1, 0)
    if max_blocks > 1:
        cache.append(*random_kv(2, spec, 5))  # 9 tokens: 3 blocks, the pool grown 1 -> 2 -> 3
        assert (cache.offset, cache.block_table, cache.pool.num_blocks, cache.pool.free_blocks) == (9, (0, 1, 2), 3, 0)


@pytest.mark.parametrize("dtype", DTYPES)
@GATED
@given(data=st.data())
def test_paged_update_and_fetch_is_bit_exact_with_dense(gate, dtype, data):
    spec, block_size, schedule, capacity, seed = data.draw(schedules(dtype))
    dense, paged = KVCache(), PagedKVCache(capacity, block_size)
    got, want = [], []
    for step, n in enumerate(schedule):
        k, v = random_kv(seed + step, spec, n)
        poison_unused_slots(paged)
        got += paged.update_and_fetch(k, v)
        want += dense.update_and_fetch(k, v)
    gate.bit_exact(flat(got), flat(want), kernel=KERNEL, case=f"{spec.id}-bs{block_size}-{schedule}",
                   what="paged gather of the live prefix vs dense KVCache slice, after every append")


@GATED
@given(data=st.data())
def test_rows_update_and_fetch_is_dense_rows_left_padded(gate, data):
    spec = data.draw(kv_specs(), label="spec")
    block_size = data.draw(st.sampled_from(BLOCK_SIZES), label="block_size")
    prefills = data.draw(st.lists(st.integers(1, 3 * block_size), min_size=2, max_size=4), label="prefills")
    steps = data.draw(st.lists(st.integers(1, block_size + 1), min_size=1, max_size=3), label="steps")
    seed = data.draw(st.integers(0, 2**31), label="seed")
    denses, pageds = [], []
    for b, n in enumerate(prefills):
        k, v = random_kv(seed + b, spec, n)
        dense, paged = KVCache(), PagedKVCache(n, block_size)
        dense.update_and_fetch(k, v)
        paged.append(k, v)
        denses.append(dense)
        pageds.append(paged)
    rows = PagedKvRows(0, block_size)
    rows.merge_rows(pageds)
    got, want = [], []
    for step, n in enumerate(steps):
        k, v = random_kv(seed + 100 + step, spec, n, len(prefills))
        poison_unused_slots(rows)
        got += rows.update_and_fetch(k, v)
        fetched = [d.update_and_fetch(k[b:b + 1], v[b:b + 1]) for b, d in enumerate(denses)]
        width = max(d.offset for d in denses)
        for i in range(2):
            want.append(mx.concatenate([mx.pad(f[i], [(0, 0), (0, 0), (width - f[i].shape[2], 0), (0, 0)])
                                        for f in fetched]))
    gate.bit_exact(flat(got), flat(want), kernel=KERNEL, case=f"{spec.id}-bs{block_size}-{prefills}-{steps}",
                   what="batched paged fetch vs per-row dense caches left-padded with zeros")


@GATED
@given(data=st.data())
def test_quantized_planes_are_mx_quantize_of_the_rows(gate, data):
    spec, block_size, schedule, capacity, seed = data.draw(schedules(quantized=True))
    cache = PagedKVCache(capacity, block_size, quantization=spec.quantization)
    ks, vs = [], []
    for step, n in enumerate(schedule):
        k, v = random_kv(seed + step, spec, n)
        cache.append(k, v)
        ks.append(k)
        vs.append(v)
    poison_unused_slots(cache)
    q = spec.quantization

    def quantize(rows):  # MLX's op itself, not the cache's wrapper (impl.kv.Quantization) that the test judges
        return mx.quantize(rows, group_size=q.group_size, bits=q.bits, mode="affine")

    k_planes, v_planes = quantize(mx.concatenate(ks, axis=2)), quantize(mx.concatenate(vs, axis=2))
    expected = dict(zip(PLANE_NAMES, (k_planes[0], v_planes[0], k_planes[1], k_planes[2], v_planes[1], v_planes[2])))
    table = mx.array(cache.block_table, dtype=mx.int32)
    case = f"{spec.id}-bs{block_size}-{schedule}"
    stored = {name: gather_blocks(getattr(cache.pool, name), table)[:, :, :cache.offset] for name in PLANE_NAMES}
    gate.bit_exact(flat([stored["keys"], stored["values"]]), flat([expected["keys"], expected["values"]]),
                   kernel=KERNEL, case=case, what="packed uint32 words of K and V vs mx.quantize")
    gate.bit_exact(flat([stored[n] for n in PLANE_NAMES[2:]]), flat([expected[n] for n in PLANE_NAMES[2:]]),
                   kernel=KERNEL, case=case, what="scales and biases of K and V vs mx.quantize")
    got_k, got_v = cache.fetch()
    want = [mx.dequantize(*planes, group_size=q.group_size, bits=q.bits, mode="affine") for planes in (k_planes, v_planes)]
    gate.bit_exact(flat([got_k, got_v]), flat(want), kernel=KERNEL, case=case,
                   what="fetch of a quantized pool vs mx.dequantize(mx.quantize(rows))")


@pytest.mark.parametrize("spec", [KvSpec(2, 64, 32, "float16"), KvSpec(1, 32, 64, "float32"),
                                  KvSpec(2, 64, 64, "bfloat16", Quantization(8, 32))],
                         ids=lambda s: s.id)
@pytest.mark.parametrize("tokens", [0, 1, 15, 16, 17, 100])
def test_projected_bytes_counts_every_plane(spec, tokens):
    rows = PagedKvRows(16, 8, quantization=spec.quantization)
    cache = PagedKVCache(16, 8, quantization=spec.quantization)
    cache.append(*random_kv(0, spec, 3))
    rows.merge_rows([cache])
    pool = rows.rows[0].pool
    per_block = sum(a.nbytes for a in pool.arrays()) / pool.num_blocks  # the seed's formula
    assert rows.projected_bytes(tokens) == pool_blocks_for(tokens, 8) * per_block


def test_projected_bytes_of_a_quantized_pool_counts_packed_scales_and_biases():
    spec = KvSpec(2, 64, 32, "bfloat16", Quantization(4, 32))
    rows = PagedKvRows(16, 8, quantization=spec.quantization)
    cache = PagedKVCache(16, 8, quantization=spec.quantization)
    cache.append(*random_kv(0, spec, 3))
    rows.merge_rows([cache])
    # One block: 2 heads x 8 rows x (K: 64*4/32 words + 2 planes of 64/32 bf16; V: 32*4/32 words + 2 of 32/32).
    per_row = (64 * 4 // 32) * 4 + 2 * (64 // 32) * 2 + (32 * 4 // 32) * 4 + 2 * (32 // 32) * 2
    assert rows.projected_bytes(17) == 3 * 2 * 8 * per_row
    pool = rows.rows[0].pool
    assert rows.projected_bytes(8) == sum(a.nbytes for a in pool.arrays()) / pool.num_blocks


SPECIAL_BITS = {"float32": (np.uint32, [0x7FC00001, 0xFFC00000, 0x7F800000, 0xFF800000, 0x80000000, 1, 0x7F800001]),
                "float16": (np.uint16, [0x7E01, 0xFE00, 0x7C00, 0xFC00, 0x8000, 1, 0x7C01]),
                "bfloat16": (np.uint16, [0x7FC1, 0xFFC0, 0x7F80, 0xFF80, 0x8000, 1, 0x7F81])}


def with_special_values(a: mx.array, dtype: str) -> mx.array:
    """``a`` with NaN payloads (quiet, negative, signalling), +-inf, -0 and a subnormal written over some entries."""
    bits, patterns = SPECIAL_BITS[dtype]
    raw = np.array(a.view(mx.uint32 if bits is np.uint32 else mx.uint16)).reshape(-1).copy()
    raw[:7 * len(patterns):7] = patterns
    return mx.array(raw.reshape(a.shape)).view(a.dtype)


@pytest.mark.parametrize("block_size", [1, 4, 16])
@pytest.mark.parametrize("dtype", DTYPES)
def test_special_values_and_strided_inputs_are_stored_bit_for_bit(gate, dtype, block_size):
    """NaN payloads, infinities and -0 come back as they went in, from transposed and negative-stride K/V views."""
    spec = KvSpec(2, 32, 64, dtype)
    k, v = random_kv(3, spec, 13)
    k = with_special_values(k, dtype).transpose(0, 2, 1, 3).transpose(0, 2, 1, 3)[:, :, ::-1]  # reversed tokens
    v = mx.concatenate([v, v], axis=2)[:, ::-1, ::2]  # step-2 tokens, reversed heads
    dense, paged = KVCache(), PagedKVCache(0, block_size)
    for part in (slice(0, 3), slice(3, 3), slice(3, 4), slice(4, 13)):  # one of them empty
        want = dense.update_and_fetch(k[:, :, part], v[:, :, part])
        got = paged.update_and_fetch(k[:, :, part], v[:, :, part])
    gate.bit_exact(flat(list(got)), flat([k, v]), kernel=KERNEL, case=f"{spec.id}-bs{block_size}-special",
                   what="paged fetch of strided K/V holding NaN payloads, infinities and -0 vs the input bytes")
    gate.bit_exact(flat(list(want)), flat([k, v]), kernel=KERNEL, case=f"{spec.id}-special",
                   what="dense fetch of the same K/V vs the input bytes")


@pytest.mark.parametrize("quantization", [Quantization(4, 128), Quantization(8, 128)], ids=lambda q: f"q{q.bits}g128")
@pytest.mark.parametrize("dtype", DTYPES)
def test_group_size_128_with_other_v_head_dim(gate, dtype, quantization):
    """The kv_specs strategy draws head dims 32/64 only: group size 128, with v_head_dim != head_dim, here."""
    spec = KvSpec(2, 128, 256, dtype, quantization)
    cache = PagedKVCache(0, 3, quantization=quantization)
    ks, vs = [], []
    for seed, n in enumerate((1, 2, 0, 3, 7)):
        k, v = random_kv(seed, spec, n)
        cache.append(k, v)
        ks.append(k)
        vs.append(v)
    got = cache.fetch()
    want = [stored_rows(spec, mx.concatenate(ks, axis=2)), stored_rows(spec, mx.concatenate(vs, axis=2))]
    gate.bit_exact(flat(list(got)), flat(want), kernel=KERNEL, case=spec.id,
                   what="fetch of a group-128 pool vs the oracle's dequantize(quantize(rows))")
