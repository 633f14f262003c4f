"""Parity gates of normalized argmax (``impl.normalized_argmax``), every available arm.

Per dtype (bf16, f16, f32) and vocabulary size, one batch whose rows each
carry a known hazard (``ROWS``). The vocabularies cover both load paths of the
row kernel: V % 4 != 0 reads elements (1023, 1025, 2049), V % 4 == 0 reads
4-lane vectors (1024, 32000 and Qwen's 151936; the last two take several
rounds of chunks per thread, 151936 several unrolled groups). Gates (kernel
"normalized_argmax"):

* ``gate.equal`` against MLX's native ``mx.argmax(logits - mx.logsumexp(...))``
  on the same device, on the rows where native's contract agrees: rows with no
  NaN normalized score (native lets NaN beat every number);
* ``gate.equal`` against the NumPy oracle ``normalized_argmax_ref`` with the
  device's lse, on every row (the contract: NaN as -inf, lowest id on ties, 0
  for a row with no finite score);
* a ``finding`` records what native does on the NaN rows, where it differs.

Also: rows read through views that start off the vector alignment (the kernel
must fall back to elements there), and the identity the kernel's score rests
on (a float32 difference of two T values, rounded to T, is MLX's T subtraction);
``test_padded_columns_never_win`` (rows of finite negative logits at
vocabularies that are not whole tiles of either scan: a column past the row
read as 0 would win) and ``test_rounding_tie_of_three_columns_in_one_thread``
(three columns of one thread, distinct logits, one rounded score: the lowest
id, not the thread's top nor the top it displaced, unless the scan compares
rounded scores), both against native and the oracle.

The fused variant (CUDA; the cuda arm's call) computes the lse itself, as
MLX's CUDA logsumexp does: ``test_fused_variant_shifts_by_mlx_logsumexp`` holds
its lse bit-exact to ``mx.logsumexp`` and its ids equal to the two launches'
(MLX's logsumexp, then the row kernel), on 62 rows per dtype at vocabularies
giving MLX's kernel each of its block sizes (32 to 1024 threads), one round of
chunks or many; the rows above reach it through ``normalized_argmax``.
"""

from __future__ import annotations

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest

from impl.normalized_argmax import (CHUNK, FUSED, FUSED_LSE, MAX_THREADS, fused_launch, lse_threads, normalized_argmax,
                                    normalized_argmax_native, row_launch, threads_for)
from properties import strategies as sts
from reference.metrics import canonical_nan
from reference.sampling import normalized_argmax_ref, normalized_scores_ref, round_to

DTYPES = ["bfloat16", "float16", "float32"]
VOCAB_SIZES = [1023, 1024, 1025, 2049, 32000, 151936]
# ULP of 1.0 in each dtype: two logits 1 apart in ULPs stay distinct, their scores
# near -log(V) (4 to 16 times coarser) round together.
EPS = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23}


def row(kind: str, V: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    x = rng.standard_normal(V) * 3.0
    top = float(np.max(x)) + 2.0
    last = V - 1
    edge = CHUNK * threads_for(V)  # the first column of round 1: chunk `threads` is thread 0's again
    if kind == "plain":
        return x
    if kind == "tie_in_chunk":  # the max twice in one chunk of thread 0: its strict > keeps the first
        x[[1, 2]] = top
    elif kind == "tie_in_thread":  # thread 0 in rounds 0 and 1 (in one chunk when V has a single round)
        x[[1, 1 + edge if 1 + edge <= last else 2]] = top
    elif kind == "tie_across_threads":  # chunk 1 (thread 1) and chunk 175 (thread 175): the lower id wins
        x[[5, min(700, last)]] = top
    elif kind == "tie_first_and_last":  # column 3 and the row's last column
        x[[3, last]] = top
    elif kind == "tie_at_round_edge":  # the last thread's last column of round 0 and thread 0's first of
        x[[min(edge - 1, last - 1), min(edge, last)]] = top  # round 1: the lower id sits in the higher thread
    elif kind == "max_at_end":  # the unique max in the row's last column
        x[last] = top
    elif kind == "rounding_tie":
        # Logits near 0 put lse near log(V): the scores there are 16x coarser than
        # the logits, so 0 and +1 ULP merge. The larger logit sits at the HIGHER id:
        # raw argmax would take it, the normalized argmax must take the lower id.
        x = -np.abs(rng.standard_normal(V)) * 0.01 - 0.05
        x[[2, last]] = (0.0, EPS[dtype])
    elif kind == "rounding_tie_in_thread":
        # The same, both in thread 0 (rounds 0 and 1; chunk 0 when V has a single round), the larger logit later:
        # the thread's largest logit is not its lowest id scoring the best (the kernel's re-read).
        x = -np.abs(rng.standard_normal(V)) * 0.01 - 0.05
        x[[2, 2 + edge if 2 + edge <= last else 3]] = (0.0, EPS[dtype])
    elif kind == "neg_inf":  # most columns -inf, a finite max in the last chunk
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


ROWS = ["plain", "tie_in_chunk", "tie_in_thread", "tie_across_threads", "tie_first_and_last", "tie_at_round_edge",
        "max_at_end", "rounding_tie", "rounding_tie_in_thread", "neg_inf", "huge", "pos_inf", "nan", "all_nan", "all_neg_inf"]


def batch(dtype: str, V: int) -> tuple[np.ndarray, mx.array]:
    rng = np.random.default_rng(V)
    rows = np.stack([round_to(row(kind, V, dtype, rng), dtype) for kind in ROWS])
    return rows, sts.to_mx(rows, dtype)


# The graph arm's memory: its arrays are the logits padded to whole rounds of ``threads_for(V)`` chunks (at most
# V + CHUNK * threads - 1 columns) in T and float32 and the masks over them. Measured on the CPU (MLX 0.32), its
# peak is 2.1 to 4.9 times rows x padded columns x 4 bytes for V from 7 to 151936; GRAPH_MEMORY = 16 leaves a 3x
# margin, where a padding past whole rounds (more rounds than ceil(V / (CHUNK * threads))) multiplies it.
GRAPH_MEMORY = 16


@pytest.mark.parametrize("V", [100, 1000, 4097])
def test_graph_arm_memory_is_a_few_padded_rows(V):
    if mx.default_device() != mx.cpu:
        pytest.skip("the bound was measured with MLX's CPU allocator (a GPU's rounds small buffers up)")
    x = mx.random.normal((8, V), key=mx.random.key(V))
    mx.eval(x, normalized_argmax(x, arm="graph"))  # traced and compiled once, outside the measure
    threads = threads_for(V)
    padded = CHUNK * threads * -(-V // (CHUNK * threads))
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    mx.eval(normalized_argmax(x, arm="graph"))
    used = mx.get_peak_memory() - before
    assert used <= GRAPH_MEMORY * x.shape[0] * padded * 4, f"V={V}: {used} bytes, padded rows of {padded} columns"


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


@pytest.mark.gate
@pytest.mark.parametrize("dtype", DTYPES)
def test_view_off_the_vector_alignment(arm, gate, dtype):
    """[2, 1024] views of one flat buffer, starting 1-4 elements in. V % 4 == 0 allows vector loads, but a
    start 1-3 elements past a 4-element boundary is misaligned for them (a fault on CUDA): those rows must be
    read element by element. Offset 4 is aligned again (vector loads)."""
    V = 1024
    rng = np.random.default_rng(11)
    flat = round_to(rng.standard_normal(4 + 2 * V) * 3.0, dtype)
    flat[4 + 5] = flat[4 + 700] = float(np.max(flat)) + 2.0  # a tie across threads in every view's first row
    buffer = sts.to_mx(flat, dtype)
    for offset in (1, 2, 3, 4):
        view = buffer[offset:offset + 2 * V].reshape(2, V)
        out = normalized_argmax(view, arm=arm)
        gate.equal(out, normalized_argmax_native(view), what=f"native, on a view {offset} elements into its buffer",
                   kernel="normalized_argmax", case=f"{dtype}-offset{offset}-native")
        lse = mx.logsumexp(view, axis=-1, keepdims=True)
        gate.equal(out, normalized_argmax_ref(flat[offset:offset + 2 * V].reshape(2, V), dtype, lse=lse),
                   what=f"normalized_argmax_ref with MLX's lse, on a view {offset} elements into its buffer",
                   kernel="normalized_argmax", case=f"{dtype}-offset{offset}-oracle")


@pytest.mark.gate
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_float32_difference_rounds_like_the_dtype(gate, dtype):
    """The row kernel forms ``logit - lse`` in float32 and rounds it to T; native subtracts in T. They agree
    bit for bit: with T's p-bit significand (bf16 8, f16 11), 24 >= 2p + 2, so rounding the float32 result
    to T gives the exactly rounded T difference. Checked against that single rounding (of the float64
    difference) and against MLX's own T subtraction: every finite T value against lse values near log(V),
    spread over T's range, subnormal, and at T's max (overflow to -inf)."""
    t = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(np.float16)
    every = np.arange(2**16, dtype=np.uint16).view(t)
    logits = every[np.isfinite(every.astype(np.float32))]
    finfo = ml_dtypes.finfo(t)
    tiny = float(finfo.smallest_subnormal)
    rng = np.random.default_rng(3)
    lse = np.concatenate([np.log([1024.0, 32000.0, 151936.0]),
                          [float(finfo.max), -float(finfo.max), tiny, 3 * tiny, 0.0],
                          rng.uniform(-1.0, 1.0, 24) * np.exp2(rng.uniform(-20, 15, 24))]).astype(t)
    x, shift = sts.to_mx(logits, dtype)[:, None], sts.to_mx(lse, dtype)[None, :]
    via_float32 = (x.astype(mx.float32) - shift.astype(mx.float32)).astype(x.dtype)
    with np.errstate(over="ignore"):  # differences past T's max round to -inf, as in T
        once = sts.to_mx(round_to(logits.astype(np.float64)[:, None] - lse.astype(np.float64)[None, :], dtype), dtype)
    gate.bit_exact(via_float32, once, what="T(float32(x) - float32(lse)) is the float64 difference rounded once "
                   "(53 >= 2 * 24 + 2: itself exact to T)", kernel="normalized_argmax", case=f"{dtype}-score-once")
    gate.bit_exact(via_float32, x - shift, what="T(float32(x) - float32(lse)) is MLX's x - lse in T",
                   kernel="normalized_argmax", case=f"{dtype}-score-native")


# --- padded columns and rounding ties inside one thread ---------------------------------------------------------

# Vocabularies that are not whole tiles of either scan (the row kernel's threads_for(V) threads x UNROLL chunks of
# CHUNK columns per round; the fused variant's lse_threads(V) threads, CUDA): 1000 (250 chunks: threads 250..255 own
# no column in both scans), 1023 (its last chunk holds 3 columns: a padded lane, element loads), 32000 (8000 chunks:
# the row kernel's second unrolled group and the fused variant's 8th round end inside the row: whole chunks past
# it, vector loads) and 151937 (38 rounds, element loads, a padded lane). Past the row's end a scan must read -inf.
# A lane that read 0 there (a chunk skipped and left zero-initialized, a vector load not bounded by the row, which
# reads the next row or past the buffer) beats every logit of a row of negative logits, and its score T(0 - lse)
# every score of the row: an id >= V. The rows' logits are finite and negative, so their lse is finite: the
# "all_neg_inf" row above shows a padded 0 only through its lse of -inf (0 - -inf wins), which a scan that answers
# every row without a finite lse up front (0, as the contract says) never looks at. "plain" follows the first row, so
# a read into the next row finds larger logits.
PAD_VOCABS = [1000, 1023, 32000, 151937]
NEGATIVE_ROWS = ["all_negative", "plain", "negative_max_last", "negative_among_neg_inf"]


def negative_row(kind: str, V: int, rng: np.random.Generator) -> np.ndarray:
    x = -np.abs(rng.standard_normal(V)) * 3.0 - 0.5
    if kind == "plain":  # random logits of both signs
        return rng.standard_normal(V) * 3.0
    if kind == "negative_max_last":  # the unique max in the row's last column, next to the padded ones
        x[-1] = -0.25
    elif kind == "negative_among_neg_inf":  # -inf but in the last chunk's columns, all negative
        x[:V - 3] = -np.inf
        x[V - 3:] = (-2.0, -1.0, -0.75)
    elif kind != "all_negative":
        raise ValueError(f"unknown row kind {kind!r}")
    return x


@pytest.mark.gate
@pytest.mark.parametrize("V", PAD_VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_padded_columns_never_win(arm, gate, dtype, V):
    rng = np.random.default_rng(V + 7)
    rows = np.stack([round_to(negative_row(kind, V, rng), dtype) for kind in NEGATIVE_ROWS])
    negative = [i for i, kind in enumerate(NEGATIVE_ROWS) if kind != "plain"]
    assert (rows[negative] < 0).all(), "every logit of these rows must be negative"
    logits = sts.to_mx(rows, dtype)
    out = normalized_argmax(logits, arm=arm)
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    assert bool(mx.all(mx.isfinite(lse)).item()), "every row's lse must be finite"
    gate.equal(out, normalized_argmax_native(logits),
               what=f"native argmax(logits - logsumexp): rows {', '.join(NEGATIVE_ROWS)} (no NaN score)",
               kernel="normalized_argmax", case=f"{dtype}-V{V}-padded-native")
    gate.equal(out, normalized_argmax_ref(rows, dtype, lse=lse), what="normalized_argmax_ref with MLX's lse",
               kernel="normalized_argmax", case=f"{dtype}-V{V}-padded-oracle")


# A rounding tie of three columns a < b < c of ONE thread (chunk k belongs to thread k % threads, in the row kernel
# with threads_for(V) threads and in the fused variant with lse_threads(V): the columns are chosen in the same thread
# of both), whose logits v_a < v_b < v_c are distinct values of T (and of float32) with one score T(v - lse), the
# row's best. The thread's top is c's and its ``before``, the top that c displaced, is v_b; the answer is a, the
# lowest id scoring the best. A thread that compares its earlier columns' unrounded logits (with v_c, or with
# ``before``) instead of their rounded scores with the best answers c or b. V: 1025 (one round: columns 1, 2, 3 of
# chunk 0), 32000 and 151936 (1024 threads in both scans: thread 0's chunks 1024, 2048 and 5120, the last in the
# row kernel's second unrolled group, so a re-read of the thread's chunks that strides by a whole unrolled group of
# UNROLL x threads chunks misses a). The logits: 0, TINY and 2 TINY, the other columns below -0.05, lse about log(V).
TIE_VOCABS = [1025, 32000, 151936]
TINY = {"bfloat16": 2.0**-12, "float16": 2.0**-16, "float32": 2.0**-26}  # far below a score's ULP near -log(V)


def thread_columns(V: int) -> tuple[int, int, int]:
    threads = threads_for(V)
    assert threads == lse_threads(V) or V <= CHUNK * min(threads, lse_threads(V)), V
    if V <= CHUNK * threads:  # a single round: one chunk holds all three
        return 1, 2, 3
    return tuple(CHUNK * (k * threads) + e for k, e in ((1, 1), (2, 2), (5, 3)))


@pytest.mark.gate
@pytest.mark.parametrize("V", TIE_VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rounding_tie_of_three_columns_in_one_thread(arm, gate, dtype, V):
    rng = np.random.default_rng(V + 11)
    x = -np.abs(rng.standard_normal(V)) * 0.01 - 0.05
    a, b, c = thread_columns(V)
    x[[a, b, c]] = (0.0, TINY[dtype], 2 * TINY[dtype])
    rows = round_to(x, dtype)[None]
    logits = sts.to_mx(rows, dtype)
    lse = mx.logsumexp(logits, axis=-1, keepdims=True)
    scores = normalized_scores_ref(rows, dtype, lse=lse)[0]
    for threads in {threads_for(V), lse_threads(V)}:
        assert len({(col // CHUNK) % threads for col in (a, b, c)}) == 1, "a, b, c must be one thread's columns"
    assert rows[0, a] < rows[0, b] < rows[0, c] and scores[a] == scores[b] == scores[c] == scores.max(), (
        "the three logits must be distinct values with one score, the row's best")
    expected = normalized_argmax_ref(rows, dtype, lse=lse)
    assert int(expected[0]) == a, "a must be the lowest id with the best score"
    out = normalized_argmax(logits, arm=arm)
    gate.equal(out, expected, what=f"the lowest of three columns of one thread tied by rounding ({a}, {b}, {c})",
               kernel="normalized_argmax", case=f"{dtype}-V{V}-tie3-oracle")
    gate.equal(out, normalized_argmax_native(logits), what="native argmax(logits - logsumexp)",
               kernel="normalized_argmax", case=f"{dtype}-V{V}-tie3-native")


# The fused variant (CUDA). Vocabularies: 1 and 3 (one partial chunk), 100 / 129 / 1000 (32 / 64 / 256 threads in
# MLX's logsumexp), 1023 / 1025 / 2049 (256, 512, 1024 threads; element loads), 4100 (two rounds, the second almost
# empty), 32000 and 151936 (8 and 38 rounds: one and five unrolled groups of chunks).
FUSED_VOCABS = [1, 3, 100, 129, 1000, 1023, 1025, 2049, 4100, 32000, 151936]
PLAIN_LSE_ROWS = 48  # each plain row is one more test of the summation order: a float32 lse shows any change in it


def lse_rows(V: int, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """62 rows of V logits for the lse gate: plain rows at several scales, a constant row, rows whose max comes
    last (it moves every round: the online rescale) or first, -inf sprinkled, +inf, NaN, all -inf, huge."""
    big = 60000.0 if dtype == "float16" else 3.0e38
    rows = [rng.standard_normal(V) * scale + shift
            for scale, shift in ((1e-3, 0.0), (0.1, 5.0), (1.0, 0.0), (3.0, -2.0), (10.0, 0.0), (100.0, 50.0))]
    rows += [rng.standard_normal(V) * 4.0 for _ in range(PLAIN_LSE_ROWS)]
    rows += [np.full(V, 0.5), np.linspace(-8.0, 8.0, V), np.linspace(8.0, -8.0, V)]
    sprinkled, pos_inf, nan = (rng.standard_normal(V) for _ in range(3))
    sprinkled[rng.random(V) < 0.5] = -np.inf
    pos_inf[-1] = np.inf
    nan[V // 2] = np.nan
    huge = rng.uniform(-1.0, 1.0, V) * big * 0.5
    huge[V // 3] = big
    rows += [sprinkled, pos_inf, nan, np.full(V, -np.inf), huge]
    return round_to(np.stack(rows), dtype)


@pytest.mark.gate
@pytest.mark.arms(*FUSED.arms)
@pytest.mark.parametrize("V", FUSED_VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_variant_shifts_by_mlx_logsumexp(arm, gate, dtype, V):
    """The fused variant's lse is ``mx.logsumexp`` of each row bit for bit (it mirrors MLX's CUDA kernel: the same
    threads, chunks, order and float operations), and its ids are the two-launch row kernel's. The lse is read
    from ``FUSED_LSE``, the same source storing it as a second output; the call's ``FUSED`` (no store) must give
    that instantiation's ids."""
    rows = lse_rows(V, dtype, np.random.default_rng(V))
    x = sts.to_mx(rows, dtype)
    launch, call = fused_launch(x, with_lse=True), fused_launch(x)
    assert launch.spec is FUSED_LSE and call.spec is FUSED and len(call.output_shapes) == 1
    assert launch.threadgroup[0] == call.threadgroup[0] == lse_threads(V)
    ids, lse = launch.run(arm)
    (call_ids,) = call.run(arm)
    gate.equal(call_ids, ids, what="the call's instantiation (no lse store) gives the gate's instantiation's ids",
               kernel="normalized_argmax", case=f"{dtype}-V{V}-fused-call")
    try:
        gate.bit_exact(canonical_nan(lse), canonical_nan(mx.logsumexp(x, axis=-1)),
                       what=f"the fused variant's lse is MLX's logsumexp ({lse_threads(V)} threads), NaN as NaN",
                       kernel="normalized_argmax", case=f"{dtype}-V{V}-fused-lse")
    except AssertionError as exc:  # a real dependency on MLX's kernel: say so
        exc.args = (f"{exc.args[0]}\nEither the fused variant is wrong or MLX {mx.__version__}'s CUDA logsumexp "
                    f"changed (threads, chunks, order or float operations): impl.normalized_argmax's fused variant "
                    f"mirrors MLX 0.32.4's kernel so that its ids equal the two launches' (MLX's lse, then the row "
                    f"kernel); if MLX changed, the fused variant must follow it",)
        raise
    (two_launch,) = row_launch(x, mx.logsumexp(x, axis=-1, keepdims=True)).run(arm)
    gate.equal(ids, two_launch, what="the fused variant's ids are the two launches' (MLX's lse, the row kernel)",
               kernel="normalized_argmax", case=f"{dtype}-V{V}-fused-ids")


# --- bad input to the helpers -------------------------------------------------------------------------------------
# lse_threads, threads_for, row_launch and fused_launch refuse it with TypeError (wrong kind) or ValueError (wrong
# value) naming the argument, as normalized_argmax refuses its own (properties/test_normalized_argmax_props.py,
# test_empty_and_bad_inputs). Before these checks a vocabulary of 0 gave a threadgroup of 0 threads, a float one a
# float thread count, a 1-D x an unpacking error, and an lse of the wrong shape or dtype a launch that reads past it
# or shifts by another lse. Each helper's valid twin runs beside it (NumPy integers are ints), so a check cannot
# refuse what the kernel uses.

X = mx.zeros((3, 100), mx.bfloat16)
LSE = mx.logsumexp(X, axis=-1, keepdims=True)

BAD_HELPER_INPUT = [
    ("threads_for 0", lambda: threads_for(0), ValueError, r"^vocab must"),
    ("threads_for negative", lambda: threads_for(-4), ValueError, r"^vocab must"),
    ("threads_for float", lambda: threads_for(100.0), TypeError, r"^vocab must"),
    ("threads_for bool", lambda: threads_for(True), TypeError, r"^vocab must"),
    ("threads_for str", lambda: threads_for("100"), TypeError, r"^vocab must"),
    ("lse_threads 0", lambda: lse_threads(0), ValueError, r"^vocab must"),
    ("lse_threads float", lambda: lse_threads(2.5), TypeError, r"^vocab must"),
    ("lse_threads bool", lambda: lse_threads(False), TypeError, r"^vocab must"),
    ("row_launch x not an array", lambda: row_launch(np.zeros((3, 100)), LSE), TypeError, r"^x must"),
    ("row_launch x 1-D", lambda: row_launch(X[0], LSE[0]), ValueError, r"^x must"),
    ("row_launch x 3-D", lambda: row_launch(X[None], LSE), ValueError, r"^x must"),
    ("row_launch x empty", lambda: row_launch(X[:0], LSE[:0]), ValueError, r"^x must"),
    ("row_launch x int32", lambda: row_launch(X.astype(mx.int32), LSE), ValueError, r"^x\.dtype must"),
    ("row_launch lse not an array", lambda: row_launch(X, 0.0), TypeError, r"^lse must"),
    ("row_launch lse of other rows", lambda: row_launch(X, LSE[:2]), ValueError, r"^lse must"),
    ("row_launch lse without keepdims", lambda: row_launch(X, LSE[:, 0]), ValueError, r"^lse must"),
    ("row_launch lse float32", lambda: row_launch(X, LSE.astype(mx.float32)), ValueError, r"^lse must"),
    ("fused_launch x 1-D", lambda: fused_launch(X[0]), ValueError, r"^x must"),
    ("fused_launch x a list", lambda: fused_launch([[0.0]]), TypeError, r"^x must"),
    ("fused_launch with_lse an int", lambda: fused_launch(X, with_lse=1), ValueError, r"^with_lse must"),
]


@pytest.mark.parametrize("call, error, name", [c[1:] for c in BAD_HELPER_INPUT],
                         ids=[c[0] for c in BAD_HELPER_INPUT])
def test_bad_helper_input_is_refused_by_name(call, error, name):
    with pytest.raises(error, match=name):  # the message begins with the name
        call()


def test_helpers_valid_twins_still_work():
    for vocab in (1, 100, 4096, 151936):
        assert threads_for(np.int64(vocab)) == threads_for(vocab) and type(threads_for(np.int64(vocab))) is int
        assert lse_threads(np.int32(vocab)) == lse_threads(vocab)
    assert threads_for(1) == 32 and threads_for(151936) == lse_threads(151936) == MAX_THREADS
    launch = row_launch(X, LSE)
    assert launch.grid == (threads_for(100) * 3, 1, 1) and launch.output_shapes == ((3,),)
    assert len(fused_launch(X, with_lse=True).output_dtypes) == 2 and len(fused_launch(X).output_dtypes) == 1
    assert fused_launch(X).threadgroup == (lse_threads(100), 1, 1)


def test_threads_for_is_the_chunks_in_whole_simd_groups():
    """A row's threads: the fewest whole 32-lane SIMD groups holding one thread per ``CHUNK`` columns, at most
    ``MAX_THREADS`` (a longer row takes more rounds)."""
    for vocab in [*range(1, 600), 4 * 32 * 7 + 1, 4096, 4097, 4 * MAX_THREADS, 4 * MAX_THREADS + 1, 151936]:
        chunks = -(-vocab // CHUNK)
        threads = threads_for(vocab)
        assert threads % 32 == 0 and 32 <= threads <= MAX_THREADS, (vocab, threads)
        assert threads >= chunks or threads == MAX_THREADS, (vocab, threads)
        assert threads - 32 < chunks, (vocab, threads)  # not a SIMD group more than the chunks fill


@pytest.mark.parametrize("name", ["metal", "cuda"])
def test_a_compiled_arm_runs_its_kernel_not_the_graph(monkeypatch, name):
    """The dispatch (``_compiled``) by the arm's name: every arm but "graph" runs the kernel launch, whatever this
    machine has (the launch here is a stand-in recording the arm; ``_compiled``'s cache is bypassed)."""
    import impl.normalized_argmax as module

    asked = []

    def kernel(logits, arm):
        asked.append(arm)
        return mx.zeros(logits.shape[:-1], mx.uint32)

    monkeypatch.setattr(module, "_kernel_argmax", kernel)
    monkeypatch.setattr(module, "_graph_argmax", lambda logits: pytest.fail(f"arm {name} ran the graph arm"))
    module._compiled.__wrapped__(name)(mx.zeros((2, 100), mx.float32))
    assert asked == [name]
