"""``reference.sampling``: the normalized-argmax contract against MLX's native greedy path on the CPU.

Native here is ``mx.argmax(logits - mx.logsumexp(logits, -1, keepdims=True), -1)``.
What is established (each a gate or a named, recorded fact):

* ``normalized_scores_ref(logits, T, lse=MLX's lse)`` reproduces MLX's
  normalized scores bit for bit, and native argmax is ``mlx_argmax_ref`` of
  them on every row;
* ``normalized_argmax_ref(logits, T, lse=MLX's lse)`` equals native on every
  row without a NaN score; on rows with one, native returns the first NaN
  (e.g. the first ``+inf`` logit) while the contract returns 0 / the best
  non-NaN score (named facts);
* the float64-lse contract and the MLX-lse contract differ only by ties that
  rounding to T makes or breaks: their picks are within one T ULP in score
  under either lse (property + a constructed, recorded instance);
* planted ties (inside a 1024 tile, across tiles, at 1023/1024) go to the
  lowest index, for V in 1023, 1024, 1025, 2049, 32000 and once 151936;
* ``round_to`` rounds float64 once, whatever ml_dtypes' own float64 -> bfloat16 cast does (older
  versions round twice, through float32; recorded as a finding).
"""

from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties import strategies as sts
from reference import metrics
from reference.sampling import (
    SCORE_DTYPES,
    logsumexp_ref,
    mlx_argmax_ref,
    normalized_argmax_ref,
    normalized_scores_ref,
    round_to,
)
from reference.tests.helpers import relied_on

NATIVE = "mx.argmax(logits - mx.logsumexp(logits))"
ORACLE = "normalized_argmax_ref"
DTYPES = ("float32", "float16", "bfloat16")
VOCABS = sts.VOCAB_SIZES
TILE = sts.ARGMAX_TILE
PROPERTY_SETTINGS = settings(
    suppress_health_check=list(settings.default.suppress_health_check) + [HealthCheck.function_scoped_fixture])
_BITS = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}
# What the project relies on in MLX's argmax, and where: said by any failing check of it below.
NATIVE_RELIED_ON = (
    "MLX {version} changed mx.argmax on rows without a NaN (the first index of the maximum; -0 ties +0): the "
    "project relies on it: impl.normalized_argmax is held equal to native argmax(logits - logsumexp) on such rows "
    "(parity/test_normalized_argmax.py::test_normalized_argmax) and the contract's lowest-index rule is native's. "
    "MLX's rule for NaN (mlx_argmax_ref: NaN beats every number) is no such dependency: it is recorded as findings")


def nan_free(scores: np.ndarray) -> np.ndarray:
    """Rows [...] without a NaN score: where MLX's argmax is the first maximum, the rule the project relies on."""
    return ~np.isnan(np.asarray(scores).astype(np.float64)).any(axis=-1)


def to_mlx(x: np.ndarray) -> mx.array:
    if x.dtype == ml_dtypes.bfloat16:  # NumPy has no bfloat16: hand MLX the bits
        return mx.array(x.view(np.uint16)).view(mx.bfloat16)
    return mx.array(x)


def native(logits: np.ndarray):
    """(token ids, MLX's lse [..., 1], MLX's normalized scores) on the CPU."""
    x = to_mlx(logits)
    lse = mx.logsumexp(x, -1, keepdims=True, stream=mx.cpu)
    scores = mx.subtract(x, lse, stream=mx.cpu)
    ids = mx.argmax(scores, -1, stream=mx.cpu)
    return np.array(ids).astype(np.int64), lse, metrics.to_numpy(scores)


def planted(dtype: str, V: int, positions, *, seed: int = 0, rows: int = 1) -> np.ndarray:
    """Random logits with the row maximum planted at every index in ``positions``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, V))
    x[:, list(positions)] = x.max() + 1.0
    return x.astype(sts.numpy_dtype(dtype))


# --- round_to ------------------------------------------------------------------------


def _exact_round(x: float, dtype: str) -> float:
    """Round-to-nearest-even by exact rational comparison with a candidate's neighbours."""
    t = sts.numpy_dtype(dtype)
    uint = _BITS[dtype]
    fx = Fraction(x)
    top = Fraction(float(ml_dtypes.finfo(t).max))
    beyond = Fraction(2) ** (16 if dtype == "float16" else 128)  # the next power of two: max + 1 ULP
    if abs(fx) >= (top + beyond) / 2:  # IEEE: from the midpoint on (max's significand is odd) -> inf
        return float(np.copysign(np.inf, x))
    bits = int(np.array(x).astype(t).view(uint))
    best, best_key = None, None
    for b in (bits - 1, bits, bits + 1):
        if not 0 <= b < 2 ** (8 * t.itemsize):
            continue
        value = float(np.array(b, dtype=uint).view(t).astype(np.float64))
        if not np.isfinite(value):
            continue
        key = (abs(Fraction(value) - fx), b & 1)  # nearer first, then the even significand
        if best_key is None or key < best_key:
            best, best_key = value, key
    return best


@PROPERTY_SETTINGS
@given(dtype=st.sampled_from(DTYPES),
       values=st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-3e38, max_value=3e38),
                       min_size=1, max_size=20),
       halfway=st.booleans())
def test_round_to_rounds_once(gate, dtype, values, halfway):
    x = np.array(values)
    if halfway:  # exact midpoints between neighbours, and a hair either side: where double rounding bites
        near = round_to(x, dtype)
        ok = np.isfinite(near)
        near = near[ok]
        gaps = np.array([metrics.dtype_spacing(v, dtype) for v in near])
        mid = np.sign(near) * (np.abs(near) + gaps / 2)
        x = np.concatenate([mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf)])
    expected = np.array([_exact_round(float(v), dtype) for v in x])
    gate.bit_exact(round_to(x, dtype), expected, what=f"float64 -> {dtype}, one rounding to nearest even",
                   kernel="reference.sampling.round_to", case=dtype)


def _bfloat16_through_float32(x: float) -> float:
    """x rounded to float32 (NumPy), then to bfloat16 by round-to-nearest-even on the float32 bits: the double
    rounding of ml_dtypes 0.5.1's float64 -> bfloat16 cast. Written out here, so it depends on no ml_dtypes cast
    at all."""
    bits = int(np.array([x], np.float32).view(np.uint32)[0])
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16  # finite x only
    return float(np.array([bits], np.uint32).view(np.float32)[0])


def test_ml_dtypes_float64_to_bfloat16_cast_is_recorded(gate):
    """What the installed ml_dtypes' float64 -> bfloat16 cast does, recorded; round_to rounds once whatever it does.

    ml_dtypes 0.5.1 converts through float32 (rounding twice: 1 + 2**-8 + 2**-30 becomes 1); 0.7.0 rounds once.
    The project does not rely on either: ``metrics.round_once`` (behind ``round_to``) makes the float32 step
    round to odd and uses only ml_dtypes' float32 -> bfloat16 cast. A cast that is neither known behaviour fails.
    """
    value = 1 + 2**-8 + 2**-30  # just above the midpoint of 1 and 1 + 2**-7
    x = np.array([value])
    correct = _exact_round(value, "bfloat16")  # exact rational comparison: 1 + 2**-7
    twice = _bfloat16_through_float32(value)  # float32 first (1 + 2**-8, a bfloat16 tie), then to even: 1.0
    assert (correct, twice) == (1 + 2**-7, 1.0), "the probe must tell the two behaviours apart"
    ours = float(round_to(x, "bfloat16")[0])
    cast = float(x.astype(ml_dtypes.bfloat16).astype(np.float64)[0])
    behaviours = {"rounds once (correctly rounded)": correct, "rounds through float32 (double rounding)": twice}
    seen = [name for name, result in behaviours.items() if cast == result]
    behaviour = seen[0] if seen else "gives neither the correctly rounded nor the float32-double-rounded value"
    gate.finding(f"ml_dtypes float64 -> bfloat16 cast {behaviour}",
                 {"ml_dtypes": ml_dtypes.__version__, "x": value, "ml_dtypes result": cast,
                  "correctly rounded": correct, "through float32 (double rounding)": twice, "behaviour seen": behaviour,
                  "round_to": ours}, kernel="ml_dtypes")
    assert ours == correct, (f"round_to (reference.metrics.round_once) rounded {value!r} to {ours!r}, not the "
                             f"correctly rounded {correct!r} (ml_dtypes {ml_dtypes.__version__})")
    assert seen, (f"ml_dtypes {ml_dtypes.__version__} casts float64 {value!r} to bfloat16 {cast!r}: neither the "
                  f"correctly rounded {correct!r} nor the float32-double-rounded {twice!r}, the two behaviours known "
                  f"(0.5.1: through float32; 0.7.0: once). round_to does not use this cast; find out what changed "
                  f"and record it here")


# --- scores and native argmax ----------------------------------------------------------


@PROPERTY_SETTINGS
@given(batch=sts.logits_batches())
def test_scores_with_mlx_lse_are_mlx_scores(gate, batch):
    _, lse, mlx_scores = native(batch.logits)
    ours = normalized_scores_ref(batch.logits, batch.dtype, lse=lse).astype(SCORE_DTYPES[batch.dtype])
    gate.bit_exact(metrics.canonical_nan(ours), metrics.canonical_nan(mlx_scores),
                   what="round_T(logit - lse) in float64 == T arithmetic (53 >= 2*24+2: double rounding innocuous)",
                   kernel="mx.subtract(logits, mx.logsumexp)", case=f"{batch.dtype}-V{batch.vocab}-{'-'.join(batch.plants)}")


@PROPERTY_SETTINGS
@given(batch=sts.logits_batches())
def test_native_is_mlx_argmax_of_the_scores(gate, batch):
    """On rows without a NaN score (NaN rows: MLX's rule is recorded by test_degenerate_rows)."""
    ids, lse, _ = native(batch.logits)
    scores = normalized_scores_ref(batch.logits, batch.dtype, lse=lse)
    clean = nan_free(scores)
    with relied_on(NATIVE_RELIED_ON):
        gate.equal(ids[clean], mlx_argmax_ref(scores)[clean],
                   what="native argmax = first maximum, on the rows without a NaN score", kernel=NATIVE,
                   case=f"{batch.dtype}-V{batch.vocab}-{'-'.join(batch.plants)}")


def tiled_seed_argmax(scores: np.ndarray) -> np.ndarray:
    """The seed kernel's reduction: per 1024 tile (score, id) with NaN -> -inf, then across tiles with
    better(x, i, y, j) = x > y or (x == y and i < j), starting from (-inf, no id)."""
    scores = np.where(np.isnan(scores), -np.inf, scores)
    out = np.zeros(scores.shape[:-1], np.int64)
    for row in np.ndindex(*scores.shape[:-1]):
        best, best_id = -np.inf, None
        for start in range(0, scores.shape[-1], TILE):
            tile = scores[row][start:start + TILE]
            i = int(np.argmax(tile))  # first occurrence of the tile's maximum
            value, index = float(tile[i]), start + i
            if best_id is None or value > best or (value == best and index < best_id):
                best, best_id = value, index
        out[row] = best_id
    return out


@PROPERTY_SETTINGS
@given(batch=sts.logits_batches())
def test_contract_matches_native_without_nan_scores(gate, batch):
    ids, lse, mlx_scores = native(batch.logits)
    ours = normalized_argmax_ref(batch.logits, batch.dtype, lse=lse)
    case = f"{batch.dtype}-V{batch.vocab}-{'-'.join(batch.plants)}"
    gate.equal(ours, tiled_seed_argmax(normalized_scores_ref(batch.logits, batch.dtype, lse=lse)),
               what="the contract is the seed's tiled reduction", kernel=ORACLE, case=case)
    clean = ~np.isnan(mlx_scores.astype(np.float64)).any(axis=-1)
    gate.equal(ours[clean], ids[clean], what="rows with no NaN score: contract == native", kernel=NATIVE, case=case)


@PROPERTY_SETTINGS
@given(batch=sts.logits_batches())
def test_float64_and_mlx_lse_differ_only_by_rounding_ties(gate, batch):
    """Where the float64-lse and the MLX-lse contracts pick different ids, the two picks'
    scores are adjacent T values (or equal) under either lse: a tie made or broken by rounding."""
    _, lse, _ = native(batch.logits)
    by64 = normalized_argmax_ref(batch.logits, batch.dtype)
    byT = normalized_argmax_ref(batch.logits, batch.dtype, lse=lse)
    rows = np.flatnonzero(by64 != byT)
    case = f"{batch.dtype}-V{batch.vocab}-{'-'.join(batch.plants)}-differ{rows.tolist()}"
    for name, lse_used in (("float64 lse", None), ("MLX lse", lse)):
        scores = normalized_scores_ref(batch.logits, batch.dtype, lse_used)
        pick64 = scores[rows, by64[rows]].astype(SCORE_DTYPES[batch.dtype])
        pickT = scores[rows, byT[rows]].astype(SCORE_DTYPES[batch.dtype])
        gate.max_ulp(pick64, pickT, ulps=1, dtype=batch.dtype, kernel=ORACLE, case=f"{case}-{name}",
                     why="lse64 and MLX's lse differ by < 1 T ULP of lse; both picks hold the row's top score "
                         "under their own lse, so under either lse they are at most one rounding step apart")


def test_float64_and_mlx_lse_can_disagree(gate):
    """A named fact, constructed: rounding ties that one lse makes and the other does not."""
    for dtype in DTYPES:
        batch = np.stack([rounding_tie_row(dtype, 1024, a=3, b=700, seed=seed) for seed in range(64)])
        _, lse, _ = native(batch)
        by64 = normalized_argmax_ref(batch, dtype)
        byT = normalized_argmax_ref(batch, dtype, lse=lse)
        rows = np.flatnonzero(by64 != byT)
        assert rows.size, f"no disagreement in 64 rounding-tie rows for {dtype}"
        r = int(rows[0])
        lse64 = float(logsumexp_ref(batch[r])[0])
        gate.finding(f"normalized argmax ({dtype}): MLX's lse in {dtype} and the float64 lse can pick different ids",
                     {"rows differing (of 64)": int(rows.size), "row": r, "ids (float64 lse, MLX lse)":
                      [int(by64[r]), int(byT[r])], "lse float64": lse64,
                      "lse MLX": float(metrics.to_numpy(lse).astype(np.float64)[r, 0]),
                      "logits at the ids": [float(batch[r, 3]), float(batch[r, 700])],
                      "consequence": "a kernel is gated against normalized_argmax_ref(lse=MLX's lse)"},
                     kernel=ORACLE)


def rounding_tie_row(dtype: str, V: int, *, a: int, b: int, seed: int) -> np.ndarray:
    """Logits in [-2, -1] except -0.5 at a and the next value up at b > a (the strategy's plant)."""
    t = sts.numpy_dtype(dtype)
    row = -1.0 - np.random.default_rng(seed).random(V)
    bits = np.array(-0.5).astype(t).view(_BITS[dtype])
    row[a], row[b] = -0.5, float(np.array(bits - 1, dtype=_BITS[dtype]).view(t))  # magnitude down = value up
    return row.astype(t)


# --- planted ties, rounding ties ----------------------------------------------------------

TIE_PLACES = {
    "same-tile": lambda V: (5, 700 % V),
    "across-tiles": lambda V: (17, V - 3),
    "tile-boundary": lambda V: (TILE - 1, TILE),
    "three-way": lambda V: (2, V // 2, V - 1),
}


# Every (place, V) whose indices fit the vocabulary (no tile boundary below V = 1025).
TIE_CASES = [(place, V) for place in TIE_PLACES for V in VOCABS if max(TIE_PLACES[place](V)) < V]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("place, V", TIE_CASES, ids=[f"{p}-V{v}" for p, v in TIE_CASES])
def test_planted_ties_go_to_the_lowest_index(gate, dtype, V, place):
    positions = sorted(set(TIE_PLACES[place](V)))
    logits = planted(dtype, V, positions, rows=2)
    expected = np.full(2, positions[0])
    ids, lse, _ = native(logits)
    case = f"{dtype}-V{V}-{place}"
    gate.equal(normalized_argmax_ref(logits, dtype), expected, what="float64 lse", kernel=ORACLE, case=case)
    gate.equal(normalized_argmax_ref(logits, dtype, lse=lse), expected, what="MLX lse", kernel=ORACLE, case=case)
    with relied_on(NATIVE_RELIED_ON):
        gate.equal(ids, expected, what="native MLX", kernel=NATIVE, case=case)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rounding_makes_a_tie_the_lower_index_wins(gate, dtype):
    logits = rounding_tie_row(dtype, 2049, a=100, b=1500, seed=1)[None]
    assert int(np.argmax(logits.astype(np.float64))) == 1500  # the raw logits say 1500...
    ids, lse, scores = native(logits)
    assert scores.astype(np.float64)[0, 100] == scores.astype(np.float64)[0, 1500]  # ...the rounded scores tie
    gate.equal(normalized_argmax_ref(logits, dtype, lse=lse), [100], what="MLX lse", kernel=ORACLE, case=dtype)
    with relied_on(NATIVE_RELIED_ON):
        gate.equal(ids, [100], what="native argmax(logprobs) takes the first", kernel=NATIVE, case=dtype)
    gate.finding(f"normalized argmax ({dtype}): rounding to {dtype} merges logits one ULP apart; id 100 beats 1500",
                 {"logits[100]": float(logits[0, 100]), "logits[1500]": float(logits[0, 1500]),
                  "score": float(scores[0, 100])}, kernel=NATIVE)


# --- degenerate rows: named facts -------------------------------------------------------------


def degenerate(dtype: str, V: int = 1025) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    base = rng.standard_normal(V)
    rows = {"partly NaN": base.copy(), "all NaN": np.full(V, np.nan), "all -inf": np.full(V, -np.inf),
            "+inf at 700 and 1024": base.copy(), "+inf at 0": base.copy(), "mostly -inf": np.full(V, -np.inf)}
    rows["partly NaN"][[9, 1000]] = np.nan
    rows["+inf at 700 and 1024"][[700, 1024]] = np.inf
    rows["+inf at 0"][0] = np.inf
    rows["mostly -inf"][[40, 1030 % V]] = [1.0, 3.0]
    return {name: row.astype(sts.numpy_dtype(dtype)) for name, row in rows.items()}


@pytest.mark.parametrize("dtype", DTYPES)
def test_degenerate_rows(gate, dtype):
    rows = degenerate(dtype)
    logits = np.stack(list(rows.values()))
    ids, lse, scores = native(logits)
    ours = normalized_argmax_ref(logits, dtype, lse=lse)
    ours64 = normalized_argmax_ref(logits, dtype)
    # The contract: a NaN or +inf logit makes lse non-finite, an all -inf row has lse -inf:
    # every score is NaN or -inf, so the answer is 0. A row with finite scores answers normally.
    expected = np.array([0, 0, 0, 0, 0, 1030 % logits.shape[-1]])
    gate.equal(ours, expected, what="contract with MLX lse", kernel=ORACLE, case=dtype)
    gate.equal(ours64, expected, what="contract with float64 lse", kernel=ORACLE, case=dtype)
    # Native on the rows without a NaN score is the contract (what the project relies on); on the others it
    # follows MLX's NaN rule, which is recorded, not gated: an MLX that changed it breaks nothing of ours.
    clean = nan_free(scores)
    with relied_on(NATIVE_RELIED_ON):
        gate.equal(ids[clean], ours[clean], what="native == contract on the rows without a NaN score", kernel=NATIVE,
                   case=dtype)
    model = mlx_argmax_ref(scores)  # MLX 0.32's rule: the first NaN score wins
    inf_row = list(rows).index("+inf at 700 and 1024")  # inf - inf: the first +inf's score is NaN
    picked = int(ids[inf_row])
    what = ("picks the first +inf logit" if picked == 700 else
            f"picks id {picked} on a row with +inf at 700 and 1024 (not the first +inf logit)")
    gate.finding(f"native argmax(logits - logsumexp) ({dtype}) {what}; the contract picks 0",
                 {"mlx": mx.__version__, "native follows mlx_argmax_ref (first NaN score wins)": bool(
                     np.array_equal(ids, model)),
                  **{name: {"native": int(n), "contract": int(c), "mlx_argmax_ref": int(m), "MLX lse": float(
                      metrics.to_numpy(lse).astype(np.float64)[i, 0])}
                     for i, (name, n, c, m) in enumerate(zip(rows, ids, ours, model))}},
                 kernel=NATIVE)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_logits_under_a_finite_lse(gate, dtype):
    """With a given finite lse, NaN scores count as -inf in the contract; native argmax picks them."""
    logits = planted(dtype, 2049, [1500])
    logits[0, [3, 1800]] = np.nan
    lse = np.zeros((1, 1), sts.numpy_dtype(dtype))
    gate.equal(normalized_argmax_ref(logits, dtype, lse=lse), [1500], what="NaN -> -inf", kernel=ORACLE, case=dtype)
    ids = np.array(mx.argmax(mx.subtract(to_mlx(logits), to_mlx(lse), stream=mx.cpu), -1, stream=mx.cpu))
    picked, model = int(ids[0]), int(mlx_argmax_ref(logits)[0])  # MLX 0.32: the first NaN, id 3
    gate.finding(f"native argmax ({dtype}) under a finite lse picks "
                 + ("the first NaN score" if picked == 3 else f"id {picked} (not the first NaN score, 3)")
                 + "; the contract picks 1500",
                 {"mlx": mx.__version__, "native": picked, "contract": 1500, "mlx_argmax_ref": model,
                  "NaN at": [3, 1800], "largest logit at": 1500}, kernel=NATIVE)


@pytest.mark.parametrize("dtype", DTYPES)
def test_huge_magnitudes(gate, dtype):
    top = float(ml_dtypes.finfo(sts.numpy_dtype(dtype)).max)
    rng = np.random.default_rng(11)
    logits = (rng.uniform(-0.9, 0.9, (3, 2049)) * top).astype(sts.numpy_dtype(dtype))
    logits[0, [7, 1800]] = top  # a tie at the largest finite value
    logits[1, 5] = -top
    ids, lse, _ = native(logits)
    assert np.all(np.isfinite(metrics.to_numpy(lse).astype(np.float64)))
    gate.equal(normalized_argmax_ref(logits, dtype), ids, what="float64 lse", kernel=ORACLE, case=dtype)
    gate.equal(normalized_argmax_ref(logits, dtype, lse=lse), ids, what="MLX lse", kernel=ORACLE, case=dtype)
    with relied_on(NATIVE_RELIED_ON):
        assert ids[0] == 7, f"native picked {ids[0]} in a tie at the largest finite value, ids 7 and 1800"


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_full_vocabulary_151936(gate, dtype):
    V = 151936
    logits = planted(dtype, V, (TILE * 3 + 5, TILE * 100, V - 1), rows=2, seed=3)
    ids, lse, _ = native(logits)
    with relied_on(NATIVE_RELIED_ON):
        gate.equal(ids, [TILE * 3 + 5] * 2, what="native", kernel=NATIVE, case=f"{dtype}-V{V}")
    gate.equal(normalized_argmax_ref(logits, dtype, lse=lse), ids, what="MLX lse", kernel=ORACLE, case=f"{dtype}-V{V}")
    gate.equal(normalized_argmax_ref(logits, dtype), ids, what="float64 lse", kernel=ORACLE, case=f"{dtype}-V{V}")


# --- MLX's plain argmax ------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(batch=sts.logits_batches())
def test_mlx_argmax_ref_is_mx_argmax(gate, batch):
    """On rows without a NaN (NaN rows: MLX's rule is recorded by test_mlx_argmax_signed_zero_and_nan)."""
    ids = np.array(mx.argmax(to_mlx(batch.logits), -1, stream=mx.cpu))
    clean = nan_free(batch.logits)
    with relied_on(NATIVE_RELIED_ON):
        gate.equal(ids[clean], mlx_argmax_ref(batch.logits)[clean], what="first maximum, on the rows without a NaN",
                   kernel="mx.argmax", case=f"{batch.dtype}-V{batch.vocab}-{'-'.join(batch.plants)}")


def test_mlx_argmax_signed_zero_and_nan(gate):
    x = np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -1.0], [1.0, np.nan, np.nan], [np.nan, np.inf, 2.0]], np.float32)
    gate.equal(mlx_argmax_ref(x), [0, 0, 1, 0], what="mlx_argmax_ref: signed zeros tie (first wins); first NaN wins",
               kernel="reference.sampling.mlx_argmax_ref")
    ids = np.array(mx.argmax(mx.array(x), -1, stream=mx.cpu))
    with relied_on(NATIVE_RELIED_ON):
        gate.equal(ids[:2], [0, 0], what="signed zeros tie, the first wins", kernel="mx.argmax")
    nan_ids = [int(i) for i in ids[2:]]
    gate.finding("mx.argmax (CPU) on rows with NaN " + ("returns the first NaN's index (NaN beats every number)"
                                                        if nan_ids == [1, 0] else f"returns {nan_ids}, not the first "
                                                        "NaN's index [1, 0] (mlx_argmax_ref's rule)"),
                 {"mlx": mx.__version__, "rows": ["[1, nan, nan]", "[nan, inf, 2]"], "mx.argmax": nan_ids,
                  "mlx_argmax_ref": [int(i) for i in mlx_argmax_ref(x)[2:]],
                  "consequence": "none for the project: normalized_argmax (float32/float16/bfloat16) treats NaN "
                                 "as -inf and is compared with native only on rows without a NaN score"},
                 kernel="mx.argmax")


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, match", [
    (lambda: normalized_argmax_ref(np.zeros(4), "float64"), ValueError, "dtype must be one of"),
    (lambda: normalized_argmax_ref(np.zeros((2, 0)), "float32"), ValueError, "logits must have a non-empty last"),
    (lambda: normalized_argmax_ref(np.float32(1.0), "float32"), ValueError, "logits must have a non-empty last"),
    (lambda: normalized_argmax_ref(np.zeros(4, np.int32), "float32"), ValueError, "logits must be a float array"),
    (lambda: normalized_argmax_ref(np.zeros((2, 4)), "float32", lse=np.zeros(3)), ValueError,
     r"lse must have shape \(2,\) or \(2, 1\)"),
    (lambda: mlx_argmax_ref(np.zeros(0)), ValueError, "x must have a non-empty last"),
    (lambda: round_to(np.zeros(2), "int8"), ValueError, "dtype must be one of"),
])
def test_rejects_bad_arguments(call, error, match):
    with pytest.raises(error, match=match):
        call()
