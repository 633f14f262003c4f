"""Properties of direct paged attention (``impl.paged_attention``), every available arm.

Hypothesis draws whole cases (``properties.strategies.paged``): MHA/GQA/MQA,
head dims 64..256, block sizes 1..64 (1, 12, 24 and 40 among them: not powers
of two), lengths across block and 64-token partition edges, n = 1..8 query
rows, permuted block tables (sometimes naming one physical block twice), NaN
in every slot the kernel must not read (and, half the time, in physical block
0, where the kernels' zero-padded table and the table's unused entries point),
score peaks more than float32 exp's range apart half the time (a sink and a
late outlier), bf16/f16/f32 pools and affine KV4/KV8.

* the output matches the float64 oracle under FlashAttention's error-ratio
  rule (and so is finite: a stray read of a poisoned slot would be NaN);
* the physical layout is invisible: another permutation of the blocks gives
  the same bytes;
* what is stored past ``length`` is invisible: NaN or zeros there, same bytes;
* any partition size (the kernel's split, chosen from N when not given) is a
  rounding choice only: the output still matches the oracle;
* (compiled arms) row i of an n-row call is bit-identical to a one-row call
  over the first length - n + 1 + i tokens when both use the same partition
  size: a row's sums never mix with another row's, tokens masked for it weigh
  exact zeros, and an empty partition adds exact zeros in the merge;
* bad input raises ValueError/TypeError naming the argument, before any launch.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.paged_attention import (DIRECT_MAX_QUERIES, MATRIX_MIN_PARTITION, PARTITION_QUANTUM, QUANTIZED_MIN_PARTITION,
                                  QUANTIZED_TARGET_THREADGROUPS, TARGET_THREADGROUPS, paged_attention,
                                  paged_attention_gather, partition_size)
from properties import strategies as sts

# The gate fixture is a stateless recorder: sharing it across examples is intended.
FIXTURES_OK = settings(suppress_health_check=[*settings.default.suppress_health_check,
                                              HealthCheck.function_scoped_fixture])


def kernel_name(case) -> str:
    return f"paged_attention_q{case.quant.bits}" if case.quant else "paged_attention"


def run(case, arm, *, storage=None, table=None, q=None, length=None, partition=None):
    return paged_attention(case.q_mx if q is None else q, case.storage if storage is None else storage,
                           case.table if table is None else table, case.length if length is None else length,
                           scale=case.scale, arm=arm, partition=partition)


@FIXTURES_OK
@given(case=sts.paged_cases(quantized=None))
def test_matches_float64_oracle(arm, gate, case):
    out = run(case, arm)
    assert out.shape == (1, case.hq, case.n, case.dv) and out.dtype == case.q_mx.dtype
    ref, base = sts.paged_oracles(case)
    floor, why = sts.error_ratio_floor(case, ref)
    gate.error_ratio(out, ref, base, floor=floor, why=why or None, kernel=kernel_name(case), case=case.id)


# Partitions smaller than one round of the threadgroup (4 SIMD groups x 8 tokens), ragged ones,
# and ones spanning many rounds (the sizes partition_size picks at long N).
PARTITIONS = (8, 24, 64, 100, 512)


@FIXTURES_OK
@given(case=sts.paged_cases(quantized=None, max_length=700), partition=st.sampled_from(PARTITIONS))
def test_partition_size_is_rounding_only(arm, gate, case, partition):
    out = run(case, arm, partition=partition)
    ref, base = sts.paged_oracles(case)
    floor, why = sts.error_ratio_floor(case, ref)
    gate.error_ratio(out, ref, base, floor=floor, why=why or None, kernel=kernel_name(case),
                     case=f"{case.id}-part{partition}")


@given(length=st.integers(1, 1 << 22), per_partition=st.integers(1, 64),
       pool=st.sampled_from(["plain", "quantized", "matrix"]))
def test_default_partition_fills_the_target_and_no_more(length, per_partition, pool):
    """partition_size: whole quanta; no more partitions than the threadgroup target asks for (plain pools:
    TARGET_THREADGROUPS, affine: QUANTIZED_TARGET_THREADGROUPS), and the shortest span that keeps to it, except
    that an affine pool's partition holds at least QUANTIZED_MIN_PARTITION tokens, and a matrix partial's at least
    MATRIX_MIN_PARTITION, where the sequence has them."""
    quantized, matrix = pool == "quantized", pool == "matrix"
    span = partition_size(length, per_partition, quantized, matrix)
    assert span >= PARTITION_QUANTUM and span % PARTITION_QUANTUM == 0
    wanted = max(1, (QUANTIZED_TARGET_THREADGROUPS if quantized else TARGET_THREADGROUPS) // per_partition)
    assert -(-length // span) <= wanted, "more partitions than the target's"
    least = {"plain": 0, "quantized": QUANTIZED_MIN_PARTITION, "matrix": MATRIX_MIN_PARTITION}[pool]
    floor = min(least, -(-length // PARTITION_QUANTUM) * PARTITION_QUANTUM)
    assert span >= floor, f"a {pool} pool's partition below its floor"
    shorter = span - PARTITION_QUANTUM
    assert shorter < floor or shorter == 0 or -(-length // shorter) > wanted, "a shorter span would do"


def test_partition_size_refuses_a_quantized_matrix_partition():
    with pytest.raises(ValueError, match="quantized and matrix"):
        partition_size(4096, 8, True, True)
    with pytest.raises(TypeError, match="matrix"):
        partition_size(4096, 8, False, 1)


@FIXTURES_OK
@given(case=sts.paged_cases(quantized=None, max_length=96), data=st.data())
def test_block_layout_is_invisible(arm, gate, case, data):
    spare = data.draw(st.integers(0, 3), label="spare blocks")
    num_blocks = len(case.table) + spare
    needed = -(-case.length // case.block_size)
    table = [int(b) for b in np.random.default_rng(case.seed + 7).permutation(num_blocks)[:needed]]
    moved = run(case, arm, storage=case.relaid(table, num_blocks), table=table)
    gate.bit_exact(moved, run(case, arm), what="same token rows at other physical blocks", kernel=kernel_name(case),
                   case=case.id)


@FIXTURES_OK
@given(case=sts.paged_cases(quantized=None, max_length=96))
def test_slots_past_length_are_never_read(arm, gate, case):
    clean = run(case, arm, storage=case.relaid(case.table, poison=False))
    gate.bit_exact(run(case, arm), clean, what="NaN vs zeros in every slot outside the live tokens",
                   kernel=kernel_name(case), case=case.id)


@pytest.mark.arms("metal", "cuda")
@FIXTURES_OK
@given(case=sts.paged_cases(quantized=None, max_length=160).filter(lambda c: c.n > 1))
def test_rows_equal_single_row_calls(arm, gate, case):
    out = run(case, arm, partition=64)
    for i in range(case.n):
        single = run(case, arm, q=case.q_mx[:, :, i:i + 1], length=case.length - case.n + 1 + i, partition=64)
        gate.bit_exact(out[:, :, i:i + 1], single, what=f"row {i} of {case.n} vs a one-row call",
                       kernel=kernel_name(case), case=case.id)


# --- validation -------------------------------------------------------------

def small_case(**overrides):
    params = dict(dtype="bfloat16", hq=4, hkv=2, n=2, dk=64, dv=64, block_size=16, length=40)
    params.update(overrides)
    return sts.build_paged_case(np.random.default_rng(0), **params)


def storage_with(case, **changes) -> sts.ArrayPagedStorage:
    fields = {name: getattr(case.storage, name) for name in sts.ArrayPagedStorage.__dataclass_fields__}
    return sts.ArrayPagedStorage(**(fields | changes))


def test_n_above_eight_points_at_the_gather_control():
    case = small_case(n=DIRECT_MAX_QUERIES + 1)
    with pytest.raises(ValueError, match="paged_attention_gather"):
        run(case, "graph")
    out = paged_attention_gather(case.q_mx, case.storage, case.table, case.length, scale=case.scale, mask="causal")
    assert out.shape == (1, case.hq, case.n, case.dv)


BAD_INPUTS = {
    "dtype": (lambda c: dict(q=c.q_mx.astype(mx.float16)), "storage.dtype"),
    "heads": (lambda c: dict(q=mx.zeros((1, 3, 2, 64), mx.bfloat16)), "Hq=3"),
    "table_short": (lambda c: dict(table=c.table[:2]), "block_table"),
    "table_outside": (lambda c: dict(table=[c.num_blocks] + c.table[1:]), "block_table"),
    "table_2d": (lambda c: dict(table=[c.table]), "block_table"),
    "table_float": (lambda c: dict(table=[float(b) for b in c.table]), "block_table"),
    "over_capacity": (lambda c: dict(length=c.num_blocks * c.block_size + 1), "capacity"),
    "short_length": (lambda c: dict(length=1), "length=1"),
    "zero_length": (lambda c: dict(length=0), "length"),
    "scale_nan": (lambda c: dict(scale=float("nan")), "scale"),
    "scale_inf": (lambda c: dict(scale=float("inf")), "scale"),
    "q_rank": (lambda c: dict(q=c.q_mx[0]), "q must have shape"),
    "q_batch": (lambda c: dict(q=mx.concatenate([c.q_mx, c.q_mx])), "q must have shape"),
    "head_dim": (lambda c: dict(q=mx.zeros((1, 4, 2, 32), mx.bfloat16)), "head_dim"),
    "partition_zero": (lambda c: dict(partition=0), "partition"),
    "no_heads": (lambda c: dict(q=mx.zeros((1, 0, 2, 64), mx.bfloat16)), "at least one head"),
    "table_ragged": (lambda c: dict(table=[c.table[:1], c.table[1:]]), "block_table"),
}


@pytest.mark.parametrize("what", sorted(BAD_INPUTS))
def test_bad_input_raises_naming_the_argument(what):
    case = small_case()
    change, message = BAD_INPUTS[what]
    args = dict(q=case.q_mx, table=case.table, length=case.length, scale=case.scale, partition=None) | change(case)
    with pytest.raises(ValueError, match=message):
        paged_attention(args["q"], case.storage, args["table"], args["length"], scale=args["scale"], arm="graph",
                        partition=args["partition"])


def test_storage_without_the_planes_is_refused_by_name():
    case = small_case()
    with pytest.raises(TypeError, match="storage must be a PagedStorage"):
        paged_attention(case.q_mx, None, case.table, case.length, scale=case.scale, arm="graph")


def test_a_numpy_length_is_a_length():
    case = small_case()
    out = paged_attention(case.q_mx, case.storage, case.table, np.int64(case.length), scale=case.scale, arm="graph")
    assert mx.array_equal(out, run(case, "graph")).item()


def test_a_partition_past_the_length_is_the_one_partition():
    # Any partition of >= length tokens holds every token: the call clamps it to the length, so a huge one
    # neither allocates in proportion to it (the graph arm's token axis) nor changes a bit of the answer.
    case = small_case()
    one = paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm="graph",
                          partition=case.length)
    for partition in (case.length + 1, 10**9, 2**40):
        out = paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm="graph",
                              partition=partition)
        assert mx.array_equal(out, one).item(), partition


@pytest.mark.parametrize("args, error, name", [
    ((100, 0), ValueError, "threadgroups_per_partition"),
    ((100.5, 1), TypeError, "length"),
    ((-5, 1), ValueError, "length"),
    ((True, 1), TypeError, "length"),
    ((100, 1, 1), TypeError, "quantized"),
])
def test_partition_size_refuses_bad_arguments_by_name(args, error, name):
    with pytest.raises(error, match=name):
        partition_size(*args)


def test_a_length_of_2_to_the_24_is_refused_by_the_direct_kernel():
    """The kernels carry the length as a float32, exact below 2**24 (``DIRECT_MAX_LENGTH``): the bound is exclusive,
    so 2**24 itself is refused. One block of 2**24 tokens, lazily zero: the check comes before anything is read."""
    from impl.paged_attention import DIRECT_MAX_LENGTH

    tokens = DIRECT_MAX_LENGTH
    plane = mx.zeros((1, 1, tokens, 8), mx.float16)
    storage = sts.ArrayPagedStorage(keys=plane, values=plane, block_size=tokens, head_dim=8, v_head_dim=8,
                                    dtype=mx.float16)
    with pytest.raises(ValueError, match=r"length=16777216 must be below 2\*\*24"):
        paged_attention(mx.zeros((1, 1, 1, 8), mx.float16), storage, [0], tokens, scale=1.0, arm="graph")


def test_partition_of_the_wrong_kind_raises_type_error():
    case = small_case()
    with pytest.raises(TypeError, match="partition must be an int"):
        paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm="graph", partition=64.0)


def test_quantized_storage_is_validated():
    case = small_case(quant=sts.PagedQuantization(4, 64))
    with pytest.raises(ValueError, match="group_size=128 does not divide"):
        paged_attention(case.q_mx, storage_with(case, quantization=sts.PagedQuantization(4, 128)), case.table,
                        case.length, scale=case.scale, arm="graph")
    with pytest.raises(ValueError, match="bits must be one of"):
        paged_attention(case.q_mx, storage_with(case, quantization=sts.PagedQuantization(3, 64)), case.table,
                        case.length, scale=case.scale, arm="graph")
    with pytest.raises(ValueError, match="bits must be one of"):  # 4.0 == 4, but bits is a count: an int
        paged_attention(case.q_mx, storage_with(case, quantization=sts.PagedQuantization(4.0, 64)), case.table,
                        case.length, scale=case.scale, arm="graph")
    # group sizes outside MLX's affine ones: 4 (a 4-bit word's 8 values would straddle two scale groups), 16 and
    # 256 (words whole, but neither MLX's quantize nor the oracle makes them)
    for group in (4, 16, 256):
        with pytest.raises(ValueError, match=rf"group_size must be one of \(32, 64, 128\), got {group}"):
            paged_attention(case.q_mx, storage_with(case, quantization=sts.PagedQuantization(4, group)), case.table,
                            case.length, scale=case.scale, arm="graph")
    with pytest.raises(TypeError, match="storage.key_scales"):
        paged_attention(case.q_mx, storage_with(case, key_scales=None), case.table, case.length,
                        scale=case.scale, arm="graph")
    # a quantized pool compares q with storage.dtype (its keys are uint32)
    with pytest.raises(ValueError, match="storage.dtype"):
        paged_attention(case.q_mx.astype(mx.float32), case.storage, case.table, case.length, scale=case.scale,
                        arm="graph")


def test_scale_and_arm_types():
    case = small_case()
    with pytest.raises(TypeError, match="scale"):
        paged_attention(case.q_mx, case.storage, case.table, case.length, scale="0.1", arm="graph")
    with pytest.raises(TypeError, match="length"):
        paged_attention(case.q_mx, case.storage, case.table, 40.0, scale=case.scale, arm="graph")
    with pytest.raises(ValueError, match="arm"):
        paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm="vulkan")
