"""Normalized argmax: greedy token ids from dtype-rounded log-probabilities.

Contract (the seed's ``normalizedArgmax``, mlx-bun 0.5.0 ``normalized-argmax.ts``)::

    normalized_argmax(logits, arm=None) -> uint32 [*logits.shape[:-1]]

* ``logits`` [..., V], float32 / float16 / bfloat16 (T). Per row the answer is
  the argmax of ``T(logit - lse)`` with ``lse = mx.logsumexp(row)`` (MLX's own,
  in T): the same rounded scores as ``argmax(logits - logsumexp(logits))``,
  without writing the V-wide normalized array.
* Ties: the lowest token id wins, whether the tie is planted or made by
  rounding the normalized scores to T, inside one thread's columns or across
  threads.
* NaN scores count as ``-inf``. A row with no finite score (a NaN or ``+inf``
  logit makes lse non-finite, an all ``-inf`` row too) returns 0.
  MLX's native argmax differs there: NaN beats every number, so
  ``argmax(logits - logsumexp)`` returns the first NaN score's index (e.g. the
  first ``+inf`` logit). On rows without a NaN score the two agree exactly.
* Integer dtypes keep the native ops (``argmax(logits - logsumexp(logits))``)
  and their semantics. An empty vocabulary axis (V = 0: no id to return) is a
  ValueError naming logits, bool and complex logits a TypeError (no order to
  take an argmax in), both before any op runs; zero rows with V >= 1 give an
  empty uint32 array of the batch's shape. ``normalized_argmax_native`` checks
  the same.
* Eligible float inputs run a fixed-shape ``mx.compile`` of the arm's graph
  (as the seed compiles with shapeless=false): a new shape recompiles.
* Any size is eligible, the smallest too: logits of fewer than 8 elements
  ([1, 5], [2, 3], [1, 1], ...; and the row kernel's ``lse`` below 8 rows)
  are what MLX passes to a Metal kernel in the ``constant`` address space
  instead of ``device`` (``max_constant_array_size``), and the row kernel
  reads such a row element by element (Loads, below). Same ids.

Algorithm (all arms): MLX's ``logsumexp`` (one launch; CUDA's fused variant
computes it in the same kernel, below), then ONE threadgroup per row reads
the row once and writes its id (one launch; the seed's partial +
finish pair cost a launch more, and every case is launch-bound on an H200:
0.02-0.05 ms for 0.3-19 MB). Chunk ``k`` is columns ``[4k, 4k + 4)``; thread
``t`` of ``threads_for(V)`` takes chunks ``t, t + threads, ...`` in ascending
order, ``UNROLL`` of them per round so their loads are in flight together.

* The scan looks at raw logits only. Rounding ``logit - lse`` to T is monotone
  in the logit, so a thread's best score is its largest logit's, and the row's
  best score ``S`` is the largest of the threads' (SIMD max, then one value
  per SIMD group through threadgroup memory). A thread keeps its largest logit
  ``top`` (a strict ``>``: NaN never compares greater, -inf never beats the
  start value -inf), that logit's first id, and ``before``, the largest logit
  of the thread before that id (the ``top`` a new maximum displaces). A thread
  whose ``top`` scores ``S`` answers its first id, unless ``before`` scores
  ``S`` too: then an earlier id of the thread rounds to ``S`` as well (a tie
  made by rounding), and the thread re-reads its chunks before that id for the
  first one. Every other thread answers nothing; the threadgroup takes the
  lowest id (SIMD min, then threadgroup memory). A row whose best score is not
  above -inf (every score NaN or -inf: a non-finite lse) writes 0.
* Why raw logits: a scan that rounds every column's score (a float32
  subtraction, a conversion to T and back) with 8 chunks per thread in
  flight takes 47 registers: one 1024-thread block per SM. This one
  takes 32 at ``UNROLL`` = 4 (``impl/kernels/test_cuda_compile.py`` checks it
  with ptxas), so two blocks share an SM and the calls of a round, which MLX's
  graph may run side by side, overlap. On the H200 at 64 x 151936 bf16,
  interleaved in one process: as bare compiled calls 41.5 -> 35.8 us per call
  in eval8, 1.53x -> 1.78x the native ops; through the public wrapper (two
  processes) 51.6 / 53.0 -> 48.1 / 47.8 us, 1.37x / 1.38x -> 1.47x / 1.53x.
  Pipelined8, eval1 and pipelined1 within noise: there the host's share of a
  call decides. 8 chunks per thread without the rounding (54 registers)
  measured as the rounding scan.
* The fused variant (CUDA, ``FUSED``; the cuda arm's call): one launch
  instead of two. Its scan computes the row's lse itself, as MLX's own CUDA
  logsumexp does, bit for bit: one threadgroup of ``lse_threads(V)`` threads
  (MLX's ``MLX_SWITCH_BLOCK_DIM`` of ``ceil(V / 4)``), chunk ``r * THREADS + t``
  of 4 columns in round ``r``, per thread an online max and normalizer with
  ``__expf`` (``normalizer * __expf(prevmax - max)``, then each column's
  ``__expf(x - max)`` added in order), cooperative groups' butterflies (xor
  16 .. 1) per warp, then across warps through threadgroup memory, and
  ``T(isinf(max) ? max : logf(normalizer) + max)``; it keeps ``top``,
  its first id and ``before`` as the row kernel's scan does, and ends with
  the same candidate phase
  (``CANDIDATES``). ``mx.logsumexp`` on CUDA is MLX's kernel, so the shift is
  the lse the contract names. The mirror is MLX 0.32.4's kernel: should MLX
  change it, ``test_fused_variant_shifts_by_mlx_logsumexp`` fails (the lse of
  ``FUSED_LSE``, the same source with the lse stored as a second output,
  against ``mx.logsumexp``, bit for bit; and the ids of ``FUSED``, the call's
  instantiation without that store, against ``FUSED_LSE``'s and the two
  launches'). The call's kernel does not store the lse: an output costs the
  H200's host ~1.5-3 us per call (35.3 against 37.8 us eval8 with the store).
  On the H200 (two processes, bare compiled calls): 41.4 / 35.7 us eval8
  against the two launches' 46.3 / 39.9, 1.78x / 1.88x the native ops
  against 1.59x / 1.68x; the other protocols within noise. A form that
  scanned the whole row again (from L2) instead of the candidate phase, 48
  registers, was no faster than two launches (45.1 / 24.4 against 42.7 /
  23.0 us eval8 / pipelined8). Metal keeps
  two launches: its logsumexp runs another order, and no Apple GPU was at
  hand to mirror it.
* The score is ``float(T(logit - lse))`` with the difference taken in float32:
  for bf16 (8-bit significand) and f16 (11) a float32 difference of two T
  values rounded to T equals the exactly rounded T difference native
  computes (24 >= 2p + 2 bits: double rounding is innocuous, the argument
  ``reference/sampling.py`` makes for float64); f32 is unchanged.
  ``parity/test_normalized_argmax.py::test_float32_difference_rounds_like_the_dtype``
  checks it on MLX's own subtraction.
* Loads: a chunk is one 4-lane vector (``metal::vec<T, 4>``: 8 bytes for
  f16/bf16, 16 for f32; a warp's load covers 256 or 512 contiguous bytes)
  where the row allows it: V a multiple of 4 and a row start aligned to the
  vector (``vector_aligned`` looks at the address on CUDA, where a
  row-contiguous view, e.g. ``flat[3:3 + V]``, may start anywhere and a
  misaligned vector load faults; the Metal arm answers false and reads
  elements, since nothing here could check a pointer-to-integer cast on an
  Apple GPU). Otherwise the same chunks are read element by element, bounded
  by V. Logits of fewer than 8 elements reach a Metal kernel in the constant
  address space, of which Metal makes no device pointer (so no vector
  pointer), not even in a cast on a path never taken: ``load_chunk`` has a
  constant-space overload that reads elements (CUDA has no address spaces:
  one overload there, unchanged).
* Threadgroup size: ``threads_for(V)`` = the chunks rounded up to whole SIMD
  groups, at most ``MAX_THREADS`` = 1024 (a decode batch, B <= 132 rows on an
  H200's 132 SMs, puts one row on an SM, so a row's threadgroup should be
  wide). 1024 threads x ``UNROLL`` chunks = 32 KiB (bf16) in flight per block,
  64 KiB with two blocks on an SM.
* Grid: rows along x (CUDA's grid y stops at 65535 blocks).

Arms: ``metal`` compiles ``ROW_SOURCE`` with ``HEADER``, after MLX's
``logsumexp``; ``cuda`` compiles ``FUSED_SOURCE`` (its prologue and candidate
phase are ``ROW_SOURCE``'s; nvcc in CI compiles ``ROW_SOURCE`` for CUDA too,
and the gates run it on the H200 beside the fused call); ``graph`` is the row
kernel's algorithm in MLX ops: the logits (NaN as -inf)
padded with -inf to whole rounds, reshaped to [rows, threads, thread's columns
in scan order]; per thread ``top``, its first position and ``before``; the best
score; the candidates' ids, with the earliest column rounding to the best
score where ``before`` does; the lowest id, 0 where no score is above -inf. It
runs on the CPU too.

Gates: ``parity/test_normalized_argmax.py`` holds every arm bit-exact
(``gate.equal``) to native ``mx.argmax(logits - mx.logsumexp(...))`` on rows
with no NaN score, and to ``reference.sampling.normalized_argmax_ref`` with
MLX's lse on every row (vocabularies on both load paths, ties inside a chunk,
across threads and at the round edge, rounding ties across threads and inside
one thread, a maximum in the last column, a view that starts off the vector
alignment); ``properties/test_normalized_argmax_props.py`` holds the same over
Hypothesis-drawn batches (ties, NaN, infinities, edges);
``test_fused_variant_shifts_by_mlx_logsumexp`` (CUDA) holds the fused
variant's lse bit-exact to ``mx.logsumexp`` and its ids equal to the two
launches'; ``parity/test_small_inputs.py`` holds every arm to the same two
references at logits of fewer than 8 elements (Metal's constant space). The
CUDA record on an NVIDIA H200: ``records/h200-cuda/`` (native
argmax on CUDA lets NaN win exactly as on the CPU).
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from impl.arms import resolve_arm
from impl.checks import check_choice, check_int
from impl.kernels import KernelSpec, Launch, kernel_text

__all__ = ["CHUNK", "ELIGIBLE_DTYPES", "FUSED", "FUSED_LSE", "MAX_THREADS", "UNROLL", "fused_launch", "lse_threads",
           "normalized_argmax", "normalized_argmax_native", "row_launch", "threads_for"]

CHUNK = 4  # columns per chunk: one 4-lane vector load
MAX_THREADS = 1024  # threads per row's threadgroup (module docstring: a row on an SM, bytes in flight)
UNROLL = 4  # chunks per thread per round, loaded before any is compared (8 would take 54 registers)
NONE = 0xFFFFFFFF  # the id of "no score above -inf yet"
ELIGIBLE_DTYPES = (mx.float32, mx.float16, mx.bfloat16)

HEADER = kernel_text(__file__, "normalized_argmax.h")

# The row kernel's body (``normalized_argmax.metal``), whose SCAN line the scan fills: the row kernel's
# (``normalized_argmax_row_scan.metal``) or the fused variant's (below). The two share the rest.
BODY = kernel_text(__file__, "normalized_argmax.metal")


def _with_scan(scan: str) -> str:
    """The body with its scan filled in."""
    assert BODY.count("SCAN\n") == 1
    return BODY.replace("SCAN\n", scan)


# The row kernel's scan: each thread's top, topId and before. From them and the shift the body's rest finds the
# row's id (module docstring, Algorithm).
ROW_SOURCE = _with_scan(kernel_text(__file__, "normalized_argmax_row_scan.metal"))

ROW = KernelSpec("normalized_argmax_row", ("logits", "lse"), ("out",), ROW_SOURCE, header=HEADER)

# The fused variant's scan (CUDA): MLX's own CUDA logsumexp of the row, the same float operations in the same order
# (module docstring, "The fused variant"), keeping each thread's top, topId and before as the row kernel's scan does.
# -FLT_MAX is MLX's Limits<float>::finite_min (NVRTC has no <cfloat>).
FUSED_SCAN = kernel_text(__file__, "normalized_argmax_fused_scan.metal")

FUSED_SOURCE = _with_scan(FUSED_SCAN)

# CUDA only: its lse is MLX's CUDA logsumexp (Metal's runs another order) and it uses CUDA's intrinsics. Two
# instantiations of the one source, which differ only in the store of the lse: ``FUSED`` (the call's: ids only; an
# output costs MLX's host ~1.5-3 us per call on the H200) and ``FUSED_LSE`` (ids and the lse it shifted by, as a
# second output: what the gate checks bit for bit against ``mx.logsumexp``; the gate also checks that both give the
# same ids).
FUSED = KernelSpec("normalized_argmax_fused", ("logits",), ("out",), FUSED_SOURCE.replace("STORE_LSE\n", ""),
                   header=HEADER, arms=("cuda",))
FUSED_LSE = KernelSpec("normalized_argmax_fused_lse", ("logits",), ("out", "lse"),
                       FUSED_SOURCE.replace("STORE_LSE", "if (tid == 0) lse[row] = rounded;"), header=HEADER,
                       arms=("cuda",))


def lse_threads(vocab: int) -> int:
    """Threads of MLX's CUDA logsumexp for a row of ``vocab`` (its ``MLX_SWITCH_BLOCK_DIM`` of ``ceil(V / 4)``):
    the chunks' count rounded up to a power of two from 32 to 512, else 1024. The fused variant runs as many, so
    each thread holds the columns MLX's does, in the same order."""
    chunks = -(-check_int("vocab", vocab, minimum=1) // CHUNK)
    return next((t for t in (32, 64, 128, 256, 512) if chunks <= t), MAX_THREADS)


def threads_for(vocab: int) -> int:
    """Threads of a row's threadgroup: its chunks in whole SIMD groups, at most ``MAX_THREADS``."""
    chunks = -(-check_int("vocab", vocab, minimum=1) // CHUNK)
    return min(MAX_THREADS, 32 * -(-chunks // 32))


def _check_logits(logits) -> None:
    """``logits``: an mx.array [..., V] of a real dtype (floating or integer) with V >= 1."""
    if not isinstance(logits, mx.array):
        raise TypeError(f"logits must be an mx.array, got {type(logits).__name__}")
    if logits.ndim == 0:
        raise ValueError("logits must have a vocabulary axis, got a 0-d array")
    if logits.shape[-1] == 0:
        raise ValueError(f"logits must have a non-empty vocabulary axis, got shape {list(logits.shape)}")
    if logits.dtype == mx.bool_ or mx.issubdtype(logits.dtype, mx.complexfloating):
        raise TypeError(f"logits must be a real floating or integer array, got {logits.dtype}")


def normalized_argmax_native(logits: mx.array) -> mx.array:
    """MLX's own ``argmax(logits - logsumexp(logits))`` over the last axis (uint32), on the inputs
    ``normalized_argmax`` takes (zero rows: an empty result)."""
    _check_logits(logits)
    if logits.size == 0:
        return mx.zeros(logits.shape[:-1], dtype=mx.uint32)
    return mx.argmax(logits - mx.logsumexp(logits, axis=-1, keepdims=True), axis=-1)


def normalized_argmax(logits: mx.array, arm: str | None = None) -> mx.array:
    """Greedy ids of ``logits`` [..., V] as uint32 [...]: see the module docstring."""
    _check_logits(logits)
    arm = resolve_arm(arm)
    if logits.size == 0 or logits.dtype not in ELIGIBLE_DTYPES:
        return normalized_argmax_native(logits)
    return _compiled(arm)(logits)


@lru_cache(maxsize=None)
def _compiled(arm: str):
    body = _graph_argmax if arm == "graph" else (lambda logits: _kernel_argmax(logits, arm))
    return mx.compile(body)  # fixed shapes (shapeless=False): one trace per shape and dtype


def _matrix(logits: mx.array) -> mx.array:
    """Logits as [rows, V]."""
    # (A [B, V] input is used as is: a reshape to its own shape would still be a node of the compiled graph,
    # replayed and evaluated every call.)
    return logits if logits.ndim == 2 else logits.reshape(-1, logits.shape[-1])


def _lse(x: mx.array) -> mx.array:
    """MLX's lse of ``x`` [rows, V] as [rows, 1], in its dtype."""
    return mx.logsumexp(x, axis=-1, keepdims=True)


def _check_rows(x) -> tuple[int, int]:
    """(rows, V) of a kernel launch's ``x``: an [rows, V] array of an eligible dtype, not empty (``normalized_argmax``
    sends only such arrays to the kernels: the kernel's T is x's dtype, and an empty x would be an empty grid)."""
    if not isinstance(x, mx.array):
        raise TypeError(f"x must be an mx.array, got {type(x).__name__}")
    if x.ndim != 2 or x.size == 0:
        raise ValueError(f"x must be a non-empty [rows, V] array, got shape {list(x.shape)}")
    check_choice("x.dtype", x.dtype, ELIGIBLE_DTYPES)
    return x.shape


def row_launch(x: mx.array, lse: mx.array) -> Launch:
    """The one kernel launch: a threadgroup per row of ``x`` [rows, V], rows along the grid's x; ``lse`` [rows, 1]
    in x's dtype is each row's shift (MLX's logsumexp, ``keepdims=True``)."""
    rows, vocab = _check_rows(x)
    if not isinstance(lse, mx.array):
        raise TypeError(f"lse must be an mx.array, got {type(lse).__name__}")
    if lse.shape != (rows, 1) or lse.dtype != x.dtype:  # the contract's shift: MLX's lse of each row, in T
        raise ValueError(f"lse must be x's logsumexp: [{rows}, 1] {x.dtype}, got {list(lse.shape)} {lse.dtype}")
    threads = threads_for(vocab)
    return Launch(ROW, (x, lse), (("V", vocab), ("THREADS", threads), ("UNROLL", UNROLL), ("T", x.dtype)),
                  grid=(threads * rows, 1, 1), threadgroup=(threads, 1, 1),
                  output_shapes=((rows,),), output_dtypes=(mx.uint32,))


def fused_launch(x: mx.array, *, with_lse: bool = False) -> Launch:
    """The fused variant's one launch (CUDA): a threadgroup of ``lse_threads(V)`` per row of ``x`` [rows, V];
    outputs the ids (uint32 [rows]), and with ``with_lse`` (``FUSED_LSE``, the gate's instantiation) the lse it
    shifted by (T [rows], MLX's logsumexp bit for bit) as well."""
    rows, vocab = _check_rows(x)
    with_lse = check_choice("with_lse", with_lse, (False, True))
    threads = lse_threads(vocab)
    spec, outputs = (FUSED_LSE, ((rows,), (rows,))) if with_lse else (FUSED, ((rows,),))
    return Launch(spec, (x,), (("V", vocab), ("THREADS", threads), ("UNROLL", UNROLL), ("T", x.dtype)),
                  grid=(threads * rows, 1, 1), threadgroup=(threads, 1, 1),
                  output_shapes=outputs, output_dtypes=(mx.uint32, x.dtype)[:len(outputs)])


def _kernel_argmax(logits: mx.array, arm: str) -> mx.array:
    x = _matrix(logits)
    if arm in FUSED.arms:
        (out,) = fused_launch(x).run(arm)
    else:
        (out,) = row_launch(x, _lse(x)).run(arm)
    return out if logits.ndim == 2 else out.reshape(logits.shape[:-1])


def _graph_argmax(logits: mx.array) -> mx.array:
    """The kernel's row pass in MLX ops (module docstring, Algorithm).

    The logits, NaN as -inf (the kernel's strict ``>`` never takes a NaN),
    padded with -inf to whole rounds of ``threads`` chunks. Column
    ``4 * (r * threads + t) + e`` is element ``e`` of thread ``t``'s round
    ``r``, so [rows, rounds, threads, 4] moved to [rows, threads, rounds * 4]
    lists each thread's columns in its scan order: ``top`` is the max, ``pos``
    its FIRST position, ``before`` the max of the columns before ``pos``. A
    score is ``T(v - lse)``, MLX's subtraction in T (the kernel's float32
    difference rounded to T is the same value), widened to float32. The
    candidates are the threads whose ``top`` scores the best score; each
    answers ``pos``, or, where ``before`` scores the best score too, its first
    column that does. The lowest candidate id wins; a row whose best score is
    not above -inf returns 0.
    """
    x = _matrix(logits)
    lse = _lse(x)
    rows, vocab = x.shape
    threads = threads_for(vocab)
    rounds = -(-vocab // (CHUNK * threads))
    shift = lse[:, :, None]  # [rows, 1, 1]

    def score(v: mx.array) -> mx.array:
        return (v - shift).astype(mx.float32)

    raw = mx.where(mx.isnan(x), -mx.inf, x)
    raw = mx.pad(raw, [(0, 0), (0, rounds * threads * CHUNK - vocab)], constant_values=-mx.inf)
    scan = raw.reshape(rows, rounds, threads, CHUNK).transpose(0, 2, 1, 3).reshape(rows, threads, rounds * CHUNK)
    column = mx.arange(rounds * CHUNK)
    top = scan.max(axis=-1, keepdims=True)
    pos = mx.argmax(scan, axis=-1, keepdims=True)
    before = mx.where(column < pos, scan, -mx.inf).max(axis=-1, keepdims=True)
    mine = score(top)
    mine = mx.where(mine > -mx.inf, mine, -mx.inf)  # NaN (a non-finite lse) counts as -inf
    best = mine.max(axis=1, keepdims=True)
    rescan = score(before) == best
    earlier = (score(scan) == best) & (column < pos)
    first = mx.where(rescan & earlier.any(axis=-1, keepdims=True),
                     mx.argmax(earlier.astype(mx.uint8), axis=-1, keepdims=True), pos).astype(mx.uint32)
    ids = CHUNK * ((first // CHUNK) * threads + mx.arange(threads, dtype=mx.uint32)[:, None]) + first % CHUNK
    ids = mx.where((best > -mx.inf) & (mine == best), ids, NONE)
    winner = ids.min(axis=(1, 2))
    out = mx.where(winner == NONE, 0, winner)
    return out.reshape(logits.shape[:-1])
