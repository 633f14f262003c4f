"""Normalized argmax: greedy token ids from dtype-rounded log-probabilities.

Contract (the seed's ``normalizedArgmax``, mlx-bun 0.5.0 ``normalized-argmax.ts``)::

    normalized_argmax(logits, arm=None) -> uint32 [*logits.shape[:-1]]

* ``logits`` [..., V], float32 / float16 / bfloat16 (T). Per row the answer is
  the argmax of ``T(logit - lse)`` with ``lse = mx.logsumexp(row)`` (MLX's own,
  in T): the same rounded scores as ``argmax(logits - logsumexp(logits))``,
  without writing the V-wide normalized array.
* Ties: the lowest token id wins, whether the tie is planted or made by
  rounding the normalized scores to T, inside one 1024-wide tile or across tiles.
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

Algorithm (all arms): partial pass over tiles of 1024 columns, 128 threads per
tile (4 SIMD groups reduce score/index pairs with shuffles, then threadgroup
memory), writing per-tile (best score, best id); a finish pass reduces the
tiles of a row the same way. ``better(x, i, y, j) = x > y || (x == y && i < j)``.

Arms: ``metal`` / ``cuda`` compile the two bodies below (one source each, the
seed's, with ``inline`` spelled ``METAL_FUNC`` so the header also serves CUDA);
``graph`` is the same tiled partial + finish in MLX ops (per-tile max with
first-occurrence argmax, then the first tile holding the row's max), which
runs on the CPU too.

Gates: ``parity/test_normalized_argmax.py`` holds every arm bit-exact
(``gate.equal``) to native ``mx.argmax(logits - mx.logsumexp(...))`` on rows
with no NaN score, and to ``reference.sampling.normalized_argmax_ref`` with
MLX's lse on every row; ``properties/test_normalized_argmax_props.py`` holds
the same over Hypothesis-drawn batches (ties, NaN, infinities, tile edges).
The CUDA arm's record on an NVIDIA H200: ``reports/runs/2026-11-29-h200-cuda/``
(native argmax on CUDA lets NaN win exactly as on the CPU).
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from impl.arms import resolve_arm
from impl.kernels import KernelSpec, Launch

__all__ = ["ELIGIBLE_DTYPES", "THREADS", "TILE", "normalized_argmax", "normalized_argmax_native"]

TILE = 1024  # columns per partial threadgroup
THREADS = 128  # threads per threadgroup: 4 SIMD groups of 32
ELIGIBLE_DTYPES = (mx.float32, mx.float16, mx.bfloat16)

HEADER = """
METAL_FUNC bool better(float x, uint xi, float y, uint yi) {
  return x > y || (x == y && xi < yi);
}"""

# Four simdgroups reduce score/index pairs. Lowest token ID wins every tie.
# The caller finishes the simd==0 block by writing its output from lane zero.
REDUCTION = """
  for (uint distance = 16; distance > 0; distance >>= 1) {
    float other = simd_shuffle_down(best, distance);
    uint oi = simd_shuffle_down(bestId, distance);
    if (lane + distance < 32 && better(other, oi, best, bestId)) {
      best = other; bestId = oi;
    }
  }
  threadgroup float scores[4];
  threadgroup uint ids[4];
  if (lane == 0) { scores[simd] = best; ids[simd] = bestId; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd == 0) {
    best = lane < 4 ? scores[lane] : -INFINITY;
    bestId = lane < 4 ? ids[lane] : 0xffffffffu;
    for (uint distance = 2; distance > 0; distance >>= 1) {
      float other = simd_shuffle_down(best, distance);
      uint oi = simd_shuffle_down(bestId, distance);
      if (lane + distance < 4 && better(other, oi, best, bestId)) {
        best = other; bestId = oi;
      }
    }
"""

PARTIAL_SOURCE = """
  const uint tid = thread_position_in_threadgroup.x;
  const uint lane = tid % 32, simd = tid / 32;
  const uint row = threadgroup_position_in_grid.y;
  const uint tile = threadgroup_position_in_grid.x;
  float best = -INFINITY;
  uint bestId = 0xffffffffu;
  for (uint i = tile * 1024 + tid; i < min(uint(V), (tile + 1) * 1024); i += 128) {
    float value = float(T(logits[row * V + i] - lse[row]));
    // A nonfinite logsumexp produces only NaN/-inf normalized scores.
    // Native argmax selects token zero for this degenerate row.
    value = isnan(value) ? -INFINITY : value;
    if (better(value, i, best, bestId)) { best = value; bestId = i; }
  }
  """ + REDUCTION + """
    if (lane == 0) { values[row * P + tile] = best; indices[row * P + tile] = bestId; }
  }
"""

FINISH_SOURCE = """
  const uint tid = thread_position_in_threadgroup.x;
  const uint lane = tid % 32, simd = tid / 32;
  const uint row = threadgroup_position_in_grid.y;
  float best = -INFINITY;
  uint bestId = 0xffffffffu;
  for (uint i = tid; i < P; i += 128) {
    float value = values[row * P + i];
    uint id = indices[row * P + i];
    if (better(value, id, best, bestId)) { best = value; bestId = id; }
  }
  """ + REDUCTION + """
    if (lane == 0) out[row] = bestId;
  }
"""

PARTIAL = KernelSpec("normalized_argmax_partial", ("logits", "lse"), ("values", "indices"), PARTIAL_SOURCE,
                     header=HEADER)
FINISH = KernelSpec("normalized_argmax_finish", ("values", "indices"), ("out",), FINISH_SOURCE, header=HEADER)


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


def _rows(logits: mx.array) -> tuple[mx.array, mx.array]:
    """Logits as [rows, V] and MLX's lse [rows, 1] in the logits' dtype."""
    x = logits.reshape(-1, logits.shape[-1])
    return x, mx.logsumexp(x, axis=-1, keepdims=True)


def partial_launch(x: mx.array, lse: mx.array) -> Launch:
    rows, vocab = x.shape
    tiles = -(-vocab // TILE)
    return Launch(PARTIAL, (x, lse), (("V", vocab), ("P", tiles), ("T", x.dtype)),
                  grid=(tiles * THREADS, rows, 1), threadgroup=(THREADS, 1, 1),
                  output_shapes=((rows, tiles), (rows, tiles)), output_dtypes=(mx.float32, mx.uint32))


def finish_launch(values: mx.array, indices: mx.array) -> Launch:
    rows, tiles = values.shape
    return Launch(FINISH, (values, indices), (("P", tiles),), grid=(THREADS, rows, 1), threadgroup=(THREADS, 1, 1),
                  output_shapes=((rows,),), output_dtypes=(mx.uint32,))


def _kernel_argmax(logits: mx.array, arm: str) -> mx.array:
    x, lse = _rows(logits)
    values, indices = partial_launch(x, lse).run(arm)
    (out,) = finish_launch(values, indices).run(arm)
    return out.reshape(logits.shape[:-1])


def _graph_argmax(logits: mx.array) -> mx.array:
    """The kernels' partial + finish in MLX ops.

    Partial: ``T(x - lse)`` (MLX's subtraction in T rounds exactly as the
    kernel's ``T(...)``), widened to float32, NaN -> -inf, padded with -inf to
    whole tiles; per tile the max and its FIRST index (the kernel's ``better``
    keeps the lowest id on ties; a pad never wins because it follows every
    real column of its tile). Finish: the first tile holding the row's max,
    i.e. the lowest id among equal bests.
    """
    x, lse = _rows(logits)
    rows, vocab = x.shape
    tiles = -(-vocab // TILE)
    scores = (x - lse).astype(mx.float32)
    scores = mx.where(mx.isnan(scores), -mx.inf, scores)
    if tiles * TILE != vocab:
        scores = mx.pad(scores, [(0, 0), (0, tiles * TILE - vocab)], constant_values=-mx.inf)
    scores = scores.reshape(rows, tiles, TILE)
    tile_best = scores.max(axis=-1)
    tile_ids = mx.argmax(scores, axis=-1).astype(mx.uint32) + mx.arange(tiles, dtype=mx.uint32) * TILE
    winner = mx.argmax(tile_best, axis=-1, keepdims=True)
    out = mx.take_along_axis(tile_ids, winner, axis=-1)
    return out.reshape(logits.shape[:-1])
