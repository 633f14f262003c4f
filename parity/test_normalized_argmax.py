"""Parity gates of normalized argmax (``impl.normalized_argmax``), every available arm.

Per dtype (bf16, f16, f32) and vocabulary size (tile edges 1023/1024/1025,
three tiles 2049, 32000 and Qwen's 151936), one batch whose rows each carry a
known hazard (``ROWS``). Gates (kernel "normalized_argmax"):

* ``gate.equal`` against MLX's native ``mx.argmax(logits - mx.logsumexp(...))``
  on the same device, on the rows where native's contract agrees: rows with no
  NaN normalized score (native lets NaN beat every number);
* ``gate.equal`` against the NumPy oracle ``normalized_argmax_ref`` with the
  device's lse, on every row (the contract: NaN as -inf, lowest id on ties, 0
  for a row with no finite score);
* a ``finding`` records what native does on the NaN rows, where it differs.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from impl.normalized_argmax import TILE, normalized_argmax, normalized_argmax_native
from properties import strategies as sts
from reference.sampling import normalized_argmax_ref, round_to

DTYPES = ["bfloat16", "float16", "float32"]
VOCAB_SIZES = [1023, 1024, 1025, 2049, 32000, 151936]
# ULP of 1.0 in each dtype: two logits 1 apart in ULPs stay distinct, their scores
# near -log(V) (4 to 16 times coarser) round together.
EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23}


def row(kind: str, V: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(V) * 3.0
    top = float(np.max(x)) + 2.0
    last = V - 1
    if kind == "plain":
        return x
    if kind == "tie_in_tile":  # the max twice inside tile 0; raw argmax and ours agree: the lower
        x[[5, min(700, last)]] = top
    elif kind == "tie_across_tiles":  # the last column (possibly in the last tile) and column 3
        x[[3, last]] = top
    elif kind == "tie_at_tile_edge":  # columns 1023 and 1024 straddle the first tile boundary
        x[[min(TILE - 1, last - 1), min(TILE, last)]] = top
    elif kind == "rounding_tie":
        # Logits near 0 put lse near log(V): the scores there are 16x coarser than
        # the logits, so 0 and +1 ULP merge. The larger logit sits at the HIGHER id:
        # raw argmax would take it, the normalized argmax must take the lower id.
        x = -np.abs(rng.standard_normal(V)) * 0.01 - 0.05
        x[[2, last]] = (0.0, EPS[dtype])
    elif kind == "neg_inf":  # most columns -inf, a finite max in the last tile
        x[: V - 3] = -np.inf
    elif kind == "huge":  # magnitudes near the dtype's max; lse stays finite
        big = 60000.0 if dtype == "float16" else 3.0e38
        x = rng.uniform(-1.0, 1.0, V) * big * 0.5
        x[V // 2] = big
    elif kind == "pos_inf":  # +inf makes lse +inf: every score NaN or -inf
        x[[V // 3, last]] = np.inf
    elif kind == "nan":
        x[[1, V // 2]] = np.nan
    elif kind == "all_nan":
        x[:] = np.nan
    elif kind == "all_neg_inf":
        x[:] = -np.inf
    else:
        raise ValueError(f"unknown row kind {kind!r}")
    return x


ROWS = ["plain", "tie_in_tile", "tie_across_tiles", "tie_at_tile_edge", "rounding_tie", "neg_inf", "huge",
        "pos_inf", "nan", "all_nan", "all_neg_inf"]


def batch(dtype: str, V: int) -> tuple[np.ndarray, mx.array]:
    rng = np.random.default_rng(V)
    rows = np.stack([round_to(row(kind, V, dtype, rng), dtype) for kind in ROWS])
    return rows, sts.to_mx(rows, dtype)


@pytest.mark.gate
@pytest.mark.parametrize("V", VOCAB_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_normalized_argmax(arm, gate, dtype, V):
    rows, logits = batch(dtype, V)
    out = np.array(normalized_argmax(logits, arm=arm))
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    scores = logits - lse
    nan_rows = np.array(mx.any(mx.isnan(scores), axis=-1))
    native = np.array(normalized_argmax_native(logits))
    clean = [kind for kind, bad in zip(ROWS, nan_rows) if not bad]
    gate.equal(out[~nan_rows], native[~nan_rows],
               what=f"native argmax(logits - logsumexp) on the rows without a NaN score: {', '.join(clean)}",
               kernel="normalized_argmax", case=f"{dtype}-V{V}-native")
    gate.equal(out, normalized_argmax_ref(rows, dtype, lse=lse),
               what="normalized_argmax_ref with MLX's lse, every row", kernel="normalized_argmax",
               case=f"{dtype}-V{V}-oracle")
    if V == 1025:  # one record per dtype of where native and the contract part ways
        gate.finding("native argmax(logits - logsumexp) on rows with NaN scores", {
            "dtype": dtype, "V": V,
            "rows": {kind: {"native": int(n), "normalized_argmax": int(o)}
                     for kind, bad, n, o in zip(ROWS, nan_rows, native, out) if bad},
        }, kernel="normalized_argmax")


@pytest.mark.gate
@pytest.mark.parametrize("dtype", DTYPES)
def test_rounding_tie_takes_the_lower_id(arm, gate, dtype):
    """The planted rounding tie really is one: raw argmax picks the higher id, ours the lower."""
    rows, logits = batch(dtype, 32000)
    i = ROWS.index("rounding_tie")
    raw = int(mx.argmax(logits[i]).item())
    gate.equal(np.array([raw, int(normalized_argmax(logits[i], arm=arm).item())]), np.array([31999, 2]),
               what="raw argmax takes the larger logit (id 31999); the rounded scores tie, lowest id 2 wins",
               kernel="normalized_argmax", case=f"{dtype}-rounding-tie")
