"""Properties of normalized argmax (``impl.normalized_argmax``), every available arm.

Hypothesis draws ``[rows, V]`` batches (``properties.strategies.argmax``) with
one plant per row: ties at drawn positions (for the row kernel: inside one
thread's chunks or across threads, drawn ids landing in any of them; the
strategies' 1024-wide "tiles" are the seed kernel's, kept as placements),
ties made by rounding the normalized score (of two columns, half the time
of one thread of the row kernel, and of three columns of one thread, whose
lowest id must win over the thread's top and the top it displaced), NaN /
+inf / -inf entries, all-NaN and all -inf rows, rows of finite negative logits
(a padded column read as 0 would win), huge magnitudes; V on both load paths
of the row kernel (1023, 1025, 2049 element-wise; 1024, 32000 4-lane vectors);
bf16, f16, f32.

* every row equals the contract's oracle ``normalized_argmax_ref`` computed
  with the device's own logsumexp (bit-exact ids: ``gate.equal``);
* on rows with no NaN normalized score it equals MLX's native
  ``argmax(logits - logsumexp(logits))``;
* rows are independent: leading axes and row order change nothing;
* the output is uint32 with shape ``logits.shape[:-1]``.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.normalized_argmax import normalized_argmax, normalized_argmax_native
from properties import strategies as sts
from reference.sampling import normalized_argmax_ref

FIXTURES_OK = settings(suppress_health_check=[*settings.default.suppress_health_check,
                                              HealthCheck.function_scoped_fixture])


def case_id(batch) -> str:
    return f"{batch.dtype}-V{batch.vocab}-rows{len(batch.plants)}-" + "+".join(sorted(set(batch.plants)))


@FIXTURES_OK
@given(batch=sts.logits_batches())
def test_matches_the_contract_oracle(arm, gate, batch):
    logits = sts.to_mx(batch.logits, batch.dtype)
    out = normalized_argmax(logits, arm=arm)
    assert out.dtype == mx.uint32 and out.shape == logits.shape[:-1]
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    expected = normalized_argmax_ref(batch.logits, batch.dtype, lse=lse)
    gate.equal(out, expected, what="normalized_argmax_ref with MLX's lse: lowest id on ties, NaN as -inf",
               kernel="normalized_argmax", case=case_id(batch))


@FIXTURES_OK
@given(batch=sts.logits_batches())
def test_matches_native_where_native_has_no_nan(arm, gate, batch):
    logits = sts.to_mx(batch.logits, batch.dtype)
    scores = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
    clean = ~np.array(mx.any(mx.isnan(scores), axis=-1))
    out, native = np.array(normalized_argmax(logits, arm=arm)), np.array(normalized_argmax_native(logits))
    gate.equal(out[clean], native[clean],
               what="native argmax(logits - logsumexp) on rows without a NaN score (native lets NaN win)",
               kernel="normalized_argmax", case=case_id(batch))


@FIXTURES_OK
@given(batch=sts.logits_batches(vocab_sizes=(1023, 1025, 2049), max_rows=6), data=st.data())
def test_rows_are_independent(arm, gate, batch, data):
    logits = sts.to_mx(batch.logits, batch.dtype)
    rows = logits.shape[0]
    order = data.draw(st.permutations(range(rows)), label="row order")
    whole = np.array(normalized_argmax(logits, arm=arm))
    shuffled = np.array(normalized_argmax(logits[mx.array(order)], arm=arm))
    one_by_one = np.array([normalized_argmax(logits[i], arm=arm).item() for i in range(rows)])
    gate.equal(shuffled, whole[order], what="rows permuted", kernel="normalized_argmax", case=case_id(batch))
    gate.equal(one_by_one, whole, what="each row alone (a 1-D input)", kernel="normalized_argmax",
               case=case_id(batch))
    if rows % 2 == 0:
        stacked = normalized_argmax(logits.reshape(2, rows // 2, -1), arm=arm)
        assert stacked.shape == (2, rows // 2)
        gate.equal(stacked, whole.reshape(2, rows // 2), what="leading axes [2, rows/2]",
                   kernel="normalized_argmax", case=case_id(batch))


# --- inputs outside the kernel's eligibility --------------------------------

@pytest.mark.parametrize("dtype", [mx.int32, mx.uint8, mx.int64])
def test_integer_logits_keep_the_native_ops(arm, gate, dtype):
    logits = mx.array(np.random.default_rng(0).integers(0, 100, (3, 1500))).astype(dtype)
    logits[1, 7] = 200  # the row's unique maximum
    gate.equal(normalized_argmax(logits, arm=arm), normalized_argmax_native(logits),
               what="integer input: argmax(logits - logsumexp(logits)) unchanged", kernel="normalized_argmax",
               case=f"{dtype}")


# What has no argmax (no vocabulary, no order), each with the error it is: refused naming logits before any op runs.
BAD_LOGITS = [(mx.zeros((2, 0)), ValueError), (mx.zeros((0,)), ValueError), (mx.array(1.0), ValueError),
              (np.zeros((2, 3), np.float32), TypeError), ([[1.0, 2.0]], TypeError), (None, TypeError),
              (mx.zeros((2, 3), dtype=mx.bool_), TypeError), (mx.zeros((2, 3), dtype=mx.complex64), TypeError)]
ZERO_ROWS = [(shape, dtype) for shape in [(0, 5), (3, 0, 7)] for dtype in (mx.bfloat16, mx.float32, mx.int32)]


def check_empty_and_bad_inputs(run) -> None:
    for bad, error in BAD_LOGITS:
        with pytest.raises(error, match="^logits must"):
            run(bad)
    for shape, dtype in ZERO_ROWS:  # zero rows give zero ids
        out = run(mx.zeros(shape, dtype=dtype))
        assert out.shape == shape[:-1] and out.dtype == mx.uint32


def test_empty_and_bad_inputs(arm):
    check_empty_and_bad_inputs(lambda x: normalized_argmax(x, arm=arm))
    with pytest.raises(ValueError, match="arm"):
        normalized_argmax(mx.zeros((2, 3)), arm="opencl")


def test_native_takes_and_refuses_the_same_inputs():
    """``normalized_argmax_native`` (exported, arm-free) holds the call's input contract."""
    check_empty_and_bad_inputs(normalized_argmax_native)
