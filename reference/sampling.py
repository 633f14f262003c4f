"""Reference greedy selection: the normalized-argmax contract and MLX's plain argmax.

The seed's ``normalizedArgmax`` (normalized-argmax.ts) returns, per row of
``logits [..., V]`` in dtype T, the token ``argmax(T(logits - logsumexp(logits)))``:
the argmax of the dtype-rounded log-probabilities, not of the raw logits.
Rounding to T can merge distinct logits into one score, and such a tie must
resolve exactly as ``argmax(logprobs)`` would: to the LOWEST index. So the
contract, per row (``normalized_argmax_ref``):

1. the logits are taken in T (rounded to T if given wider);
2. ``lse = logsumexp(row)``: float64 here by default, or the ``lse`` you pass;
3. ``score_i = round_T(logit_i - lse)`` (the difference formed in float64 and
   rounded once to T);
4. NaN scores count as ``-inf``;
5. the answer is the lowest index holding the maximum score. A row with no
   finite score (and no ``+inf``) has every score ``-inf``: index 0.

Which ``lse``? The seed (and MLX's ``logits - logsumexp(logits)``) subtracts
MLX's logsumexp rounded to T, not the exact one. Both are within half a T ULP
of each other, but that is enough to move a rounding boundary: two logits
whose scores round to one T value under one lse may round apart under the
other, so the argmax can differ between the two (only ever among logits that
round to the top score under one of them, never by more). So:

* ``normalized_argmax_ref(logits, dtype)``: the float64 contract.
* ``normalized_argmax_ref(logits, dtype, lse=mlx_lse)``: the same rule with the
  device's own lse, which reproduces MLX's normalized scores bit for bit (a
  float64 difference of two T values rounds to T exactly as T arithmetic does:
  53 >= 2*24 + 2 bits, so double rounding is innocuous). A kernel must match
  this bit-exactly; ``normalized_scores_ref`` exposes the scores themselves.

Degenerate rows: a row with a NaN logit has a NaN lse, a row with a ``+inf``
logit an infinite lse, an all ``-inf`` row a ``-inf`` lse; every score is then
NaN or ``-inf``, and the contract returns 0. MLX's plain ``argmax`` differs
(``mlx_argmax_ref``): NaN beats every number, so native
``argmax(logits - logsumexp(logits))`` returns the first NaN score's index,
e.g. the first ``+inf`` logit of a row.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from reference import metrics

__all__ = [
    "SCORE_DTYPES",
    "logsumexp_ref",
    "mlx_argmax_ref",
    "normalized_argmax_ref",
    "normalized_scores_ref",
    "round_to",
]

SCORE_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


# Argument checks: TypeError for the wrong kind, ValueError out of range, each naming the argument.


def _score_dtype(dtype) -> np.dtype:
    name = metrics.dtype_name(dtype)  # TypeError for what is no dtype at all (None, a number)
    if name not in SCORE_DTYPES:
        raise ValueError(f"dtype must be one of {tuple(SCORE_DTYPES)}, got {dtype!r}")
    return SCORE_DTYPES[name]


def round_to(x, dtype) -> np.ndarray:
    """float64 ``x`` rounded ONCE (to nearest, ties to even) to ``dtype``, returned as float64
    (``metrics.round_once``, which says why ``ml_dtypes``' own bfloat16 cast would not do)."""
    t = _score_dtype(dtype)
    x = metrics.to_numpy(x, name="x")  # refuses None and strings, which np.asarray(float64) reads as NaN / fails on
    return metrics.round_once(np.asarray(x, dtype=np.float64), t.name).astype(np.float64)


def _floats(x, name: str) -> np.ndarray:
    a = metrics.to_numpy(x, name=name)
    if not (np.issubdtype(a.dtype, np.floating) or metrics.dtype_name(a.dtype) == "bfloat16"):
        raise ValueError(f"{name} must be a float array, got dtype {a.dtype}")
    return a


def _rows(x, name: str) -> np.ndarray:
    a = metrics.to_numpy(x, name=name)
    if a.ndim == 0 or a.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty last (vocabulary) axis, got shape {a.shape}")
    return _floats(a, name)


def logsumexp_ref(logits) -> np.ndarray:
    """float64 ``log(sum(exp(row)))`` over the last axis, keepdims.

    Any NaN gives NaN; any ``+inf`` gives ``+inf``; an all ``-inf`` row gives ``-inf``.
    """
    x = _rows(logits, "logits").astype(np.float64)
    peak = np.max(x, axis=-1, keepdims=True)  # NaN propagates
    finite_peak = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # log(0) = -inf: all -inf rows
        total = np.sum(np.exp(x - finite_peak), axis=-1, keepdims=True)
        lse = finite_peak + np.log(total)
    return np.where(np.isfinite(peak), lse, peak)


def normalized_scores_ref(logits, dtype, lse=None) -> np.ndarray:
    """``round_dtype(logits - lse)`` as float64 values, shape of ``logits``.

    ``logits`` are first rounded to ``dtype``. ``lse`` (default
    ``logsumexp_ref`` of the rounded logits) may be ``[...]`` or ``[..., 1]``;
    it is used as given (e.g. MLX's logsumexp in ``dtype``).
    """
    t = _score_dtype(dtype)
    x = round_to(_rows(logits, "logits").astype(np.float64), t)
    if lse is None:
        lse64 = logsumexp_ref(x)
    else:
        lse64 = _floats(lse, "lse").astype(np.float64)
        if lse64.shape == x.shape[:-1]:
            lse64 = lse64[..., None]
        if lse64.shape != x.shape[:-1] + (1,):
            raise ValueError(f"lse must have shape {x.shape[:-1]} or {x.shape[:-1] + (1,)}, got {lse64.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        return round_to(x - lse64, t)


def normalized_argmax_ref(logits, dtype, lse=None) -> np.ndarray:
    """The normalized-argmax contract (module docstring): int64 token ids, shape ``logits.shape[:-1]``."""
    scores = normalized_scores_ref(logits, dtype, lse)
    scores = np.where(np.isnan(scores), -np.inf, scores)
    return np.argmax(scores, axis=-1).astype(np.int64)  # first maximum: lowest index wins ties


def mlx_argmax_ref(x) -> np.ndarray:
    """MLX's ``argmax(x, -1)``: the first maximum, with NaN greater than everything.

    So a row with any NaN returns its first NaN's index; otherwise the first
    index of the largest value (``-0.0 == +0.0`` tie, first wins). int64.
    """
    a = _rows(x, "x").astype(np.float64)
    nan = np.isnan(a)
    first_nan = np.argmax(nan, axis=-1)
    plain = np.argmax(np.where(nan, -np.inf, a), axis=-1)
    return np.where(nan.any(axis=-1), first_nan, plain).astype(np.int64)
