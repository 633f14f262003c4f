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
* Integer dtypes and empty inputs keep the native ops
  (``argmax(logits - logsumexp(logits))``) and their semantics (MLX 0.32.4's
  logsumexp refuses an empty array with ValueError).
* Eligible float inputs run a fixed-shape ``mx.compile`` of the arm's graph
  (as the seed compiles with shapeless=false): a new shape recompiles.

Algorithm (all arms): MLX's ``logsumexp`` (one launch), then ONE threadgroup
per row reads the row once and writes its id (one launch; the seed's partial +
finish pair cost a launch more, and every case is launch-bound on an H200:
0.02-0.05 ms for 0.3-19 MB). Chunk ``k`` is columns ``[4k, 4k + 4)``; thread
``t`` of ``threads_for(V)`` takes chunks ``t, t + threads, ...`` in ascending
order, ``UNROLL`` of them per round so their loads are in flight together, and
keeps the first column holding its largest score (a strict ``>``: ids ascend
within a thread, so equal scores keep the lower id; NaN never compares
greater, -inf never beats the start value -inf). The threadgroup then reduces
(score, id) pairs with ``better(x, i, y, j) = x > y || (x == y && i < j)``
(SIMD shuffles, then one value per SIMD group through threadgroup memory); a
row where no score beat -inf (every score NaN or -inf) writes 0.

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
  by V.
* Threadgroup size: ``threads_for(V)`` = the chunks rounded up to whole SIMD
  groups, at most ``MAX_THREADS`` = 1024. A decode batch (B <= 132 rows on an
  H200's 132 SMs) puts one threadgroup on an SM, so one threadgroup must keep
  enough bytes in flight by itself: 1024 threads x ``UNROLL`` = 8 chunks =
  64 KiB (bf16), 128 KiB (f32). Bandwidth x latency is ~4.8 TB/s x ~1 us =
  ~5 MB device-wide: ~36 KiB per SM over 132 SMs, ~72 KiB when 64 rows hold
  64 SMs. (Loading more per thread would need more registers: 8 chunks
  already take ~48.) A 1024-thread block must fit 64 registers per
  thread (65536 per SM; MLX gives NVRTC no launch bounds):
  ``impl/kernels/test_cuda_compile.py`` checks that with ptxas.
* Grid: rows along x (CUDA's grid y stops at 65535 blocks).

Arms: ``metal`` / ``cuda`` compile ``ROW_SOURCE`` with ``HEADER`` (one source
each); ``graph`` is the same partition in MLX ops: the scores padded with -inf
to whole rounds, reshaped to [rows, threads, thread's columns in scan order],
per thread the max and its first column, then the lowest id among the threads
holding the row's max, 0 where that max is -inf. It runs on the CPU too.

Gates: ``parity/test_normalized_argmax.py`` holds every arm bit-exact
(``gate.equal``) to native ``mx.argmax(logits - mx.logsumexp(...))`` on rows
with no NaN score, and to ``reference.sampling.normalized_argmax_ref`` with
MLX's lse on every row (vocabularies on both load paths, ties inside a chunk,
across threads and at the round edge, a maximum in the last column, a view
that starts off the vector alignment); ``properties/test_normalized_argmax_props.py``
holds the same over Hypothesis-drawn batches (ties, NaN, infinities, edges).
The seed kernel's CUDA record on an NVIDIA H200:
``reports/runs/2026-11-29-h200-cuda/`` (native argmax on CUDA lets NaN win
exactly as on the CPU).
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from impl.arms import resolve_arm
from impl.kernels import KernelSpec, Launch

__all__ = ["CHUNK", "ELIGIBLE_DTYPES", "MAX_THREADS", "UNROLL", "fused_launch", "lse_threads", "normalized_argmax",
           "normalized_argmax_native", "row_launch", "threads_for"]

CHUNK = 4  # columns per chunk: one 4-lane vector load
MAX_THREADS = 1024  # threads per row's threadgroup (module docstring: bytes in flight, 64 registers)
UNROLL = 8  # chunks per thread per round, loaded before any is compared
NONE = 0xFFFFFFFF  # the id of "no score above -inf yet"
ELIGIBLE_DTYPES = (mx.float32, mx.float16, mx.bfloat16)

HEADER = """
#ifndef DEVICE_MEM
#define DEVICE_MEM device  // Metal's device address space (the CUDA prelude defines it empty)
#endif

METAL_FUNC bool better(float x, uint xi, float y, uint yi) {
  return x > y || (x == y && xi < yi);
}

// Whether a row starting at p may be read as 4-lane vectors (aligned to 4 elements' bytes).
#if defined(__CUDACC__)
template <typename T>
METAL_FUNC bool vector_aligned(const T* p) {
  return reinterpret_cast<unsigned long long>(p) % (4ull * sizeof(T)) == 0ull;
}
#else
template <typename T>
METAL_FUNC bool vector_aligned(const DEVICE_MEM T*) {
  return false;  // no pointer-to-integer cast relied on in Metal: read elements
}
#endif

struct Chunk {
  float v[4];
};

// Columns [4k, 4k + 4) of a row as float; -inf past the row's end V (they never win).
template <typename T>
METAL_FUNC Chunk load_chunk(const DEVICE_MEM T* x, uint k, uint V, bool vectors) {
  Chunk c;
  if (vectors && k < V / 4u) {
    const metal::vec<T, 4> raw = ((const DEVICE_MEM metal::vec<T, 4>*)x)[k];  // one load, by value
    const float4 f = float4(raw);
    c.v[0] = f.x; c.v[1] = f.y; c.v[2] = f.z; c.v[3] = f.w;
  } else {
    for (uint e = 0; e < 4u; ++e) {
      const uint i = 4u * k + e;
      c.v[e] = i < V ? float(x[i]) : -INFINITY;
    }
  }
  return c;
}"""

# The row kernel's body in three pieces: the fused variant (below) shares the first and the last.
ROW_PROLOGUE = """
  const uint tid = thread_position_in_threadgroup.x;
  const uint lane = tid % 32, simd = tid / 32;
  const uint row = threadgroup_position_in_grid.x;
  const auto x = logits + ulong(row) * V;
  const uint chunks = (uint(V) + 3u) / 4u;
  const bool vectors = uint(V) % 4u == 0 && vector_aligned(x);
"""

ROW_SHIFT = """  const float shift = float(lse[row]);
"""

ROW_SCAN = """  float best = -INFINITY;
  uint bestId = 0xffffffffu;
  for (uint first = tid; first < chunks; first += UNROLL * THREADS) {
    Chunk c[UNROLL];
    for (uint u = 0; u < UNROLL; ++u) c[u] = load_chunk<T>(x, first + u * THREADS, V, vectors);
    for (uint u = 0; u < UNROLL; ++u) {
      for (uint e = 0; e < 4u; ++e) {
        const float s = float(T(c[u].v[e] - shift));
        if (s > best) { best = s; bestId = 4u * (first + u * THREADS) + e; }
      }
    }
  }
  for (uint distance = 16; distance > 0; distance >>= 1) {
    float other = simd_shuffle_down(best, distance);
    uint oi = simd_shuffle_down(bestId, distance);
    if (lane + distance < 32 && better(other, oi, best, bestId)) {
      best = other; bestId = oi;
    }
  }
  threadgroup float scores[32];
  threadgroup uint ids[32];
  if (lane == 0) { scores[simd] = best; ids[simd] = bestId; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd == 0) {
    best = lane < THREADS / 32 ? scores[lane] : -INFINITY;
    bestId = lane < THREADS / 32 ? ids[lane] : 0xffffffffu;
    for (uint distance = 16; distance > 0; distance >>= 1) {
      float other = simd_shuffle_down(best, distance);
      uint oi = simd_shuffle_down(bestId, distance);
      if (lane + distance < 32 && better(other, oi, best, bestId)) {
        best = other; bestId = oi;
      }
    }
    if (lane == 0) out[row] = bestId == 0xffffffffu ? 0u : bestId;
  }
"""

ROW_SOURCE = ROW_PROLOGUE + ROW_SHIFT + ROW_SCAN

ROW = KernelSpec("normalized_argmax_row", ("logits", "lse"), ("out",), ROW_SOURCE, header=HEADER)

# Pass 1 of the fused variant (CUDA): the row's lse by MLX's own CUDA logsumexp, the same float operations in the
# same order (module docstring, "Fused lse"), so ``rounded`` is bit for bit what ``mx.logsumexp`` returns there.
# -FLT_MAX is MLX's Limits<float>::finite_min (NVRTC has no <cfloat>).
FUSED_LSE = """  const auto larger = [](float a, float b) { return a < b ? b : a; };  // cooperative_groups::greater
  const uint rounds = (uint(V) + 4u * THREADS - 1u) / (4u * THREADS);
  float maxval = __int_as_float(0xff7fffff), normalizer = 0.0f;
  for (uint r0 = 0; r0 < rounds; r0 += UNROLL) {
    Chunk c[UNROLL];
    for (uint u = 0; u < UNROLL; ++u) c[u] = load_chunk<T>(x, (r0 + u) * THREADS + tid, V, vectors);
    for (uint u = 0; u < UNROLL && r0 + u < rounds; ++u) {
      const float prevmax = maxval;
      maxval = larger(maxval, larger(larger(larger(c[u].v[0], c[u].v[1]), c[u].v[2]), c[u].v[3]));
      normalizer = normalizer * __expf(prevmax - maxval);
      for (uint e = 0; e < 4u; ++e) normalizer = normalizer + __expf(c[u].v[e] - maxval);
    }
  }
  float prevmax = maxval;
  for (int m = 16; m > 0; m >>= 1) maxval = larger(maxval, __shfl_xor_sync(0xffffffffu, maxval, m));
  normalizer = normalizer * __expf(prevmax - maxval);
  for (int m = 16; m > 0; m >>= 1) normalizer = normalizer + __shfl_xor_sync(0xffffffffu, normalizer, m);
  threadgroup float warp_max[32], warp_normalizer[32];
  prevmax = maxval;
  if (lane == 0) warp_max[simd] = maxval;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  maxval = lane < THREADS / 32 ? warp_max[lane] : __int_as_float(0xff7fffff);
  for (int m = 16; m > 0; m >>= 1) maxval = larger(maxval, __shfl_xor_sync(0xffffffffu, maxval, m));
  normalizer = normalizer * __expf(prevmax - maxval);
  if (lane == 0) warp_normalizer[simd] = normalizer;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  normalizer = lane < THREADS / 32 ? warp_normalizer[lane] : 0.0f;
  for (int m = 16; m > 0; m >>= 1) normalizer = normalizer + __shfl_xor_sync(0xffffffffu, normalizer, m);
  const T rounded = T(isinf(maxval) ? maxval : logf(normalizer) + maxval);
  if (tid == 0) lse[row] = rounded;
  const float shift = float(rounded);
"""

FUSED_SOURCE = ROW_PROLOGUE + FUSED_LSE + ROW_SCAN

# CUDA only: its lse is MLX's CUDA logsumexp (Metal's has another order), written with CUDA's intrinsics.
FUSED = KernelSpec("normalized_argmax_fused", ("logits",), ("out", "lse"), FUSED_SOURCE, header=HEADER, arms=("cuda",))


def lse_threads(vocab: int) -> int:
    """Threads of MLX's CUDA logsumexp for a row of ``vocab`` (its ``MLX_SWITCH_BLOCK_DIM`` of ``ceil(V / 4)``):
    the chunks' count rounded up to a power of two from 32 to 512, else 1024. The fused variant runs as many,
    so each thread holds the columns MLX's does, in the same order."""
    chunks = -(-vocab // CHUNK)
    return next((t for t in (32, 64, 128, 256, 512) if chunks <= t), MAX_THREADS)


def threads_for(vocab: int) -> int:
    """Threads of a row's threadgroup: its chunks in whole SIMD groups, at most ``MAX_THREADS``."""
    chunks = -(-vocab // CHUNK)
    return min(MAX_THREADS, 32 * -(-chunks // 32))


def normalized_argmax_native(logits: mx.array) -> mx.array:
    """MLX's own ``argmax(logits - logsumexp(logits))`` over the last axis (uint32)."""
    return mx.argmax(logits - mx.logsumexp(logits, axis=-1, keepdims=True), axis=-1)


def normalized_argmax(logits: mx.array, arm: str | None = None) -> mx.array:
    """Greedy ids of ``logits`` [..., V] as uint32 [...]: see the module docstring."""
    if not isinstance(logits, mx.array):
        raise TypeError(f"logits must be an mx.array, got {type(logits).__name__}")
    if logits.ndim == 0:
        raise ValueError("logits must have a vocabulary axis, got a 0-d array")
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


def row_launch(x: mx.array, lse: mx.array) -> Launch:
    """The one kernel launch: a threadgroup per row of ``x`` [rows, V], rows along the grid's x."""
    rows, vocab = x.shape
    threads = threads_for(vocab)
    return Launch(ROW, (x, lse), (("V", vocab), ("THREADS", threads), ("UNROLL", UNROLL), ("T", x.dtype)),
                  grid=(threads * rows, 1, 1), threadgroup=(threads, 1, 1),
                  output_shapes=((rows,),), output_dtypes=(mx.uint32,))


def fused_launch(x: mx.array) -> Launch:
    """The fused variant's one launch (CUDA): a threadgroup of ``lse_threads(V)`` per row of ``x`` [rows, V];
    outputs the ids (uint32 [rows]) and the lse it shifted by (T [rows], MLX's logsumexp bit for bit)."""
    rows, vocab = x.shape
    threads = lse_threads(vocab)
    return Launch(FUSED, (x,), (("V", vocab), ("THREADS", threads), ("UNROLL", UNROLL), ("T", x.dtype)),
                  grid=(threads * rows, 1, 1), threadgroup=(threads, 1, 1),
                  output_shapes=((rows,), (rows,)), output_dtypes=(mx.uint32, x.dtype))


def _kernel_argmax(logits: mx.array, arm: str) -> mx.array:
    x = _matrix(logits)
    if arm in FUSED.arms:
        out, _ = fused_launch(x).run(arm)
    else:
        (out,) = row_launch(x, _lse(x)).run(arm)
    return out if logits.ndim == 2 else out.reshape(logits.shape[:-1])


def _graph_argmax(logits: mx.array) -> mx.array:
    """The kernel's row pass in MLX ops (module docstring, Algorithm).

    ``T(x - lse)`` is MLX's subtraction in T (the kernel's float32 difference
    rounded to T is the same value), widened to float32; NaN -> -inf (the
    kernel's strict ``>`` never takes a NaN); padded with -inf to whole rounds
    of ``threads`` chunks. Column ``4 * (r * threads + t) + e`` is element
    ``e`` of thread ``t``'s round ``r``, so [rows, rounds, threads, 4] moved to
    [rows, threads, rounds * 4] lists each thread's columns in its scan order:
    the max and its FIRST position are the thread's strict-``>`` result; a
    thread whose max is -inf keeps the start id NONE. Across threads
    (``better``): the lowest id among the threads holding the row's max; a
    row with no score above -inf returns 0.
    """
    x = _matrix(logits)
    lse = _lse(x)
    rows, vocab = x.shape
    threads = threads_for(vocab)
    rounds = -(-vocab // (CHUNK * threads))
    scores = (x - lse).astype(mx.float32)
    scores = mx.where(mx.isnan(scores), -mx.inf, scores)
    scores = mx.pad(scores, [(0, 0), (0, rounds * threads * CHUNK - vocab)], constant_values=-mx.inf)
    scan = scores.reshape(rows, rounds, threads, CHUNK).transpose(0, 2, 1, 3).reshape(rows, threads, rounds * CHUNK)
    thread_best = scan.max(axis=-1)
    pos = mx.argmax(scan, axis=-1).astype(mx.uint32)
    thread_ids = CHUNK * ((pos // CHUNK) * threads + mx.arange(threads, dtype=mx.uint32)) + pos % CHUNK
    thread_ids = mx.where(thread_best > -mx.inf, thread_ids, NONE)
    row_best = thread_best.max(axis=-1, keepdims=True)
    winner = mx.where(thread_best == row_best, thread_ids, NONE).min(axis=-1)
    out = mx.where(winner == NONE, 0, winner)
    return out.reshape(logits.shape[:-1])
