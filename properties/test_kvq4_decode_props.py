"""Properties of kvq4 decode (``impl.kvq4_decode``), every available arm.

Hypothesis draws whole cases (``properties.strategies.decode.kvq4_cases``):
GQA 2/4/6/8 over 1-2 KV heads, blocks 64..512 (multiples of the 4 sub-chunks
and not), cache lengths across block and sub-chunk edges (so the last block
has empty sub-chunks whose -inf partials the combine must skip), bf16 / f16 /
f32, and K/V planes that are views of a larger cache poisoned with NaN scales
and random codes (slices along tokens and heads, transposed storage); half the
cases plant an attention sink at token 0 and an outlier late, more than
float32 exp's range (88.7) apart (``properties.strategies.attention.score_peaks``):
sub-chunks, partitions and blocks whose maxima lie that far apart, which the
combines and merges must rescale to the largest.

Every property holds for both bodies (``BODIES``: the direct attention body and the seed's).

* the output matches the float64 oracle on the K/V as the kernel dequantizes
  them, under FlashAttention's error-ratio rule against the naive computation
  in T on ``mx.dequantize``'s K/V (and so is finite: a stray read would be NaN);
  a compiled arm whose threadgroup memory cannot hold the GQA factor refuses it
  (the seed body's combine buffers grow with it; the direct body's do not);
* the layout is invisible: the views and contiguous copies of the same planes
  give the same bytes;
* KV head k serves exactly query heads k*REP .. k*REP+REP-1: swapping the two
  KV heads and their query head blocks swaps the output blocks, bit for bit;
* bad input raises ValueError / TypeError naming the argument, before any launch.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from impl.kvq4_decode import (BODIES, SUB, THREADGROUP_MEMORY, QuantizedKV, default_body, kvq4_decode,
                              kvq4_decode_eligible, max_gqa_factor, threadgroup_bytes)
from impl.recent_calls import RecentCalls
from properties.strategies.decode import build_kvq4_case, decode_error_floor, kvq4_cases, kvq4_oracles

# The gate fixture is a stateless recorder: sharing it across examples is intended.
FIXTURES_OK = settings(suppress_health_check=[*settings.default.suppress_health_check,
                                              HealthCheck.function_scoped_fixture])
KERNEL = "kvq4_decode"


def run(case, arm, body="seed", *, q=None, keys=None, values=None, block=None):
    return kvq4_decode(case.q_mx if q is None else q, case.keys if keys is None else keys,
                       case.values if values is None else values, scale=case.scale,
                       block=case.block if block is None else block, body=body, arm=arm)


def fits(case, arm, body) -> bool:
    return body == "direct" or threadgroup_bytes(case.rep) <= THREADGROUP_MEMORY.get(arm, float("inf"))


@pytest.mark.parametrize("body", BODIES)
@FIXTURES_OK
@given(case=kvq4_cases())
def test_matches_float64_oracle(arm, gate, body, case):
    if not fits(case, arm, body):
        with pytest.raises(ValueError, match="threadgroup memory"):
            run(case, arm, body)
        return
    out = run(case, arm, body)
    assert out.shape == (1, case.h, 1, 256) and out.dtype == case.q_mx.dtype
    ref, base = kvq4_oracles(case)
    floor, why = decode_error_floor(ref, case.dtype, case.q, case.k32, case.v32, scale=case.scale)
    gate.error_ratio(out, ref, base, floor=floor, why=f"FlashAttention's rule (factor 2, naive T baseline); {why}",
                     kernel=KERNEL, case=case.id)


def contiguous(planes: QuantizedKV) -> QuantizedKV:
    return QuantizedKV(*(mx.contiguous(p) for p in planes[:3]))


@pytest.mark.parametrize("body", BODIES)
@FIXTURES_OK
@given(case=kvq4_cases(gqa=(2, 4), layouts=("slice", "window", "heads", "transposed", "reversed"), max_n=300))
def test_layout_is_invisible(arm, gate, body, case):
    copied = run(case, arm, body, keys=contiguous(case.keys), values=contiguous(case.values))
    gate.bit_exact(run(case, arm, body), copied, what=f"{case.layout} views vs contiguous copies of the same planes",
                   kernel=KERNEL, case=case.id)


def swap_heads(planes: QuantizedKV) -> QuantizedKV:
    return QuantizedKV(*(mx.concatenate([p[:, 1:2], p[:, 0:1]], axis=1) for p in planes[:3]))


@pytest.mark.parametrize("body", BODIES)
@FIXTURES_OK
@given(case=kvq4_cases(gqa=(2, 6), max_n=300).filter(lambda c: c.kvh == 2))
def test_kv_heads_serve_their_query_heads(arm, gate, body, case):
    rep = case.rep
    q = case.q_mx
    swapped_q = mx.concatenate([q[:, rep:], q[:, :rep]], axis=1)
    out = run(case, arm, body)
    swapped = run(case, arm, body, q=swapped_q, keys=swap_heads(case.keys), values=swap_heads(case.values))
    gate.bit_exact(swapped, mx.concatenate([out[:, rep:], out[:, :rep]], axis=1),
                   what="KV heads swapped with their query head blocks", kernel=KERNEL, case=case.id)


# --- eligibility and bad input -----------------------------------------------------


def small_case(**overrides):
    import numpy as np

    params = dict(dtype="bfloat16", h=4, kvh=2, n=40, block=64)
    return build_kvq4_case(np.random.default_rng(0), **(params | overrides))


def test_a_compiled_arm_refuses_a_gqa_factor_past_its_memory(monkeypatch):
    """The seed body on a compiled arm checks q's GQA factor (H / KVH) against that arm's threadgroup memory before
    anything is built: Metal's 32 KiB holds GQA 6, not 8 (``threadgroup_bytes``). A stand-in arm and compiled call
    (no GPU): GQA 6 reaches the compiled call, GQA 8 is refused naming the factor."""
    import impl.kvq4_decode as kvq4

    built = []
    monkeypatch.setattr(kvq4, "resolve_arm", lambda arm: "metal")
    monkeypatch.setattr(kvq4, "_RECENT", RecentCalls(16))
    monkeypatch.setattr(kvq4, "_compiled_pair", lambda arm, scale, block, signature: (
        built.append(arm) or (lambda *inputs: None)))
    fits = small_case(h=12, kvh=2)
    kvq4.kvq4_decode(fits.q_mx, fits.keys, fits.values, scale=fits.scale, body="seed")
    assert built == ["metal"]
    past = small_case(h=16, kvh=2)
    with pytest.raises(ValueError, match="GQA factor 8"):
        kvq4.kvq4_decode(past.q_mx, past.keys, past.values, scale=past.scale, body="seed")
    assert built == ["metal"]


def test_threadgroup_memory_bounds_the_gqa_factor(gate):
    # osh + msh + lsh in float32: 4 * (4 * REP * 256 + 8 * REP) bytes
    assert threadgroup_bytes(6) == 24768 and threadgroup_bytes(8) == 33024
    assert max_gqa_factor("metal") == 6 and max_gqa_factor("cuda") == 10 and max_gqa_factor("graph") is None
    # the direct body's combine buffers hold at most MAX_ROWS query rows whatever the GQA factor
    from impl.paged_attention import MAX_ROWS, SIMDGROUPS, THREADGROUP_MEMORY as DIRECT_LIMIT
    assert 4 * SIMDGROUPS * MAX_ROWS * (256 + 2) <= DIRECT_LIMIT
    case = small_case(h=24, kvh=2)  # GQA 12: beyond both devices' seed body; the graph arm has no such bound
    ref, base = kvq4_oracles(case)
    floor, why = decode_error_floor(ref, case.dtype, case.q, case.k32, case.v32, scale=case.scale)
    for body in BODIES:  # both bodies at GQA 12, against the oracle (not only their shape)
        out = run(case, "graph", body)
        assert out.shape == (1, 24, 1, 256)
        gate.error_ratio(out, ref, base, floor=floor, why=f"FlashAttention's rule (factor 2, naive T baseline); {why}",
                         kernel=KERNEL, case=f"{case.id}-{body}-gqa12")


def test_default_body_is_direct_below_float32_lengths():
    assert default_body(1) == default_body(32768) == default_body(2**24 - 1) == "direct"
    assert default_body(2**24) == default_body(2**24 + 5) == "seed"
    for h, kvh in ((4, 2), (8, 1)):  # a call without body runs the chosen one, with one KV head too
        case = small_case(h=h, kvh=kvh)
        chosen = kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, block=64, arm="graph")
        assert mx.array_equal(chosen, run(case, "graph", default_body(case.keys.packed.shape[2]))).item()
        assert mx.array_equal(chosen, run(case, "graph", "direct")).item()


def test_direct_body_refuses_a_cache_past_float32_integers():
    """The direct body reads N from a float32; a cache of 2**24 positions (broadcast views: nothing is
    allocated or run) is refused before any launch, naming the argument."""
    case = small_case()
    n = 2**24
    planes = QuantizedKV(*(mx.broadcast_to(p[:, :, :1], (1, 2, n, p.shape[-1])) for p in case.keys[:3]))
    for body in ("direct", "".join(("dir", "ect"))):  # a literal and a name built at run time (not interned)
        with pytest.raises(ValueError, match=r"N=16777216 positions; body='direct'"):
            kvq4_decode(case.q_mx, planes, planes, scale=case.scale, body=body, arm="graph")


def test_eligibility_follows_the_seed():
    case = small_case()
    assert kvq4_decode_eligible(case.q_mx, case.keys, 64, 4)
    assert not kvq4_decode_eligible(case.q_mx, case.keys, 32, 4)
    assert not kvq4_decode_eligible(case.q_mx, case.keys, 64, 8)
    assert not kvq4_decode_eligible(mx.zeros((1, 6, 1, 256)), case.keys, 64, 4)  # GQA 3
    assert not kvq4_decode_eligible(mx.zeros((1, 4, 2, 256)), case.keys, 64, 4)  # L = 2
    assert not kvq4_decode_eligible(mx.zeros((1, 4, 1, 128)), case.keys, 64, 4)  # D = 128
    assert not kvq4_decode_eligible(mx.zeros((1, 4, 1, 512)), case.keys, 64, 4)  # D = 512: 256 exactly, not at least
    assert not kvq4_decode_eligible(mx.zeros((1, 0, 1, 256)), case.keys, 64, 4)  # no query heads (0 % KVH is 0)
    assert not kvq4_decode_eligible(mx.zeros((2, 4, 1, 256)), case.keys, 64, 4)  # batch 2
    assert not kvq4_decode_eligible(case.q_mx, "keys", 64, 4)
    # bits and group size as ints only: arrays (elementwise ==) and bools are not the seed's ints; NumPy ints are
    assert kvq4_decode_eligible(case.q_mx, case.keys, np.int64(64), np.int32(4))
    for group, bits in [(np.array([64, 64]), 4), (mx.array(64), 4), (64, mx.array(4)), (64.0, 4), (64, 4.0)]:
        assert not kvq4_decode_eligible(case.q_mx, case.keys, group, bits)


def replace(planes: QuantizedKV, **changes) -> QuantizedKV:
    return planes._replace(**changes)


BAD_INPUTS = {
    "head_dim": (lambda c: dict(q=mx.zeros((1, 4, 1, 128), mx.bfloat16)), ValueError, "head dim D=128"),
    "two_rows": (lambda c: dict(q=mx.zeros((1, 4, 2, 256), mx.bfloat16)), ValueError, "one query row"),
    "batch": (lambda c: dict(q=mx.zeros((2, 4, 1, 256), mx.bfloat16)), ValueError, "one query row"),
    "q_5d": (lambda c: dict(q=mx.zeros((1, 4, 1, 256, 1), mx.bfloat16)), ValueError, "one query row"),
    "odd_gqa": (lambda c: dict(q=mx.zeros((1, 6, 1, 256), mx.bfloat16)), ValueError, "GQA factor 3 must be even"),
    "heads": (lambda c: dict(q=mx.zeros((1, 5, 1, 256), mx.bfloat16)), ValueError, "not a multiple"),
    "one_head": (lambda c: dict(q=mx.zeros((1, 1, 1, 256), mx.bfloat16)), ValueError, "H=1 heads, not a multiple"),
    "q_dtype": (lambda c: dict(q=c.q_mx.astype(mx.float16)), ValueError, "keys.scales has dtype"),
    "q_int": (lambda c: dict(q=mx.zeros((1, 4, 1, 256), mx.int32)), ValueError, "q must be one of"),
    "bits": (lambda c: dict(keys=replace(c.keys, bits=8)), ValueError, "keys.bits must be 4"),
    "group": (lambda c: dict(values=replace(c.values, group_size=32)), ValueError, "values.group_size must be 64"),
    "packed_width": (lambda c: dict(keys=replace(c.keys, packed=c.keys.packed[..., :16])), ValueError,
                     r"keys.packed must have shape \[1, KVH, N, 32\]"),
    "packed_dtype": (lambda c: dict(keys=replace(c.keys, packed=c.keys.packed.astype(mx.int32))), ValueError,
                     "keys.packed must be uint32"),
    "scales_groups": (lambda c: dict(values=replace(c.values, scales=c.values.scales[..., :2])), ValueError,
                      "values.scales must have shape"),
    "biases_dtype": (lambda c: dict(keys=replace(c.keys, biases=c.keys.biases.astype(mx.float32))), ValueError,
                     "keys.biases has dtype"),
    "length_mismatch": (lambda c: dict(values=QuantizedKV(*(p[:, :, :30] for p in c.values[:3]))), ValueError,
                        "values have"),
    "empty_cache": (lambda c: dict(keys=QuantizedKV(*(p[:, :, :0] for p in c.keys[:3])),
                                   values=QuantizedKV(*(p[:, :, :0] for p in c.values[:3]))), ValueError, "N = 0"),
    "planes_type": (lambda c: dict(keys=[c.keys.packed, c.keys.scales]), TypeError, "keys must be a QuantizedKV"),
    "plane_type": (lambda c: dict(keys=replace(c.keys, scales=None)), TypeError, "keys.scales must be an mx.array"),
    "block_zero": (lambda c: dict(block=0), ValueError, "block must be >= 1"),
    "block_float": (lambda c: dict(block=64.0), TypeError, "block must be an int"),
    "scale_nan": (lambda c: dict(scale=float("nan")), ValueError, "scale must be finite"),
    "scale_str": (lambda c: dict(scale="0.1"), TypeError, "scale must be a real number"),
    "arm": (lambda c: dict(arm="vulkan"), ValueError, "arm must be one of"),
    "body": (lambda c: dict(body="fast"), ValueError, "body must be None or one of"),
    "body_type": (lambda c: dict(body=3), ValueError, "body must be None or one of"),
    "no_heads": (lambda c: dict(q=mx.zeros((1, 0, 1, 256), mx.bfloat16)), ValueError, "H=0"),
    "no_kv_heads": (lambda c: dict(keys=QuantizedKV(*(p[:, :0] for p in c.keys[:3])),
                                   values=QuantizedKV(*(p[:, :0] for p in c.values[:3]))), ValueError, "KVH = 0"),
    "bits_float": (lambda c: dict(keys=replace(c.keys, bits=4.0)), ValueError, "keys.bits must be 4"),
    "group_float": (lambda c: dict(values=replace(c.values, group_size=64.0)), ValueError,
                    "values.group_size must be 64"),
}


@pytest.mark.parametrize("what", sorted(BAD_INPUTS))
def test_bad_input_raises_naming_the_argument(what):
    case = small_case()
    change, error, message = BAD_INPUTS[what]
    args = dict(q=case.q_mx, keys=case.keys, values=case.values, scale=case.scale, block=case.block,
                arm="graph") | change(case)
    with pytest.raises(error, match=message):
        kvq4_decode(args.pop("q"), args.pop("keys"), args.pop("values"), **args)


@pytest.mark.parametrize("body", BODIES)
def test_a_block_past_what_changes_the_numbers_is_clamped(body):
    # direct: a block of >= N tokens is one partition; seed: a block of >= SUB * N tokens puts every token in the
    # first sub-chunk. Larger blocks compute the same numbers, so the call clamps them (a huge block once
    # allocated in proportion to it in the graph arm, or overflowed its int32 token index).
    case = small_case()
    n = case.keys.packed.shape[2]
    same = n if body == "direct" else SUB * n
    one = kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, block=same, body=body, arm="graph")
    for block in (same + 1, 10**9, 2**31):
        out = kvq4_decode(case.q_mx, case.keys, case.values, scale=case.scale, block=block, body=body, arm="graph")
        assert mx.array_equal(out, one).item(), block


def test_plain_tuples_are_accepted():
    case = small_case()
    out = kvq4_decode(case.q_mx, tuple(case.keys[:3]), list(case.values[:3]), scale=case.scale, arm="graph")
    assert mx.array_equal(out, run(case, "graph")).item()
