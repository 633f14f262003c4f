"""Multi-query causal flash-decoding: a few query rows (L <= 8) over a long KV cache.

Contract (the seed's ``multiQueryCausalSdpa``, @mlx-bun/inference 1.0.0
``kernels/attention/multi-query.ts``; the speculative-verify shape)::

    multi_query_causal(q, keys, values, *, scale, splits=None, arm=None) -> [1, H, L, D]

* ``q`` [1, H, L, D], 1 <= L <= 8 (``MAX_ROWS``), D a multiple of 8 up to 256
  (the body works in 8x8 fragments; ``qf`` and ``o`` keep D/4 values per
  lane in registers); float32 / float16 / bfloat16 (T). Output in T. Any
  view (a decode step's q is often [1, L, H, D] transposed): the kernel reads
  ``q_strides``, so a call copies nothing and adds no graph node for q.
* ``keys`` / ``values`` [1, KVH, N, D] in T, N >= L: the L query rows are the
  last L positions of the cache. They may be strided views (a slice of a
  larger cache, a transpose): the kernel reads ``k_strides`` / ``v_strides``,
  with 4-wide vector loads when both K and V rows allow them (unit last
  stride, head and row strides multiples of 4, a start 4-element aligned)
  and strided loads otherwise. The start is an address MLX does not expose
  before a launch: the CUDA arm checks it in the kernel (a row-contiguous
  view with an odd offset, ``flat[1:].reshape(...)``, is read by elements
  there); Metal relies on no pointer-to-integer cast, so on the metal arm a
  view must start 4-element aligned, as every slice along heads or tokens
  of a cache does.
* GQA: H = KVH * REP; query head h reads KV head ``h // REP``. The NQ = REP * L
  query vectors of a KV head share one threadgroup (one SIMD group per
  ``tiles_per_simdgroup`` 8-row tiles, at least 4: ``simdgroups``), so NQ <= 64
  (``MAX_VECTORS``); above it a ValueError names q.
* Causal, bottom-right: row (r, i) (head kv * REP + r, query i) sees keys
  ``j <= N - L + i``.
* ``scale``: finite real, folded into q in T (``q * scale`` rounded to T) as the
  seed does; the kernel multiplies as it loads q (a one-element ``scale`` input
  in T), the graph arm with an MLX multiply.
* ``splits``: key splits (threadgroups per KV head), default
  ``default_splits(N, KVH)`` = clamp(min(ceil(N / 256), ceil(256 / KVH)), 1, 128)
  (the seed's ceil(N / 256) until the grid holds ``TARGET_THREADGROUPS``); an
  int in [1, 128] overrides it (split s covers keys [s * per, min(N, (s + 1) *
  per)), per = ceil(N / splits); a split may be empty, or hide all its keys
  from some rows: the merge skips such -inf partials).
* Precision (the seed's design, "not bit-identical to MLX's kernels; gate by
  KL"): the kernel rounds Q * scale, K and V to half and multiplies on the
  simdgroup matrix unit (half in, float accumulate); the probabilities P are
  rounded to half for P . V while the softmax sums stay float32. So whatever T
  is, the result carries half precision, and Q * scale, K and V must stay
  within half's range (|x| < 65504).
* Bad input (L > 8, NQ > 64, D, dtypes, shapes, N < L, splits, scale) raises
  ValueError / TypeError naming the argument, before any launch. On a compiled
  arm the checks run once per argument signature (``impl.recent_calls``: shapes,
  dtypes, scalars with their types): a decode step's later layers go straight
  to the compiled call.

The package: ``launch`` holds the kernels (the algorithm, why it is built so, the launch geometry,
the specs and the launches, over the bodies ``partial.metal`` and ``merge.metal`` beside it),
``graph`` the graph arm (the same algorithm in MLX ops, and its one liberty), and this module the
contract: the checks and the call.

Arms: ``metal`` / ``cuda`` compile the bodies (``launch``), ``graph`` runs MLX ops (``graph``). A
compiled arm's call runs partial and merge as one ``mx.compile``d function per input signature, the
``TRACES_KEPT`` most recent kept (``_compiled_call``: a decode step's layers share N, so the first
traces and the rest replay; built call by call, the primitives cost host time comparable to the
kernels at N = 32k on the H200).

Gates: ``parity/test_multi_query.py`` (error ratio against the float64 oracle
``reference.attention.attention_ref``, with the naive computation in T, or in
float16 for float32 inputs, the kernel's working precision, as baseline; KL
through a fixed LM head against the oracle); ``properties/test_multi_query_props.py``
(Hypothesis: L 1..8, NQ up to 64, D 64/128/256, N across split and block
edges, forced splits with fully masked partials, strided and transposed K/V,
causality, bad input); ``impl/kernels/test_cuda_compile_decode.py`` (nvcc
compiles every instance, one and two stages, both prelude paths; the simdgroup
probe holds the prelude's products, loads (simdgroup_load_x4 too) and
thread_elements() bit-exact on a GPU); ``test_pipelined_partials_match_one_stage`` (CUDA:
two stages and the ring, at 2 and 4 slots, bit-identical to one stage, on views that take the copies and views
that do not); ``test_merge_matches_float64_oracle`` (compiled arms: the merge
alone against ``reference.attention.split_merge_ref`` on partials whose maxima rise, fall, hide
whole slices; float32 within a derived ulp bound, bf16 / f16 within 1 ulp);
``test_query_views_are_read_through_strides`` (q as a transposed decode-step view, a dim-strided view, head and
row slices: bit-identical to its contiguous copy); ``test_parts_layout_is_o_then_m_then_l``.
"""

from __future__ import annotations

import math
from functools import lru_cache, partial

import mlx.core as mx
import numpy as np

from impl.arms import resolve_arm
from impl.checks import check_scale
from impl.kernels import TRACES_KEPT, input_signature
from impl.recent_calls import RecentCalls, array_key, scalar_key

from .graph import _graph
# The kernels' names, re-exported: callers and tests read them here (``impl.multi_query.partial_launch``, ...);
# ``_kernel_call`` reads the launches from this module.
from .launch import (BK, DTYPES, HEADER, MAX_PIPELINED_SIMDGROUPS, MAX_RING_SLOTS, MAX_SPLITS, MERGE, PARTIAL,
                     PARTIAL_RING, RING_SLOTS, SPLIT_KEYS, STATIC_SHARED_BYTES, TARGET_THREADGROUPS,
                     THREADGROUP_BYTES, block_keys, computing_simdgroups, default_splits, merge_launch, pack_parts,
                     partial_launch, parts_shape, pipeline_stages, ring_shared_bytes, ring_slots, simdgroups,
                     tiles_per_simdgroup)

__all__ = [
    "BK",
    "DTYPES",
    "MAX_HEAD_DIM",
    "MAX_ROWS",
    "MAX_SPLITS",
    "MAX_VECTORS",
    "SPLIT_KEYS",
    "block_keys",
    "default_splits",
    "merge_launch",
    "multi_query_causal",
    "partial_launch",
    "pipeline_stages",
    "ring_shared_bytes",
    "ring_slots",
]

MAX_ROWS = 8  # L
MAX_VECTORS = 64  # NQ = REP * L: 8 SIMD groups x 8-row tiles
MAX_HEAD_DIM = 256


# --- validation -------------------------------------------------------------


def _validate(q, keys, values, scale, splits) -> tuple[float, int]:
    """Checks everything a launch depends on; returns (scale, splits)."""
    for name, x in (("q", q), ("keys", keys), ("values", values)):
        if not isinstance(x, mx.array):
            raise TypeError(f"{name} must be an mx.array, got {type(x).__name__}")
        if x.ndim != 4 or x.shape[0] != 1:
            raise ValueError(f"{name} must have shape [1, heads, rows, D], got {list(x.shape)}")
        if x.dtype not in DTYPES:
            raise ValueError(f"{name} must be one of {DTYPES}, got {x.dtype}")
    _, h, L, d = q.shape
    _, kvh, n, dk = keys.shape
    if not 1 <= L <= MAX_ROWS:
        raise ValueError(f"q has L={L} query rows; the kernel takes 1..{MAX_ROWS}")
    if d % 8 or not 8 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"q has head dim D={d}; the kernel needs a multiple of 8 in [8, {MAX_HEAD_DIM}]")
    if keys.dtype != q.dtype or values.dtype != q.dtype:
        raise ValueError(f"q, keys and values must share one dtype, got {q.dtype}, {keys.dtype}, {values.dtype}")
    if dk != d:
        raise ValueError(f"keys have head dim {dk} but q has D={d}")
    if tuple(values.shape) != tuple(keys.shape):
        raise ValueError(f"values must have the keys' shape {list(keys.shape)} (same heads, positions and head dim), "
                         f"got {list(values.shape)}")
    if h < 1:
        raise ValueError(f"q has H={h} heads: it needs at least one")
    if kvh < 1 or h % kvh:
        raise ValueError(f"q has H={h} heads, not a multiple of the keys' KVH={kvh}")
    if (h // kvh) * L > MAX_VECTORS:
        raise ValueError(f"q has {h // kvh} heads per KV head x L={L} rows = {(h // kvh) * L} query vectors per "
                         f"KV head; the kernel's threadgroup holds at most {MAX_VECTORS}")
    if n < L:
        raise ValueError(f"keys hold N={n} positions, fewer than q's L={L} rows (the rows are the last L positions)")
    scale = check_scale(scale)
    if not math.isfinite(_scale_in(scale, q.dtype)):  # q * scale is formed in T: an infinite scale makes NaN
        raise ValueError(f"scale={scale!r} is not finite in q's dtype {q.dtype} (q * scale is formed in it)")
    if splits is None:
        return scale, default_splits(n, kvh)
    if isinstance(splits, bool) or not isinstance(splits, (int, np.integer)):
        raise TypeError(f"splits must be None or an int, got {type(splits).__name__}")
    if not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"splits must be in [1, {MAX_SPLITS}], got {splits}")
    return scale, int(splits)


# --- the call ---------------------------------------------------------------


def multi_query_causal(q: mx.array, keys: mx.array, values: mx.array, *, scale: float, splits: int | None = None,
                       arm: str | None = None) -> mx.array:
    """Causal attention of q's L <= 8 rows (the last L positions) over the cache (module docstring)."""
    # A compiled arm's call whose arguments were validated before goes straight to its compiled call
    # (impl.recent_calls: the checks cost the H200's host about a tenth of the call).
    key, call = _RECENT.lookup(lambda: (resolve_arm(arm), array_key(q), array_key(keys), array_key(values),
                                        scalar_key(scale), scalar_key(splits)))
    if call is None:
        scale, splits = _validate(q, keys, values, scale, splits)
        arm = resolve_arm(arm)
        if arm == "graph":
            return _graph(q * _scale_array(scale, q.dtype), keys, values, splits)
        call = _RECENT.remember(key, _compiled_call(arm, scale, splits, input_signature((q, keys, values))))
    return call(q, keys, values)


_RECENT = RecentCalls(TRACES_KEPT)  # validated (arm, arguments) -> compiled call


@lru_cache(maxsize=64)
def _scale_in(scale: float, dtype: mx.Dtype) -> float:
    """``scale`` rounded to ``dtype`` as ``_scale_array`` holds it (on the CPU stream: no device wait)."""
    return mx.array(scale, dtype=dtype).astype(mx.float32, stream=mx.cpu).item()


def _scale_array(scale: float, dtype: mx.Dtype) -> mx.array:
    """The softmax scale in q's dtype: q * scale is rounded to it (the seed's mulScalar in T; the kernel body
    multiplies as it loads q, the graph arm with an MLX multiply)."""
    return mx.array([scale], dtype=dtype)


@lru_cache(maxsize=TRACES_KEPT)
def _compiled_call(arm: str, scale: float, splits: int, signature: tuple):
    """Partial and merge as one ``mx.compile``d function for the inputs' ``signature``
    (``input_signature``; ``impl.kernels.compile.TRACES_KEPT`` says why one per signature, so few):
    built call by call, the three primitives cost host time comparable to the kernels at N = 32k."""
    return mx.compile(partial(_kernel_call, arm, scale, splits))


def _kernel_call(arm: str, scale: float, splits: int, q: mx.array, keys: mx.array, values: mx.array) -> mx.array:
    """The compiled arm's call, as ``_compiled_call`` traces it: two kernels and nothing else per call. q goes to
    the partial as given (its body reads ``q_strides``) and the partial's one output to the merge: every extra node
    or output costs the host time per call (on the H200 ~1.5-3 us per output; a copy of a transposed q ~8 us)."""
    nq, d = q.shape[1] // keys.shape[1] * q.shape[2], q.shape[3]
    stages = pipeline_stages(nq, d, arm)
    ring = ring_slots(nq, d, q.dtype, arm)
    (part,) = partial_launch(q, keys, values, _scale_array(scale, q.dtype), splits, stages, ring).run(arm)
    (out,) = merge_launch(part, q.dtype, q.shape[1], q.shape[2], keys.shape[1], d).run(arm)
    return out
