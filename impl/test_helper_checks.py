"""Bad input to the kernels' public geometry helpers: refused with TypeError / ValueError naming the argument.

The helpers (partition and partial shapes, rows per threadgroup, split counts, staging, shared memory) are exported
for sweeps, perf and tests; a float, a bool or a zero used to flow through into a launch's grid or a buffer's size
(``partial_shape(0.5, ...)`` gave a float shape, ``threadgroup_bytes("x")`` a string). Each call's valid twin (NumPy
integers are ints) runs beside it, so a check cannot refuse what the kernels use.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from impl import kvq4_decode as kvq4
from impl import multi_query as mq
from impl import paged_attention as paged

BAD = [
    ("partial_shape hq 0", lambda: paged.partial_shape(0, 1, 4, 128), ValueError, "hq"),
    ("partial_shape partitions float", lambda: paged.partial_shape(32, 1, 4.0, 128), TypeError, "partitions"),
    ("partial_shape dv bool", lambda: paged.partial_shape(32, 1, 4, True), TypeError, "dv"),
    ("rows_per_threadgroup hkv 0", lambda: paged.rows_per_threadgroup(32, 0, 1, 128), ValueError, "hkv"),
    ("rows_per_threadgroup hq not a multiple", lambda: paged.rows_per_threadgroup(6, 4, 1, 128), ValueError, "hq"),
    ("rows_per_threadgroup n float", lambda: paged.rows_per_threadgroup(32, 8, 1.5, 128), TypeError, "n"),
    ("rows_per_threadgroup v_head_dim 0", lambda: paged.rows_per_threadgroup(32, 8, 1, 0), ValueError, "v_head_dim"),
    ("partition_size length float", lambda: paged.partition_size(1.5, 4), TypeError, "length"),
    ("set_lane_map lanes float", lambda: paged.set_lane_map(32.0), ValueError, "lanes_per_row"),
    ("set_lane_map wide_loads int", lambda: paged.set_lane_map(32, 1), ValueError, "wide_loads"),
    ("set_matrix_partial enabled int", lambda: paged.set_matrix_partial(1), ValueError, "enabled"),
    ("set_matrix_partial token_tiles 3", lambda: paged.set_matrix_partial(True, 3), ValueError, "token_tiles"),
    ("set_threadgroup_target 0", lambda: paged.set_threadgroup_target(0), ValueError, "threadgroups"),
    ("set_threadgroup_target float", lambda: paged.set_threadgroup_target(512.0), TypeError, "threadgroups"),
    ("set_merge slices 0", lambda: paged.set_merge(0), ValueError, "slices"),
    ("set_merge slices past Metal's threadgroup", lambda: paged.set_merge(33), ValueError, "slices"),
    ("set_merge batch float", lambda: paged.set_merge(32, 8.0), TypeError, "batch"),
    ("set_matrix_ring 1", lambda: paged.set_matrix_ring(1), ValueError, "slots"),
    ("set_matrix_ring past MAX_RING_SLOTS", lambda: paged.set_matrix_ring(5), ValueError, "slots"),
    ("set_matrix_ring float", lambda: paged.set_matrix_ring(3.0), TypeError, "slots"),
    ("paged ring_slots unknown arm", lambda: paged.launch.ring_slots("gpu", 128, 128, mx.bfloat16, None, paged.PAGED, 64),
     ValueError, "arm"),
    ("paged ring_slots span 0", lambda: paged.launch.ring_slots("cuda", 128, 128, mx.bfloat16, None, paged.PAGED, 0),
     ValueError, "span"),
    ("paged ring_shared_bytes ring 1", lambda: paged.launch.ring_shared_bytes(128, 1), ValueError, "ring"),
    ("matrix_rows_per_threadgroup hq not a multiple", lambda: paged.matrix_rows_per_threadgroup(6, 4, 1, 128, 128),
     ValueError, "hq"),
    ("matrix_rows_per_threadgroup head_dim 0", lambda: paged.matrix_rows_per_threadgroup(8, 1, 1, 0, 128), ValueError,
     "head_dim"),
    ("matrix_rows_per_threadgroup v_head_dim float", lambda: paged.matrix_rows_per_threadgroup(8, 1, 1, 128, 1.0),
     TypeError, "v_head_dim"),
    ("partition_size matrix int", lambda: paged.partition_size(64, 4, False, 1), TypeError, "matrix"),
    ("merge_batch partitions 0", lambda: paged.merge_batch(0), ValueError, "partitions"),
    ("merge_batch partitions float", lambda: paged.merge_batch(2.0), TypeError, "partitions"),
    ("threadgroup_bytes rep 0", lambda: kvq4.threadgroup_bytes(0), ValueError, "rep"),
    ("threadgroup_bytes rep str", lambda: kvq4.threadgroup_bytes("x"), TypeError, "rep"),
    ("max_gqa_factor unknown arm", lambda: kvq4.max_gqa_factor("gpu"), ValueError, "arm"),
    ("default_body length float", lambda: kvq4.default_body(1.5), TypeError, "length"),
    ("default_body length negative", lambda: kvq4.default_body(-1), ValueError, "length"),
    ("block_keys d 0", lambda: mq.block_keys(0), ValueError, "d"),
    ("pipeline_stages nq bool", lambda: mq.pipeline_stages(True, 128, "cuda"), TypeError, "nq"),
    ("pipeline_stages unknown arm", lambda: mq.pipeline_stages(8, 128, None), ValueError, "arm"),
    ("ring_slots dtype str", lambda: mq.ring_slots(8, 128, "bfloat16", "cuda"), ValueError, "dtype"),
    ("ring_slots unknown arm", lambda: mq.ring_slots(8, 128, mx.bfloat16, "x"), ValueError, "arm"),
    ("ring_shared_bytes ring negative", lambda: mq.ring_shared_bytes(128, mx.bfloat16, -1), ValueError, "ring"),
    ("ring_shared_bytes dtype int", lambda: mq.ring_shared_bytes(128, mx.int32, 2), ValueError, "dtype"),
]


@pytest.mark.parametrize("call, error, name", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_helper_input_is_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):
        call()


def test_numpy_integers_give_the_python_ints_results():
    i = np.int64
    assert paged.partial_shape(i(32), i(1), i(4), i(128)) == paged.partial_shape(32, 1, 4, 128) == (32, 1, 4, 130)
    assert all(type(x) is int for x in paged.partial_shape(i(32), i(1), i(4), i(128)))
    assert paged.rows_per_threadgroup(i(32), i(8), i(1), i(128)) == paged.rows_per_threadgroup(32, 8, 1, 128)
    assert kvq4.threadgroup_bytes(i(6)) == kvq4.threadgroup_bytes(6) == 24768
    assert kvq4.default_body(i(64)) == kvq4.default_body(64)
    assert mq.block_keys(i(256)) == mq.block_keys(256) == mq.BK // 2
    for arm in ("graph", "metal", "cuda"):
        assert mq.ring_slots(i(8), i(128), mx.bfloat16, arm) == mq.ring_slots(8, 128, mx.bfloat16, arm)


def test_merge_batch_is_a_slices_share_up_to_the_most():
    """merge_batch: ceil(partitions / MERGE_SLICES) partitions a slice reads at once, at most MERGE_BATCH; the merge's
    launch passes it as its template B."""
    sl, most = paged.launch.MERGE_SLICES, paged.launch.MERGE_BATCH
    assert [paged.merge_batch(p) for p in (1, sl, sl + 1, 2 * sl, most * sl, most * sl + 1, 10**6)] == \
        [1, 1, 2, 2, most, most, most]
    parts = mx.zeros(paged.partial_shape(2, 1, 2 * sl + 1, 16), mx.float32)
    launch = paged.merge_launch(parts, mx.array([0.5, 100, 1], mx.float32), mx.float16)
    assert dict(launch.template)["B"] == 3 and dict(launch.template)["SL"] == sl


def test_set_merge_reaches_the_compiled_calls_and_keeps_a_refused_choice_out():
    """A merge chosen after a call is the merge the next call runs. A compiled pair (partial + merge) and kvq4's
    compiled direct call hold the merge's launch as it was traced, so a choice forgets them (before, a sweep that set
    ``launch.MERGE_SLICES`` measured the merge it had traced first). A refused choice changes nothing."""
    from impl import kvq4_decode as kvq4

    L = paged.launch
    before = (L.MERGE_SLICES, L.MERGE_BATCH)
    plan = lambda: paged._plan("cuda", 32, 1, 8, 128, 128, 16, mx.bfloat16, None, 131072, None, 0.125)[0]
    direct = lambda: kvq4._compiled_direct("cuda", 0.0625, None, (((1, 8, 1, 256), mx.bfloat16),))
    try:
        kept, kept_direct = plan(), direct()
        assert plan() is kept and direct() is kept_direct, "the same choice replays the same calls"
        paged.set_merge(16, 4)
        assert (L.MERGE_SLICES, L.MERGE_BATCH) == (16, 4) and L.merge_batch(64) == 4
        assert plan() is not kept, "a pair traced under the previous merge was replayed"
        assert direct() is not kept_direct, "kvq4's direct call traced under the previous merge was replayed"
        with pytest.raises(ValueError, match="slices"):
            paged.set_merge(64)
        assert (L.MERGE_SLICES, L.MERGE_BATCH) == (16, 4), "a refused choice changed the merge"
    finally:
        paged.set_merge(*before)
    assert (L.MERGE_SLICES, L.MERGE_BATCH) == before


def test_forget_with_plans_takes_a_callable():
    with pytest.raises(TypeError, match="forget"):
        paged.forget_with_plans(None)


def test_set_lane_map_keeps_its_choice_only_when_valid():
    before = (paged.LANES_PER_ROW, paged.WIDE_LOADS)
    with pytest.raises(ValueError, match="wide_loads"):
        paged.set_lane_map(16, "no")
    assert (paged.LANES_PER_ROW, paged.WIDE_LOADS) == before, "a refused choice changed the lane map"


def test_set_matrix_partial_keeps_its_choice_only_when_valid():
    before = (paged.USE_MATRIX_PARTIAL, paged.MATRIX_TOKEN_TILES)
    with pytest.raises(ValueError, match="token_tiles"):
        paged.set_matrix_partial(not before[0], 5)
    assert (paged.USE_MATRIX_PARTIAL, paged.MATRIX_TOKEN_TILES) == before, "a refused choice changed the partial"


def test_set_threadgroup_target_moves_the_default_partition_and_keeps_a_refused_choice_out():
    """The target reaches the default partition (32/8/D128/N128k, 8 threadgroups per partition: 64 partitions of
    2048 tokens at 512), and a refused value changes nothing."""
    before = paged.TARGET_THREADGROUPS
    span = lambda: paged.partition_size(131072, 8, matrix=True)
    kept = span()
    try:
        paged.set_threadgroup_target(4 * before)
        assert paged.TARGET_THREADGROUPS == 4 * before and span() == kept // 4
        with pytest.raises(ValueError, match="threadgroups"):
            paged.set_threadgroup_target(-1)
        assert paged.TARGET_THREADGROUPS == 4 * before, "a refused target changed the target"
    finally:
        paged.set_threadgroup_target(before)
    assert span() == kept


def test_matrix_ring_is_cudas_fetch_where_eligible_and_keeps_a_refused_choice_out():
    """``set_matrix_ring``: the ring serves the cuda arm's eligible launches only (TT 1, equal head dims, a multiple
    of 64; partitions of a multiple of 8 tokens), in the ring spec with its dynamic shared memory; Metal and the graph
    arm, and every other launch, keep register loads; a refused choice changes nothing."""
    from impl.kernels.launches import _paged_pair

    L, before = paged.launch, paged.MATRIX_RING
    slots = lambda arm, d=128, dv=None, dtype=mx.bfloat16, quant=None, span=2048: L.ring_slots(
        arm, d, d if dv is None else dv, dtype, quant, paged.PAGED, span)
    try:
        paged.set_matrix_ring(0)
        assert slots("cuda") == 0, "ring 0: register loads"
        paged.set_matrix_ring(3)
        assert paged.MATRIX_RING == 3 and slots("cuda") == 3 and slots("cuda", 64) == 3
        assert slots("metal") == slots("graph") == 0, "the ring is CUDA's: no cp.async on Metal"
        assert slots("cuda", 80) == slots("cuda", 256) == slots("cuda", 128, 64) == 0, "head dims the ring cannot take"
        assert slots("cuda", dtype=mx.float32) == 0 and slots("cuda", quant=(4, 64)) == 0, "not the matrix partial"
        assert slots("cuda", span=100) == 0, "a partition that is not a multiple of 8 tokens"
        assert L.ring_shared_bytes(128, 3) == 49152  # 4 SIMD groups x 3 slots x (8 K + 8 V rows of 256 bytes)
        partial, _ = _paged_pair("bfloat16", None, 8, 2, 4, 128, 128, 16, 300, arm="cuda")
        assert partial.spec is L.MATRIX_PARTIAL_RING and partial.shared_memory == L.ring_shared_bytes(128, 3)
        assert dict(partial.template)["RING"] == 3
        for arm in (None, "metal"):
            partial, _ = _paged_pair("bfloat16", None, 8, 2, 4, 128, 128, 16, 300, arm=arm)
            assert partial.spec is L.MATRIX_PARTIAL and partial.shared_memory == 0
        with pytest.raises(ValueError, match="slots"):
            paged.set_matrix_ring(8)
        assert paged.MATRIX_RING == 3, "a refused choice changed the ring"
    finally:
        paged.set_matrix_ring(before)


def test_ring_source_replaces_the_register_blocks():
    """The ring spec is the matrix partial with its four register blocks (the first table read, the step's loads, the
    place of a later step's copies, the combine's static buffer) replaced by the ring's pieces, and nothing else
    changed."""
    L = paged.launch
    ring, body = L.MATRIX_PARTIAL_RING.source, L.MATRIX_PARTIAL.source
    assert L.MATRIX_PARTIAL_RING.arms == ("cuda",)
    for name, block in L.REGISTER_BLOCKS.items():
        assert block and body.count(block) == 1 and block not in ring, name
        piece = L.RING_PIECES[name]
        assert ring.count(piece) == 1, name
        ring = ring.replace(piece, block)
    assert ring == body


def test_matrix_eligibility_and_rows():
    """The matrix partial takes plain 16-bit pools with both head dims multiples of 16 up to MATRIX_MAX_DIM, and
    serves up to 8 query rows of a KV head (the SIMT partial: MAX_ROWS)."""
    eligible = paged.matrix_eligible
    assert eligible(128, 128, mx.bfloat16, None, paged.PAGED) and eligible(64, 48, mx.float16, None, paged.PAGED)
    assert not eligible(128, 128, mx.float32, None, paged.PAGED), "float32 pools stay on the SIMT partial"
    assert not eligible(256, 256, mx.bfloat16, None, paged.PAGED), "past MATRIX_MAX_DIM"
    assert eligible(80, 80, mx.bfloat16, None, paged.PAGED)
    assert not eligible(72, 72, mx.bfloat16, None, paged.PAGED), "head dims not multiples of 16"
    assert not eligible(128, 72, mx.bfloat16, None, paged.PAGED), "a V head dim not a multiple of 16"
    assert not eligible(128, 128, mx.bfloat16, (4, 64), paged.PAGED), "affine pools stay on their partial"
    assert paged.matrix_rows_per_threadgroup(32, 8, 1, 128, 128) == 4  # G = 4: all four rows of a KV head
    assert paged.matrix_rows_per_threadgroup(8, 1, 1, 128, 128) == 8
    assert paged.matrix_rows_per_threadgroup(8, 1, 8, 128, 128) == 8  # 64 rows: eight chunks of one 8-row tile
    previous = (paged.USE_MATRIX_PARTIAL, paged.MATRIX_TOKEN_TILES)
    try:
        paged.set_matrix_partial(False)
        assert not eligible(128, 128, mx.bfloat16, None, paged.PAGED), "the policy switched off"
    finally:
        paged.set_matrix_partial(*previous)


def test_choices_take_numpy_integers_as_ints():
    before = (paged.LANES_PER_ROW, paged.WIDE_LOADS)
    try:
        paged.set_lane_map(np.int64(16))
        assert type(paged.LANES_PER_ROW) is int and paged.LANES_PER_ROW == 16
    finally:
        paged.set_lane_map(*before)


def test_check_partials_names_the_argument_and_the_layout():
    from impl.checks import check_partials

    out, rows = mx.zeros((2, 3, 4, 8)), mx.zeros((2, 3, 4))
    check_partials(("values", out), ("maxima", rows), ("sums", rows), layout="[Hq, n, count, Dv]")
    with pytest.raises(TypeError, match="maxima must be a float32 mx.array, got mlx.core.float16"):
        check_partials(("values", out), ("maxima", rows.astype(mx.float16)), ("sums", rows), layout="L")
    with pytest.raises(TypeError, match="sums must be a float32 mx.array, got ndarray"):
        check_partials(("values", out), ("maxima", rows), ("sums", np.zeros((2, 3, 4), np.float32)), layout="L")
    with pytest.raises(ValueError, match=r"values must be \[Hq, n, count, Dv\]; got \[2, 3, 4, 8\], \[2, 3\]"):
        check_partials(("values", out), ("maxima", rows[..., 0]), ("sums", rows), layout="[Hq, n, count, Dv]")
    with pytest.raises(ValueError, match="values must be"):
        check_partials(("values", rows), ("maxima", rows), ("sums", rows), layout="L")  # out is not 4-d


# --- geometry helpers at their boundaries ------------------------------------------------------------------------
# The helpers' docstrings state where each choice flips; the boundary itself is where an off-by-one hides.


def test_block_keys_halves_only_past_the_threadgroup_memory():
    """Two padded 32-key blocks (K and V, halves) fit Metal's 32 KiB up to D = 248 (2 * 32 * (248 + 8) * 2 =
    32768 bytes exactly); at 249 they would not, and a block holds 16 keys."""
    from impl.multi_query import launch

    largest = launch.THREADGROUP_BYTES // (4 * launch.BK) - launch.ROW_PAD
    assert largest == 248
    assert (mq.block_keys(largest), mq.block_keys(largest + 1)) == (32, 16)


@pytest.mark.parametrize("quantized, matrix", [(True, False), (False, True)], ids=["affine", "matrix"])
def test_a_sequence_shorter_than_the_minimum_partition_is_one_whole_partition(quantized, matrix):
    """An affine pool's partition is at least 512 tokens and a matrix partial's 128, "or the whole sequence
    (rounded up to the quantum) when shorter": 100 tokens are one partition of 128, not of the minimum."""
    minimum = paged.QUANTIZED_MIN_PARTITION if quantized else paged.MATRIX_MIN_PARTITION
    assert paged.partition_size(100, 8, quantized=quantized, matrix=matrix) == 128
    # just past the minimum on a target that wants many partitions: the minimum itself
    assert paged.partition_size(minimum + 1, 1, quantized=quantized, matrix=matrix) == minimum


@pytest.mark.parametrize("v_head_dim", [254, 256, 510, 512, 1024, 2046])
def test_rows_per_threadgroup_fit_the_combine_buffers(v_head_dim):
    """R rows need SIMDGROUPS * R * (Dv + 2) float32 of combine buffers within THREADGROUP_MEMORY: the largest R
    that fits, up to the rows there are and MAX_ROWS (Dv = 512: 3 rows, where 4 would need 32896 bytes)."""
    rows = paged.rows_per_threadgroup(4, 1, 1, v_head_dim)

    def fits(r):
        return 4 * paged.SIMDGROUPS * r * (v_head_dim + 2) <= paged.THREADGROUP_MEMORY

    assert fits(rows) and (rows == paged.MAX_ROWS or not fits(rows + 1))
