"""Bad input to every public function of ``reference`` is refused by name.

The project's rule: a wrong kind of argument is a TypeError, an argument out of
range a ValueError, and the message names the argument. A bool is never an
int; NumPy integers (and NumPy bools for flags) are accepted as their Python
counterparts.

Each row of ``BAD_CALLS`` takes one function's valid call (``GOOD``), replaces
one argument, and says which exception must come back; the message must name
the replaced argument (``argument``; the name the message uses when it
differs). ``GOOD`` itself must succeed, so each row fails for its one bad
argument only. ``ALLOWED_EDGES`` lists the degenerate inputs that stay allowed
(empty masks, no keys, windows wider than the keys, NumPy scalars).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from reference import attention, masks, metrics, quant, sampling

_RNG = np.random.default_rng(0)
_Q = _RNG.standard_normal((1, 4, 3, 8)).astype(np.float32)
_K = _RNG.standard_normal((1, 2, 5, 8)).astype(np.float32)
_POOL = _RNG.standard_normal((3, 2, 4, 8)).astype(np.float32)
_W = _RNG.standard_normal((2, 64)).astype(np.float32)
_PACKED, _SCALES, _BIASES = quant.quantize(_W, group_size=32, bits=4)
_ROWS = np.zeros((2, 4), np.float32)
_HUGE = 2**70  # past int64 (and an axis NumPy could hold)

# function name -> (function, valid keyword arguments)
GOOD = {
    "packed_width": (quant.packed_width, dict(columns=32, bits=4)),
    "pack": (quant.pack, dict(codes=np.zeros((1, 32), np.uint8), bits=4)),
    "unpack": (quant.unpack, dict(packed=np.zeros((1, 4), np.uint32), bits=4)),
    "widen": (quant.widen, dict(x=_W.astype(np.float16))),
    "narrow": (quant.narrow, dict(x=_W, dtype=np.float16)),
    "cast": (quant.cast, dict(x=_W, dtype="bfloat16")),
    "quantize": (quant.quantize, dict(w=_W, group_size=32, bits=4)),
    "dequantize": (quant.dequantize, dict(packed=_PACKED, scales=_SCALES, biases=_BIASES, group_size=32, bits=4)),
    "key_visibility": (attention.key_visibility, dict(L=3, N=5, causal=True, window=2)),
    "attention_ref": (attention.attention_ref, dict(q=_Q, k=_K, v=_K, scale=0.5)),
    "attention_ref_torch": (attention.attention_ref_torch, dict(q=_Q, k=_K, v=_K, scale=0.5)),
    "attention_noise_floor": (attention.attention_noise_floor, dict(q=_Q, k=_K, v=_K, scale=0.5, dtype="float16")),
    "paged_attention_ref": (attention.paged_attention_ref,
                            dict(q=_Q[:, :, :2], key_pool=_POOL, value_pool=_POOL, block_table=[2, 0], length=6,
                                 scale=0.5)),
    "split_merge_ref": (attention.split_merge_ref,
                        dict(opart=np.zeros((2, 1, 4)), mpart=np.zeros((2, 1)), lpart=np.ones((2, 1)))),
    "causal_mask": (masks.causal_mask, dict(N=2, offset=1, window=None)),
    "bidirectional_mask": (masks.bidirectional_mask, dict(L=2, window=None, bidir=np.array([True, False]))),
    "batched_decode_mask": (masks.batched_decode_mask, dict(batch=2, tokens=1, total=3, left_pad=[0, 1])),
    "logsumexp_ref": (sampling.logsumexp_ref, dict(logits=_ROWS)),
    "mlx_argmax_ref": (sampling.mlx_argmax_ref, dict(x=_ROWS)),
    "normalized_argmax_ref": (sampling.normalized_argmax_ref, dict(logits=_ROWS, dtype="float16")),
    "normalized_scores_ref": (sampling.normalized_scores_ref, dict(logits=_ROWS, dtype="float16", lse=np.zeros(2))),
    "round_to": (sampling.round_to, dict(x=_ROWS, dtype="bfloat16")),
    "dtype_name": (metrics.dtype_name, dict(dtype=np.float16)),
    "to_numpy": (metrics.to_numpy, dict(x=[1.0, 2.0])),
    "as_f64": (metrics.as_f64, dict(x=_ROWS)),
    "canonical_nan": (metrics.canonical_nan, dict(x=_ROWS)),
    "check_same_shape": (metrics.check_same_shape, dict(a=_ROWS, b=_ROWS, names=("a", "b"))),
    "nonfinite_mismatch": (metrics.nonfinite_mismatch, dict(actual=_ROWS, expected=_ROWS)),
    "max_abs_error": (metrics.max_abs_error, dict(actual=_ROWS, expected=_ROWS)),
    "nmse": (metrics.nmse, dict(actual=_ROWS, expected=_ROWS)),
    "round_once": (metrics.round_once, dict(x=_ROWS, dtype="float16")),
    "ordered_bits": (metrics.ordered_bits, dict(x=_ROWS, dtype="float16")),
    "ulp_distance": (metrics.ulp_distance, dict(actual=_ROWS, expected=_ROWS, dtype="float16")),
    "max_ulp": (metrics.max_ulp, dict(actual=_ROWS, expected=_ROWS, dtype="float16")),
    "kl_divergence": (metrics.kl_divergence, dict(ref_logits=_ROWS, test_logits=_ROWS, axis=-1)),
    "dtype_spacing": (metrics.dtype_spacing, dict(magnitude=1.0, dtype="float16")),
    "rounding_noise_floor": (metrics.rounding_noise_floor, dict(expected=_ROWS, dtype="float16")),
    "error_ratio": (metrics.error_ratio, dict(actual=_ROWS, reference=_ROWS, baseline=_ROWS, factor=2.0, floor=0.0)),
}

T, V = TypeError, ValueError

# (function, argument, bad value, exception)
BAD_CALLS = [
    # --- reference.quant
    ("packed_width", "columns", -1, V), ("packed_width", "columns", _HUGE, V), ("packed_width", "columns", 1.5, T),
    ("packed_width", "columns", True, T), ("packed_width", "columns", None, T), ("packed_width", "columns", 33, V),
    ("packed_width", "bits", 0, V), ("packed_width", "bits", -1, V), ("packed_width", "bits", 1.5, T),
    ("packed_width", "bits", True, T), ("packed_width", "bits", "4", T), ("packed_width", "bits", _HUGE, V),
    ("pack", "codes", None, T), ("pack", "codes", "x", T), ("pack", "codes", np.zeros((1, 32), np.float32), V),
    ("pack", "codes", np.zeros((1, 2), np.uint8), V), ("pack", "codes", np.full((1, 32), 16), V),
    ("pack", "bits", True, T), ("pack", "bits", 7, V),
    ("unpack", "packed", None, T), ("unpack", "packed", np.zeros((1, 4), np.int32), V), ("unpack", "bits", 1.5, T),
    ("widen", "x", [1.0], T), ("widen", "x", np.zeros(3), V), ("widen", "x", np.zeros(3, np.int32), V),
    ("narrow", "x", np.zeros(3), V), ("narrow", "x", None, T), ("narrow", "dtype", None, T),
    ("narrow", "dtype", "x", V), ("narrow", "dtype", np.int8, V), ("narrow", "dtype", 1.5, T),
    ("cast", "x", [1.0], T), ("cast", "dtype", True, T), ("cast", "dtype", "float64", V),
    ("quantize", "w", None, T), ("quantize", "w", _W.astype(np.float64), V), ("quantize", "group_size", True, T),
    ("quantize", "group_size", np.int64(48), V), ("quantize", "bits", _HUGE, V), ("quantize", "bits", 1, V),
    ("dequantize", "dtype", 5, T), ("dequantize", "dtype", "x", V), ("dequantize", "dtype", np.float64, V),
    ("dequantize", "scales", [1.0], T), ("dequantize", "biases", _BIASES.astype(np.float16), V),
    ("dequantize", "bits", "4", T), ("dequantize", "group_size", 16, V),
    # --- reference.attention
    ("key_visibility", "L", -1, V), ("key_visibility", "L", 1.5, T), ("key_visibility", "L", True, T),
    ("key_visibility", "N", _HUGE, V), ("key_visibility", "N", None, T), ("key_visibility", "N", "5", T),
    ("key_visibility", "causal", 1, T), ("key_visibility", "causal", "x", T), ("key_visibility", "causal", None, T),
    ("key_visibility", "window", 0, V), ("key_visibility", "window", -1, V), ("key_visibility", "window", 1.5, T),
    ("key_visibility", "window", True, T),
    ("attention_ref", "scale", True, T), ("attention_ref", "scale", "1", T), ("attention_ref", "scale", None, T),
    ("attention_ref", "scale", float("inf"), V), ("attention_ref", "scale", 10**400, V),
    ("attention_ref", "upcast", 1, T), ("attention_ref", "upcast", None, T), ("attention_ref", "reorder_ops", "x", T),
    ("attention_ref", "fully_masked", None, T), ("attention_ref", "fully_masked", np.array(["zeros"]), T),
    ("attention_ref", "fully_masked", "mean", V), ("attention_ref", "window", 2.0, T),
    ("attention_ref", "window", 0, V), ("attention_ref", "q", None, T), ("attention_ref", "mask", "full", V),
    ("attention_ref", "sinks", np.zeros(3), V),
    ("attention_ref_torch", "fully_masked", 0, T), ("attention_ref_torch", "window", True, T),
    ("attention_ref_torch", "scale", float("nan"), V),
    ("attention_noise_floor", "dtype", None, T), ("attention_noise_floor", "dtype", 16, T),
    ("attention_noise_floor", "dtype", "int8", V), ("attention_noise_floor", "scale", True, T),
    ("paged_attention_ref", "length", True, T), ("paged_attention_ref", "length", 1.5, T),
    ("paged_attention_ref", "length", 0, V), ("paged_attention_ref", "length", _HUGE, V),
    ("paged_attention_ref", "block_table", [2.0, 0.0], V), ("paged_attention_ref", "block_table", [[2, 0]], V),
    ("paged_attention_ref", "block_table", [2, 5], V), ("paged_attention_ref", "block_table", [-1, 0], V),
    ("paged_attention_ref", "block_table", [2], V), ("paged_attention_ref", "block_table", None, T),
    ("paged_attention_ref", "upcast", 0, T), ("paged_attention_ref", "key_pool", _POOL[:, :1], V),
    ("split_merge_ref", "opart", None, T), ("split_merge_ref", "mpart", "x", T),
    ("split_merge_ref", "lpart", np.ones((2, 1), np.int32), V),
    # --- reference.masks
    ("causal_mask", "N", -1, V), ("causal_mask", "N", 1.5, T), ("causal_mask", "N", True, T),
    ("causal_mask", "N", _HUGE, V), ("causal_mask", "offset", None, T), ("causal_mask", "offset", -1, V),
    ("causal_mask", "offset", 2**63 - 2, V),  # offset + N past int64
    ("causal_mask", "window", 0, V), ("causal_mask", "window", True, T), ("causal_mask", "window", 1.5, T),
    ("bidirectional_mask", "L", True, T), ("bidirectional_mask", "L", -1, V), ("bidirectional_mask", "window", 0, V),
    ("bidirectional_mask", "window", 1.5, T), ("bidirectional_mask", "bidir", np.array([1, 0]), V),
    ("bidirectional_mask", "bidir", np.array([True]), V), ("bidirectional_mask", "bidir", None, T),
    ("batched_decode_mask", "batch", 0, V), ("batched_decode_mask", "batch", True, T),
    ("batched_decode_mask", "tokens", 1.5, T), ("batched_decode_mask", "total", None, T),
    ("batched_decode_mask", "total", _HUGE, V), ("batched_decode_mask", "left_pad", [0, True], T),
    ("batched_decode_mask", "left_pad", [-1, 0], V), ("batched_decode_mask", "left_pad", [0, 3], V),
    ("batched_decode_mask", "left_pad", None, T), ("batched_decode_mask", "left_pad", [0.0, 1.0], V),
    ("batched_decode_mask", "left_pad", np.array([False, True]), V), ("batched_decode_mask", "left_pad", [0], V),
    ("batched_decode_mask", "window", -1, V), ("batched_decode_mask", "window", False, T),
    # --- reference.sampling
    ("normalized_argmax_ref", "dtype", None, T), ("normalized_argmax_ref", "dtype", 1.5, T),
    ("normalized_argmax_ref", "dtype", "float64", V), ("normalized_argmax_ref", "logits", None, T),
    ("normalized_argmax_ref", "lse", "x", T), ("normalized_argmax_ref", "lse", np.zeros(3), V),
    ("normalized_argmax_ref", "lse", np.zeros(2, np.int32), V),
    ("normalized_scores_ref", "dtype", np.int8, V), ("normalized_scores_ref", "lse", np.zeros((2, 2)), V),
    ("round_to", "x", None, T), ("round_to", "dtype", True, T),
    ("logsumexp_ref", "logits", "x", T), ("logsumexp_ref", "logits", np.zeros((2, 0)), V),
    ("mlx_argmax_ref", "x", None, T), ("mlx_argmax_ref", "x", np.zeros(3, np.int32), V),
    # --- reference.metrics
    ("dtype_name", "dtype", None, T), ("dtype_name", "dtype", 1.5, T), ("dtype_name", "dtype", float, T),
    ("to_numpy", "x", None, T), ("to_numpy", "x", "x", T), ("to_numpy", "x", [[1.0], [1.0, 2.0]], T),
    ("as_f64", "x", None, T), ("canonical_nan", "x", None, T),
    ("check_same_shape", "a", [1.0], T), ("check_same_shape", "names", "ab", T),
    ("nonfinite_mismatch", "expected", "x", T), ("max_abs_error", "actual", None, T),
    ("nmse", "actual", None, T), ("nmse", "expected", np.zeros(3), V),
    ("round_once", "x", None, T), ("round_once", "dtype", "float64", V), ("round_once", "dtype", np.float16, T),
    ("ordered_bits", "dtype", ["float16"], T), ("ulp_distance", "dtype", None, T), ("max_ulp", "dtype", "int8", V),
    ("kl_divergence", "axis", 1.5, T), ("kl_divergence", "axis", True, T), ("kl_divergence", "axis", None, T),
    ("kl_divergence", "axis", 2, V), ("kl_divergence", "axis", _HUGE, V),
    ("kl_divergence", "ref_logits", np.zeros((2, 0)), V),  # no vocabulary (NumPy's empty-reduction error before)
    ("nmse", "actual", np.array([1 + 5j, 2, 3]), T),  # complex: a float64 copy drops the imaginary part
    ("dtype_spacing", "magnitude", None, T), ("dtype_spacing", "magnitude", True, T),
    ("dtype_spacing", "magnitude", float("nan"), V), ("dtype_spacing", "dtype", "float64", V),
    ("rounding_noise_floor", "dtype", None, T), ("rounding_noise_floor", "expected", "x", T),
    ("error_ratio", "factor", True, T), ("error_ratio", "factor", "2", T), ("error_ratio", "factor", 0, V),
    ("error_ratio", "floor", None, T), ("error_ratio", "floor", -1.0, V), ("error_ratio", "floor", 10**400, V),
]


def _label(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array{list(value.shape)}{value.dtype}"
    if isinstance(value, type):
        return value.__name__
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**32:
        return f"2**{value.bit_length() - 1}" if value > 0 else "-big"
    return re.sub(r"\s+", "", repr(value))[:24]


def _id(function, argument, value, error) -> str:
    return f"{function}-{argument}={_label(value)}-{error.__name__}"


@pytest.mark.parametrize("function", sorted(GOOD))
def test_the_valid_call_is_accepted(function):
    call, kwargs = GOOD[function]
    call(**kwargs)


@pytest.mark.parametrize("function, argument, value, error", BAD_CALLS, ids=[_id(*row) for row in BAD_CALLS])
def test_bad_input_is_refused_by_name(function, argument, value, error):
    call, kwargs = GOOD[function]
    assert argument in kwargs or argument in call.__code__.co_varnames, f"{function} has no argument {argument}"
    with pytest.raises(error) as info:
        call(**{**kwargs, argument: value})
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"  # not a subclass (AxisError)
    named = re.search(rf"\b{re.escape(argument)}\b", str(info.value))
    assert named, f"message does not name {argument!r}: {info.value}"


def test_paged_pools_without_slots_are_refused_by_name():
    empty = _POOL[:, :, :0]  # block_size 0: no token fits, so no length can be read
    with pytest.raises(ValueError, match=r"\bkey_pool\b.*block_size"):
        attention.paged_attention_ref(_Q[:, :, :2], empty, empty, [0], 1, scale=0.5)


def test_every_public_function_has_a_row():
    """A new public function gets rows here too (metrics has no ``__all__``: its public names are its functions)."""
    public = {name for module in (quant, attention, masks, sampling) for name in module.__all__
              if callable(getattr(module, name)) and not isinstance(getattr(module, name), type)}
    public |= {name for name, value in vars(metrics).items()
               if callable(value) and not name.startswith("_") and getattr(value, "__module__", "") == metrics.__name__
               and not isinstance(value, type)}
    public -= {"finite_both"}  # an elementwise helper on arrays: any two broadcastable arrays are valid
    assert public - {row[0] for row in BAD_CALLS} == set()


# --- what stays allowed --------------------------------------------------------------------------------------------

_WIDE = 2**70  # a window past every key hides nothing: the same as no window

ALLOWED_EDGES = [
    # zero-size results that are mathematically fine
    ("no queries", lambda: attention.key_visibility(0, 5, causal=True, window=None).shape, (0, 5)),
    ("no keys", lambda: attention.key_visibility(3, 0, causal=True, window=2).shape, (3, 0)),
    ("no new tokens", lambda: masks.causal_mask(0, 3).shape, (0, 3)),
    ("empty bidir", lambda: masks.bidirectional_mask(0, None, []).shape, (0, 0)),
    ("empty row", lambda: quant.packed_width(0, 4), 0),
    # NumPy scalars are the Python ones
    ("numpy ints", lambda: attention.key_visibility(np.int64(3), np.uint8(5), causal=np.bool_(True),
                                                    window=np.int32(2)).tolist(),
     attention.key_visibility(3, 5, causal=True, window=2).tolist()),
    ("numpy axis", lambda: metrics.kl_divergence(_ROWS, _ROWS, axis=np.int64(-1)).tolist(), [0.0, 0.0]),
    ("numpy factor", lambda: metrics.error_ratio(_ROWS, _ROWS, _ROWS, factor=np.float32(2), floor=np.int64(0)).bound,
     0.0),
    ("numpy length", lambda: attention.paged_attention_ref(_Q[:, :, :2], _POOL, _POOL, np.array([2, 0]), np.int64(6),
                                                           scale=0.5, upcast=np.bool_(True)).shape, (1, 4, 2, 8)),
    # integer arrays hold no NaN: canonical_nan hands them back
    ("int canonical_nan", lambda: metrics.canonical_nan(np.arange(3)).tolist(), [0, 1, 2]),
    # a window wider than every distance is the same as none, however wide
    ("wide window mask", lambda: masks.causal_mask(2, 1, _WIDE).tolist(), masks.causal_mask(2, 1).tolist()),
    ("wide window batched", lambda: masks.batched_decode_mask(2, 1, 3, [0, 1], _WIDE).tolist(),
     masks.batched_decode_mask(2, 1, 3, [0, 1]).tolist()),
    ("wide window visibility", lambda: attention.key_visibility(3, 5, causal=True, window=_WIDE).tolist(),
     attention.key_visibility(3, 5, causal=True, window=None).tolist()),
    ("wide window attention", lambda: attention.attention_ref(_Q, _K, _K, scale=0.5, mask="causal",
                                                              window=_WIDE).tolist(),
     attention.attention_ref(_Q, _K, _K, scale=0.5, mask="causal").tolist()),
]


@pytest.mark.parametrize("call, expected", [(c, e) for _, c, e in ALLOWED_EDGES], ids=[n for n, _, _ in ALLOWED_EDGES])
def test_degenerate_but_valid_input_stays_allowed(call, expected):
    assert call() == expected


def test_a_window_wider_than_the_keys_reaches_torch_as_an_int64():
    wide = attention.attention_ref_torch(_Q, _K, _K, scale=0.5, mask="causal", window=_WIDE)
    np.testing.assert_array_equal(wide, attention.attention_ref_torch(_Q, _K, _K, scale=0.5, mask="causal",
                                                                      window=_K.shape[2]))
