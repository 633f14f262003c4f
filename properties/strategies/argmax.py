"""Hypothesis strategies for greedy selection: logits with planted ties, NaN, infinities.

A normalized-argmax kernel reduces 1024-wide tiles and then merges the tiles,
so the interesting inputs are ties inside one tile, ties across tiles (and
across the boundary 1023/1024), ties that only appear after rounding the
normalized score to the dtype, and non-finite rows. (The "tiles" are the seed
kernel's, kept as placements; the row kernel's own thread of a column is
``same_thread_columns``'s: rounding ties of two or three columns of one thread,
``rounding_tie`` half the time and ``rounding_tie_3``, reach its re-read of a
thread's earlier columns.) Rows of finite negative logits (``all_negative``)
make a padded column that reads 0 instead of -inf win. ``logits_batches``
draws a ``[rows, V]`` batch where each row carries one such plant::

    @given(batch=sts.logits_batches(dtypes=("bfloat16",), vocab_sizes=(1025,)))
    def test_x(batch): batch.logits, batch.plants, batch.dtype

Arrays are NumPy in the batch's dtype (bfloat16 as ``ml_dtypes.bfloat16``),
filled from a Hypothesis-drawn seed; the planted positions are drawn by
Hypothesis itself so that failures shrink to small indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from .attention import numpy_dtype

__all__ = [
    "ARGMAX_DTYPES",
    "ARGMAX_TILE",
    "PLANTS",
    "VOCAB_SIZES",
    "LogitsBatch",
    "logits_batches",
    "same_thread_columns",
]

ARGMAX_DTYPES = ("float32", "float16", "bfloat16")
ARGMAX_TILE = 1024  # the seed kernel's tile width
# 1023/1024/1025: one tile, exactly one, one plus a column; 2049: three tiles; 32000: a real vocabulary.
VOCAB_SIZES = (1023, 1024, 1025, 2049, 32000)
PLANTS = (
    "plain",              # no plant: random logits
    "tie_same_tile",      # the maximum twice inside one 1024 tile
    "tie_across_tiles",   # the maximum twice in different tiles
    "tie_tile_boundary",  # the maximum at 1023 and 1024 (needs V > 1024)
    "rounding_tie",       # two top logits one ULP apart that round to one normalized score
    "rounding_tie_3",     # three top logits of one thread, each one ULP above the last, rounding to one score
    "all_negative",       # every logit negative and finite (lse finite): a padded column read as 0 would win
    "nan",                # a few NaN logits
    "pos_inf",            # a few +inf logits
    "neg_inf",            # many -inf logits (some finite left)
    "all_nan",
    "all_neg_inf",
    "huge",               # magnitudes near the dtype's max
)


@dataclass(frozen=True)
class LogitsBatch:
    logits: np.ndarray  # [rows, V] in dtype
    dtype: str
    plants: tuple[str, ...]  # one per row
    positions: tuple[tuple[int, ...], ...]  # the planted indices per row (empty if none)

    @property
    def vocab(self) -> int:
        return int(self.logits.shape[-1])

    def __repr__(self) -> str:  # the logits would make Hypothesis reports unreadable
        return f"LogitsBatch({self.dtype}, rows={len(self.plants)}, V={self.vocab}, plants={self.plants}, " \
               f"positions={self.positions})"

    def _repr_pretty_(self, printer, cycle) -> None:  # Hypothesis' pretty printer
        printer.text(repr(self))


def _finfo_max(dtype: str) -> float:
    return float(ml_dtypes.finfo(numpy_dtype(dtype)).max)


def _next_up(value: float, dtype: str) -> float:
    """The next ``dtype`` value above ``value`` (a nonzero value representable in dtype)."""
    t = numpy_dtype(dtype)
    bits = np.array(value).astype(t).view(np.uint16 if t.itemsize == 2 else np.uint32)
    step = bits + 1 if value > 0 else bits - 1  # sign-magnitude: toward +inf
    return float(np.array(step, dtype=bits.dtype).view(t).astype(np.float64))


def same_thread_columns(a: int, V: int) -> list[int]:
    """The columns after ``a`` that the row kernel's thread of column a owns (``impl.normalized_argmax``: chunk k of
    CHUNK columns is thread k % threads_for(V)'s): the rest of a's chunk, then its chunks a round of threads apart."""
    from impl.normalized_argmax import CHUNK, threads_for

    stride = CHUNK * threads_for(V)
    chunk_end = min(V, (a // CHUNK + 1) * CHUNK)
    return list(range(a + 1, chunk_end)) + [col for k in range(1, -(-V // stride) + 1)
                                            for col in range((a // CHUNK) * CHUNK + k * stride,
                                                             min(V, (a // CHUNK + 1) * CHUNK + k * stride))]


@st.composite
def _row(draw, rng: np.random.Generator, V: int, dtype: str, plants) -> tuple[np.ndarray, str, tuple[int, ...]]:
    plant = draw(st.sampled_from(plants))
    amp = draw(st.sampled_from([1.0, 4.0, 30.0]))
    row = amp * rng.standard_normal(V)
    index = st.integers(0, V - 1)
    if plant == "plain":
        return row, plant, ()
    if plant in ("tie_same_tile", "tie_across_tiles", "tie_tile_boundary"):
        if plant == "tie_tile_boundary" and V > ARGMAX_TILE:
            a, b = ARGMAX_TILE - 1, ARGMAX_TILE
        elif plant == "tie_across_tiles" and V > ARGMAX_TILE:
            a = draw(st.integers(0, ARGMAX_TILE - 1))
            b = draw(st.integers(ARGMAX_TILE, V - 1))
        else:
            tile = draw(st.integers(0, (V - 1) // ARGMAX_TILE))
            lo, hi = tile * ARGMAX_TILE, min(V, (tile + 1) * ARGMAX_TILE) - 1
            a = draw(st.integers(lo, hi))
            b = draw(st.integers(lo, hi).filter(lambda i: i != a)) if hi > lo else a
        top = float(np.max(row)) + amp
        row[[a, b]] = top
        return row, plant, tuple(sorted({a, b}))
    if plant == "rounding_tie":
        # The top two logits are -0.5 and the next value up, one ULP apart;
        # every other logit lies in [-2, -1], so lse is about log(V) - 1.3 and
        # the normalized scores sit near -log(V), where the dtype's ULP is
        # coarser than at 0.5: the two usually merge into one score (and no
        # third logit can join them). The larger goes to the higher index, so
        # plain argmax(logits) and the lowest-index tie rule disagree.
        # Half the time the two are columns of one thread of the row kernel (``same_thread_columns``: the kernel's
        # re-read of an earlier, lower logit that rounds to the best score); drawn across the whole row, they share
        # a thread in well under 1% of batches, so a CI run could miss that path.
        row = -1.0 - rng.random(V)
        a = draw(st.integers(0, V - 2))
        later = same_thread_columns(a, V)
        if draw(st.booleans()) and later:
            b = draw(st.sampled_from(later))
        else:
            b = draw(st.integers(a + 1, V - 1))
        row[a], row[b] = -0.5, _next_up(-0.5, dtype)
        return row, plant, (a, b)
    if plant == "rounding_tie_3":
        # As rounding_tie, three columns a < b < c of one thread, each logit one ULP above the last: the thread's
        # top is c's, the top it displaced (``before``) b's, and the answer a, the lowest id whose rounded score is
        # the best: a thread that compared unrounded logits (with ``before``, or with its top) would answer b or c.
        row = -1.0 - rng.random(V)
        a = draw(st.integers(0, V - 3))
        later = same_thread_columns(a, V)
        if len(later) < 2:  # a's thread has no two later columns: the tie of two (rounding_tie) instead
            b = draw(st.integers(a + 1, V - 1))
            row[a], row[b] = -0.5, _next_up(-0.5, dtype)
            return row, plant, (a, b)
        i = draw(st.integers(0, len(later) - 2))
        b, c = later[i], draw(st.sampled_from(later[i + 1:]))
        row[a] = -0.5
        row[b] = _next_up(row[a], dtype)
        row[c] = _next_up(row[b], dtype)
        return row, plant, (a, b, c)
    if plant == "all_negative":
        return -np.abs(row) - 0.5, plant, ()
    if plant in ("nan", "pos_inf"):
        where = sorted(draw(st.lists(index, min_size=1, max_size=3, unique=True)))
        row[where] = np.nan if plant == "nan" else np.inf
        return row, plant, tuple(where)
    if plant == "neg_inf":
        row[rng.choice(V, size=draw(st.integers(1, V - 1)), replace=False)] = -np.inf
        return row, plant, ()
    if plant == "all_nan":
        return np.full(V, np.nan), plant, ()
    if plant == "all_neg_inf":
        return np.full(V, -np.inf), plant, ()
    if plant == "huge":
        big = _finfo_max(dtype)
        row = rng.uniform(-1.0, 1.0, V) * big * 0.9
        a = draw(index)
        row[a] = big
        return row, plant, (a,)
    raise ValueError(f"unknown plant {plant!r}; expected one of {PLANTS}")


@st.composite
def logits_batches(draw, *, dtypes=ARGMAX_DTYPES, vocab_sizes=VOCAB_SIZES, max_rows: int = 4,
                   plants=PLANTS) -> LogitsBatch:
    """A [rows, V] logits batch in one dtype, one plant per row (see ``PLANTS``)."""
    dtype = draw(st.sampled_from(dtypes))
    V = draw(st.sampled_from(vocab_sizes))
    rows = draw(st.integers(1, max_rows))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    drawn = [draw(_row(rng, V, dtype, plants)) for _ in range(rows)]
    logits = np.stack([r for r, _, _ in drawn]).astype(numpy_dtype(dtype))
    return LogitsBatch(logits, dtype, tuple(p for _, p, _ in drawn), tuple(pos for _, _, pos in drawn))
