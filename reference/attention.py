"""Reference attention: the float64 oracle, its low-precision baseline, a paged variant and a torch twin.

Shapes (MLX's ``mx.fast.scaled_dot_product_attention`` layout)::

    q  [B, Hq,  L, Dk]     L query rows
    k  [B, Hkv, N, Dk]     N keys
    v  [B, Hkv, N, Dv]
    out[B, Hq,  L, Dv]

GQA / MQA: ``Hq`` must be a multiple of ``Hkv``; query head ``h`` reads KV head
``h // (Hq // Hkv)`` (MHA when ``Hq == Hkv``, MQA when ``Hkv == 1``).

Which keys a query sees (all conditions AND together):

* ``mask=None``: every key.
* ``mask="causal"``: bottom-right aligned, as MLX's ``mask="causal"`` (the last
  query row aligns with the last key): key ``j`` is visible to query ``i`` iff
  ``j <= i + N - L``. With ``L > N`` the first ``L - N`` rows see no key.
* ``mask`` a boolean array broadcastable to ``[B, Hq, L, N]``: True = attend.
* ``mask`` a float array broadcastable to ``[B, Hq, L, N]``: added to the scaled
  scores; ``-inf`` hides a key. NaN and ``+inf`` are refused (they make a row
  NaN whatever the policy).
* ``window=w``: sliding window, key ``j`` is visible to query ``i`` only if
  ``(i + N - L) - j < w`` (the seed's ``createCausalMask``: ``linds < rinds +
  window``). It bounds how far back a query reaches; pair it with ``"causal"``
  (or a boolean mask) to also hide future keys.

Attention sinks (``sinks``, shape ``[Hq]``, as MLX's ``sinks=``): one extra
logit per query head that joins every row's softmax denominator but carries no
value vector, so it only drains probability mass away from the keys::

    out[i] = sum_j exp(s_ij - m) v_j / (exp(sink_h - m) + sum_j exp(s_ij - m))

Fully masked rows (no visible key), the policy ``fully_masked``:

* ``"zeros"`` (default): the row's output is 0. A softmax over no keys is
  undefined; 0 is the limit of "attention to nothing", it is what
  FlashAttention's reference and torch's SDPA return, and it is what a sink does
  anyway (with sinks a fully masked row puts all its mass on the sink: 0).
* ``"mlx_mean"``: what MLX 0.32's ``mx.fast.scaled_dot_product_attention``
  returns. Its fallback replaces boolean-masked scores with ``finfo(dtype).min``
  instead of ``-inf``, so a row whose keys are all hidden by a boolean /
  causal mask has N equal scores: the output is the MEAN of V over all N keys.
  A row hidden entirely by an additive ``-inf`` mask is a softmax of ``-inf``
  everywhere: NaN. With (finite) sinks the sink absorbs the row: 0. Here: the
  mean runs over the keys hidden by the boolean part (causal, window, boolean
  mask) whose additive term is finite; a row with no such key is NaN; rows with
  a visible key are computed exactly as under ``"zeros"``.

Precision:

* ``upcast=True`` (the oracle): everything in float64 from the inputs' values,
  output float64.
* ``upcast=False``: the naive computation in the input dtype T, the baseline of
  FlashAttention's error-ratio gate (their tests' ``attention_ref(upcast=False,
  reorder_ops=True)``). Every op rounds to T once, the way a GPU/BLAS kernel in
  T does (float32 arithmetic inside an op, one rounding at its output):

  1. ``k*scale`` (``reorder_ops=True``) or ``q*scale`` (``reorder_ops=False``):
     float32 product with ``float32(scale)``, rounded to T;
  2. scores = ``q @ k^T``: float32 accumulation, rounded to T;
  3. an additive mask is rounded to T, added, and the sum rounded to T;
  4. softmax in float32 (max, exp, sum, divide) rounded to T; sinks are rounded
     to T before they join;
  5. ``p @ v``: float32 accumulation, rounded to T.

  For float32 inputs T is float32 and the roundings are no-ops (NumPy float32
  arithmetic); for float64 inputs everything is float64. Output dtype T.

Return type: always a NumPy array (bfloat16 as ``ml_dtypes.bfloat16``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import ml_dtypes
import numpy as np

from reference import metrics

__all__ = [
    "FULLY_MASKED_POLICIES",
    "NOISE_FLOOR_TERMS",
    "UNIT_ROUNDOFF",
    "attention_noise_floor",
    "attention_ref",
    "attention_ref_torch",
    "key_visibility",
    "paged_attention_ref",
    "split_merge_ref",
]

FULLY_MASKED_POLICIES = ("zeros", "mlx_mean")

_FLOAT_DTYPES = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


# --- validation ------------------------------------------------------------
# TypeError: the wrong kind of argument; ValueError: out of range. Each message names the argument.

_MAX_AXIS = int(np.iinfo(np.int64).max)  # no array axis is longer


def _check_int(value, name: str, *, minimum: int) -> int:
    """A Python or NumPy integer (never bool) in [minimum, int64 max], as a Python int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not minimum <= value <= _MAX_AXIS:
        raise ValueError(f"{name} must be an int in [{minimum}, {_MAX_AXIS}], got {value!r}")
    return int(value)


def _check_flag(value, name: str) -> bool:
    """A bool (Python or NumPy): 0, 1 or "yes" are refused, not read as truth values."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def _float_array(x, name: str) -> np.ndarray:
    a = metrics.to_numpy(x, name=name)
    if metrics.dtype_name(a.dtype) not in _FLOAT_DTYPES:
        raise ValueError(f"{name} must be float64/float32/float16/bfloat16, got dtype {a.dtype}")
    return a


def _check_qkv(q, k, v) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    q, k, v = _float_array(q, "q"), _float_array(k, "k"), _float_array(v, "v")
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim != 4:
            raise ValueError(f"{name} must have 4 axes [B, H, T, D], got shape {a.shape}")
    (b, hq, _, dk), (bk, hkv, n, dkk), (bv, hv, nv, _) = q.shape, k.shape, v.shape
    if bk != b or bv != b:
        raise ValueError(f"batch sizes differ: q has B={b}, k has B={bk}, v has B={bv}")
    if dkk != dk:
        raise ValueError(f"k has head dim {dkk} but q has Dk={dk}")
    if hv != hkv:
        raise ValueError(f"v has {hv} heads but k has {hkv}")
    if nv != n:
        raise ValueError(f"v has {nv} keys but k has N={n}")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"k has {hkv} heads, Hq={hq} is not a multiple")
    return q, k, v


def _check_scale(scale) -> float:
    # impl.checks.check_scale's rule, restated: the oracles import nothing from impl/, so a bug there cannot reach them.
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating, np.integer)):
        raise TypeError(f"scale must be a real number, got {type(scale).__name__}")
    try:
        finite = math.isfinite(float(scale))
    except OverflowError:  # an int past float's range
        finite = False
    if not finite:
        raise ValueError(f"scale must be finite, got {scale!r}")
    return float(scale)


def _check_window(window) -> int | None:
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise TypeError(f"window must be None or a positive int, got {type(window).__name__}")
    if window < 1:
        raise ValueError(f"window must be None or a positive int, got {window!r}")
    return int(window)


def _clamp_window(window: int | None, N: int) -> int | None:
    """A window of N or more keys hides nothing (no key lies N or more behind a query), so it is clamped to
    max(N, 1): the same visibility, and no int past int64 reaches NumPy or torch."""
    return None if window is None else min(window, max(N, 1))


def _check_sinks(sinks, hq: int) -> np.ndarray | None:
    if sinks is None:
        return None
    s = _float_array(sinks, "sinks")
    if s.shape != (hq,):
        raise ValueError(f"sinks must have shape [Hq] = ({hq},), got {s.shape}")
    if not np.all(np.isfinite(s.astype(np.float64))):
        raise ValueError("sinks must be finite (one logit per query head)")
    return s


def _check_policy(fully_masked: str) -> str:
    if not isinstance(fully_masked, str):
        raise TypeError(f"fully_masked must be one of {FULLY_MASKED_POLICIES}, got {type(fully_masked).__name__}")
    if fully_masked not in FULLY_MASKED_POLICIES:
        raise ValueError(f"fully_masked must be one of {FULLY_MASKED_POLICIES}, got {fully_masked!r}")
    return fully_masked


def _split_mask(mask, shape: tuple[int, int, int, int]) -> tuple[bool, np.ndarray | None, np.ndarray | None]:
    """(causal, boolean [.., L, N] or None, additive [.., L, N] or None), broadcast-checked."""
    if mask is None:
        return False, None, None
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"mask must be None, 'causal', a boolean array or a float array, got {mask!r}")
        return True, None, None
    m = metrics.to_numpy(mask, name="mask")
    if m.ndim > 4:
        raise ValueError(f"mask must have at most 4 axes (broadcastable to {list(shape)}), got shape {m.shape}")
    try:  # broadcasts TO the scores' shape: a larger axis (a prefill mask at a decode step) is refused, as MLX does
        fits = np.broadcast_shapes(m.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"mask of shape {m.shape} does not broadcast to [B, Hq, L, N] = {list(shape)}")
    if m.dtype == np.bool_:
        return False, m, None
    if metrics.dtype_name(m.dtype) not in _FLOAT_DTYPES:
        raise ValueError(f"mask array must be bool or float, got dtype {m.dtype}")
    f = m.astype(np.float64)
    if np.any(np.isnan(f)) or np.any(f == np.inf):
        raise ValueError("additive mask must not contain NaN or +inf")
    return False, None, m


def key_visibility(L: int, N: int, *, causal: bool, window: int | None) -> np.ndarray:
    """bool [L, N]: the keys query ``i`` may see under bottom-right ``causal`` and ``window``.

    ``d = (i + N - L) - j`` is how far key ``j`` lies behind query ``i``'s
    position: causal needs ``d >= 0``, the window ``d < window``.

    ``L = 0`` or ``N = 0`` is allowed: an empty [L, N] array (no queries, or no keys to see).
    """
    L = _check_int(L, "L", minimum=0)
    N = _check_int(N, "N", minimum=0)
    causal = _check_flag(causal, "causal")
    window = _clamp_window(_check_window(window), N)
    distance = (np.arange(L)[:, None] + (N - L)) - np.arange(N)[None, :]
    visible = np.ones((L, N), dtype=bool)
    if causal:
        visible &= distance >= 0
    if window is not None:
        visible &= distance < window
    return visible


# --- the computation -------------------------------------------------------


class _Arithmetic:
    """Where the computation rounds: float64 throughout, or once per op to dtype T."""

    def __init__(self, dtype: np.dtype, upcast: bool):
        self.out_dtype = np.dtype(np.float64) if upcast else dtype
        # float32 accumulation for every T narrower than float64.
        self.work = np.dtype(np.float64) if self.out_dtype == np.float64 else np.dtype(np.float32)

    def round(self, x: np.ndarray) -> np.ndarray:
        """x rounded to the output dtype, held in the working dtype."""
        x = np.asarray(x, dtype=self.work)
        if self.out_dtype in (np.float64, np.float32):
            return x
        return x.astype(self.out_dtype).astype(self.work)

    def cast(self, x: np.ndarray) -> np.ndarray:
        return self.round(np.asarray(x).astype(self.work))


@dataclass
class _Pass:
    """Intermediates of one attention computation (all in the working dtype)."""

    scores: np.ndarray  # [B, Hq, L, N] scaled scores + additive mask, before hiding
    hidden: np.ndarray  # [B, Hq, L, N] bool: hidden by causal / window / boolean mask
    probs: np.ndarray  # [B, Hq, L, N] softmax weights of the keys (sink mass excluded)
    empty: np.ndarray  # [B, Hq, L, 1] bool: fully masked rows
    values: np.ndarray  # [B, Hq, N, Dv] V expanded to the query heads
    out: np.ndarray  # [B, Hq, L, Dv]


class _Inputs(NamedTuple):
    """Validated arguments: arrays as NumPy, the mask split into its parts."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scale: float
    causal: bool
    boolean: np.ndarray | None  # True = attend, broadcastable to [B, Hq, L, N]
    additive: np.ndarray | None
    window: int | None
    sink: np.ndarray | None  # [Hq]
    fully_masked: str


def _prepare(q, k, v, scale, mask, window, sinks, fully_masked) -> _Inputs:
    q, k, v = _check_qkv(q, k, v)
    b, hq, L, _ = q.shape
    causal, boolean, additive = _split_mask(mask, (b, hq, L, k.shape[2]))
    return _Inputs(q, k, v, _check_scale(scale), causal, boolean, additive,
                   _clamp_window(_check_window(window), k.shape[2]), _check_sinks(sinks, hq),
                   _check_policy(fully_masked))


def _attention(x: _Inputs, ar: _Arithmetic, reorder_ops: bool) -> _Pass:
    q, k, v, scale, causal, boolean, additive, window, sink, _ = x
    _, hq, L, _ = q.shape
    _, hkv, N, _ = k.shape
    group = hq // hkv
    qw, kw, vw = ar.cast(q), ar.cast(k), ar.cast(v)
    kw, vw = np.repeat(kw, group, axis=1), np.repeat(vw, group, axis=1)  # head h reads KV head h // group
    s = ar.work.type(scale)
    if reorder_ops:
        scores = ar.round(qw @ np.swapaxes(ar.round(kw * s), -1, -2))
    else:
        scores = ar.round(ar.round(qw * s) @ np.swapaxes(kw, -1, -2))

    hidden = ~key_visibility(L, N, causal=causal, window=window)
    if boolean is not None:
        hidden = hidden | ~boolean
    hidden = np.broadcast_to(hidden, scores.shape)
    if additive is not None:
        scores = ar.round(scores + ar.cast(additive))
    logits = np.where(hidden, -np.inf, scores)

    # The sink joins the max and the denominator, never the values.
    row_max = logits.max(axis=-1, keepdims=True) if N else np.full(scores.shape[:-1] + (1,), -np.inf, ar.work)
    if sink is not None:
        sink_logit = ar.cast(sink)[None, :, None, None]
        row_max = np.maximum(row_max, sink_logit)
    empty = row_max == -np.inf  # no finite logit and no sink: fully masked
    shift = np.where(empty, 0, row_max)
    weights = np.exp(logits - shift)
    total = weights.sum(axis=-1, keepdims=True)
    if sink is not None:
        total = total + np.exp(sink_logit - shift)
    with np.errstate(invalid="ignore", divide="ignore"):
        probs = ar.round(np.where(empty, 0, weights / np.where(empty, 1, total)))
    return _Pass(scores, hidden, probs, empty, vw, ar.round(probs @ vw))


def attention_ref(q, k, v, *, scale: float, mask=None, window: int | None = None, sinks=None,
                  upcast: bool = True, reorder_ops: bool = False, fully_masked: str = "zeros") -> np.ndarray:
    """softmax(scale * q @ k^T + mask) @ v with GQA, masks, window and sinks (module docstring).

    Returns ``[B, Hq, L, Dv]``: float64 when ``upcast``, else the inputs' dtype
    (which must then be one dtype for q, k, v and sinks).
    """
    upcast, reorder_ops = _check_flag(upcast, "upcast"), _check_flag(reorder_ops, "reorder_ops")
    x = _prepare(q, k, v, scale, mask, window, sinks, fully_masked)
    if not upcast:
        named = [("q", x.q), ("k", x.k), ("v", x.v)] + ([("sinks", x.sink)] if x.sink is not None else [])
        dtypes = {name: str(a.dtype) for name, a in named}
        if len(set(dtypes.values())) != 1:
            raise ValueError(f"upcast=False computes in one input dtype; got {dtypes}")
    ar = _Arithmetic(x.q.dtype, upcast)
    run = _attention(x, ar, reorder_ops)
    out = run.out
    if x.fully_masked == "mlx_mean" and x.sink is None:
        out = np.where(run.empty, _mlx_fully_masked_rows(run.hidden, run.scores, run.values, ar), out)
    return out.astype(ar.out_dtype)


UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8, "float64": 2.0**-53}
# attention_noise_floor's bound in one line, for the derivations of the gates that add it to their floor.
NOISE_FLOOR_TERMS = ("sum_j p_j e_j (|v_j| + |out|), e_j = u (S_j + |s_j - max|) + gamma_D S_j + "
                     "2 w (|s_j - max| + 2): the score rounded to the kernel's dtype (u), a D-term dot product in any "
                     "order and the exponential in the accumulator's (w, float32), plus flush to zero "
                     "(attention_noise_floor)")


def attention_noise_floor(q, k, v, *, scale: float, dtype: str, mask=None, window: int | None = None,
                          sinks=None) -> float:
    """How far a correct attention kernel computing in ``dtype`` may drift from the oracle through its scores.

    To first order, perturbing score j's exponent by ``e_j`` moves the output
    by ``sum_j p_j e_j (v_j - out)``, so this returns::

        max over rows, d of  sum_j p_j e_j (|v_jd| + |out_d|)

    in float64 from the oracle's probabilities, with ``e_j`` the bound on
    what a correct kernel's exponent can carry (``u`` = T's unit roundoff,
    ``w`` = the accumulator's: float32 for T <= float32, as MLX and these
    kernels accumulate, float64 for float64)::

        e_j = u (S_j + |s_j - max|)                  the score and s_j - max rounded to T
            + gamma_D S_j                            the dot product's D products and sums
            + w 2 (|s_j - max| + 2)                  the exponential

    ``S_j = |scale| * sum_d |q_d k_jd|``. ``gamma_D = D w / (1 - D w)``
    bounds a D-term dot product in ANY summation order (Higham, Accuracy and
    Stability of Numerical Algorithms, 2nd ed., eq. 3.5): a kernel's order is
    its own, so no smaller bound holds for all of them (MLX 0.32.4's CPU
    matmul misses a D = 96 float32 score by 3.4 u S_j). The exponential's
    term is the accuracy ``test_mlx_cpu_exp_error_grows_with_argument``
    relies on (MLX 0.32.4's CPU exp: up to 1.9 |x| u for |x| > 1; its
    argument reduction rounds x log2(e)). The error-ratio gate adds this to
    its floor: FlashAttention's factor-2 rule compares against ONE naive run,
    and on the small cases a property test can afford, that run's error can
    be luckily small; this floor is the size that luck cannot undercut.
    A sink's exponent errs like a key's (its value is 0). A kernel may flush
    results below the accumulator's smallest normal to 0: the floor adds what
    that can cost, ``tiny (N + 1)(1 + max|v|)`` (about 1e-35 at float32: it
    matters only to outputs that underflow). Fully masked rows contribute 0.
    """
    name = metrics.dtype_name(dtype)
    if name not in UNIT_ROUNDOFF:
        raise ValueError(f"dtype must be one of {tuple(UNIT_ROUNDOFF)}, got {dtype!r}")
    x = _prepare(q, k, v, scale, mask, window, sinks, "zeros")
    q, k, scale, sink = x.q, x.k, x.scale, x.sink
    run = _attention(x, _Arithmetic(np.dtype(np.float64), True), False)
    if run.probs.size == 0 or run.out.size == 0:
        return 0.0
    group = q.shape[1] // k.shape[1]
    qa = np.abs(q.astype(np.float64))
    ka = np.repeat(np.abs(k.astype(np.float64)), group, axis=1)
    magnitude = abs(scale) * (qa @ np.swapaxes(ka, -1, -2))
    visible_scores = np.where(run.hidden | ~np.isfinite(run.scores), -np.inf, run.scores)
    row_max = np.max(visible_scores, axis=-1, keepdims=True)
    if sink is not None:
        row_max = np.maximum(row_max, sink.astype(np.float64)[None, :, None, None])
    with np.errstate(invalid="ignore"):
        spread = np.where(run.probs > 0, np.abs(run.scores - row_max), 0.0)
    accumulator = np.float64 if name == "float64" else np.float32
    u, w = UNIT_ROUNDOFF[name], UNIT_ROUNDOFF[metrics.dtype_name(accumulator)]
    gamma = q.shape[-1] * w / (1.0 - q.shape[-1] * w)

    def exponent_error(magnitude, spread):  # e_j (the docstring's three terms)
        return u * (magnitude + spread) + gamma * magnitude + w * 2.0 * (spread + 2.0)

    weight = np.where(run.probs > 0, run.probs * exponent_error(magnitude, spread), 0.0)
    outward = weight.sum(axis=-1, keepdims=True)
    if sink is not None:  # the sink: a key with no product (S = 0) and value 0, so it moves out by p_sink e_sink out
        sink_spread = np.abs(sink.astype(np.float64)[None, :, None, None] - row_max)
        sink_mass = np.clip(1.0 - run.probs.sum(axis=-1, keepdims=True), 0.0, 1.0)
        outward = outward + sink_mass * exponent_error(0.0, sink_spread)
    bound = weight @ np.abs(run.values) + np.abs(run.out) * outward
    # Flush to zero: a weight, product or output below the accumulator's smallest normal may become 0 (MLX's CPU
    # exp flushes, as GPU fast math does). Each flushed weight p_j < tiny moves out by < tiny |v_j|, each of the N
    # flushed products and sums by < tiny, the final division by < tiny: at most tiny (N + 1)(1 + max|v|).
    tiny = float(np.finfo(accumulator).tiny)
    flushed = tiny * (run.probs.shape[-1] + 1) * (1.0 + float(np.max(np.abs(run.values), initial=0.0)))
    return float(np.max(bound)) + flushed


def _mlx_fully_masked_rows(hidden_by_bool, scores, vw, ar: _Arithmetic) -> np.ndarray:
    """MLX's value for fully masked rows: mean of V over bool-hidden keys with a finite additive term."""
    candidates = hidden_by_bool & np.isfinite(scores)
    count = candidates.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        probs = ar.round(candidates / count.astype(ar.work))  # 0/0 -> NaN: no such key
    return ar.round(probs @ vw)


# --- paged -----------------------------------------------------------------


def paged_attention_ref(q, key_pool, value_pool, block_table, length: int, *, scale: float, mask=None,
                        window: int | None = None, sinks=None, upcast: bool = True, reorder_ops: bool = False,
                        fully_masked: str = "zeros") -> np.ndarray:
    """Attention for one sequence whose KV lives in block pools, read through its block table.

    * ``q`` ``[1, Hq, n, Dk]``: the sequence's n newest query rows.
    * ``key_pool`` ``[num_blocks, Hkv, block_size, Dk]``, ``value_pool``
      ``[num_blocks, Hkv, block_size, Dv]`` (NumPy / MLX arrays).
    * ``block_table``: 1-D ints, the sequence's logical block ``b`` lives in
      physical block ``block_table[b]``; token ``t`` is slot ``t % block_size`` of
      block ``block_table[t // block_size]``.
    * ``length``: tokens in the sequence; the first ``length`` tokens are read.
      Entries of the table past ``ceil(length / block_size)`` are ignored.

    The gathered ``[1, Hkv, length, D]`` K/V then go through ``attention_ref``
    with the remaining arguments (``mask="causal"`` aligns the n query rows with
    the last n tokens).
    """
    q = _float_array(q, "q")
    kp, vp = _float_array(key_pool, "key_pool"), _float_array(value_pool, "value_pool")
    if q.ndim != 4 or q.shape[0] != 1:
        raise ValueError(f"q must have shape [1, Hq, n, Dk], got {q.shape}")
    for name, pool in (("key_pool", kp), ("value_pool", vp)):
        if pool.ndim != 4:
            raise ValueError(f"{name} must have shape [num_blocks, Hkv, block_size, D], got {pool.shape}")
    if kp.shape[:3] != vp.shape[:3]:
        raise ValueError(f"value_pool has [num_blocks, Hkv, block_size] = {list(vp.shape[:3])} "
                         f"but key_pool has {list(kp.shape[:3])}")
    num_blocks, _, block_size, _ = kp.shape
    table = np.asarray(block_table)
    if table.dtype.kind in "OUS":  # None, strings, ragged lists: no block ids at all
        raise TypeError(f"block_table must be a 1-D sequence of ints, got {type(block_table).__name__}")
    if table.ndim != 1 or (table.size and not np.issubdtype(table.dtype, np.integer)):
        raise ValueError(f"block_table must be a 1-D sequence of ints, got shape {table.shape} dtype {table.dtype}")
    length = _check_int(length, "length", minimum=1)
    if block_size == 0:
        raise ValueError("key_pool must have block_size >= 1 (its third axis), got 0")
    needed = -(-length // block_size)
    if table.size < needed:
        raise ValueError(f"block_table has {table.size} blocks but length={length} needs {needed} "
                         f"of block_size {block_size}")
    used = table[:needed].astype(np.int64)
    if np.any((used < 0) | (used >= num_blocks)):
        bad = int(used[(used < 0) | (used >= num_blocks)][0])
        raise ValueError(f"block_table refers to block {bad}, outside the pool's {num_blocks} blocks")

    def gather(pool: np.ndarray) -> np.ndarray:
        blocks = pool[used]  # [needed, Hkv, bs, D]
        hkv, d = pool.shape[1], pool.shape[3]
        return blocks.transpose(1, 0, 2, 3).reshape(1, hkv, needed * block_size, d)[:, :, :length]

    return attention_ref(q, gather(kp), gather(vp), scale=scale, mask=mask, window=window, sinks=sinks,
                         upcast=upcast, reorder_ops=reorder_ops, fully_masked=fully_masked)


# --- torch twin ------------------------------------------------------------


def attention_ref_torch(q, k, v, *, scale: float, mask=None, window: int | None = None, sinks=None,
                        fully_masked: str = "zeros") -> np.ndarray:
    """The same contract as ``attention_ref`` (upcast=True), computed by torch in float64.

    An independent second oracle: ``torch.nn.functional.scaled_dot_product_attention``
    (``enable_gqa=True``) does the softmax and GQA; the masks are built with
    torch's own ops (``causal_lower_right`` for a plain bottom-right causal
    mask, ``tril`` bands otherwise). Sinks ride along as one extra key whose
    K and V are zero and whose additive bias is the sink logit: it joins the
    denominator and contributes no value. Fully masked rows are then set by
    ``fully_masked``. Returns NumPy float64.
    """
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    q, k, v, scale, causal, boolean, additive, window, sink, fully_masked = _prepare(
        q, k, v, scale, mask, window, sinks, fully_masked)
    b, hq, L, _ = q.shape
    _, hkv, N, dk = k.shape
    dv = v.shape[-1]
    tq, tk, tv = (torch.from_numpy(a.astype(np.float64)) for a in (q, k, v))

    # Boolean part: True = visible.
    visible = torch.ones(L, N, dtype=torch.bool)
    if causal:
        visible = torch.tril(visible, diagonal=N - L)
    if window is not None:
        visible = visible & ~torch.tril(torch.ones(L, N, dtype=torch.bool), diagonal=N - L - window)
    if boolean is not None:
        visible = visible & torch.from_numpy(np.ascontiguousarray(boolean))
    visible = visible.expand(b, hq, L, N)
    bias = torch.zeros(b, hq, L, N, dtype=torch.float64)
    if additive is not None:
        bias = bias + torch.from_numpy(additive.astype(np.float64))
    plain_causal = causal and window is None and boolean is None and additive is None and sink is None and L <= N

    if sink is not None:
        tk = torch.cat([tk, torch.zeros(b, hkv, 1, dk, dtype=torch.float64)], dim=2)
        tv = torch.cat([tv, torch.zeros(b, hkv, 1, dv, dtype=torch.float64)], dim=2)
        sink_bias = torch.from_numpy(sink.astype(np.float64)).view(1, hq, 1, 1).expand(b, hq, L, 1)
        attn_mask = torch.cat([bias.masked_fill(~visible, -math.inf), sink_bias], dim=-1)
    elif plain_causal:
        attn_mask = causal_lower_right(L, N)
    elif mask is None and window is None:
        attn_mask = None
    else:
        attn_mask = bias.masked_fill(~visible, -math.inf)
    out = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=attn_mask, scale=scale, enable_gqa=True)

    empty = ~(visible & torch.isfinite(bias)).any(dim=-1, keepdim=True)
    if sink is not None or fully_masked == "zeros":
        fallback = torch.zeros_like(out)
    else:
        keys = (~visible & torch.isfinite(bias)).to(torch.float64)
        weights = keys / keys.sum(dim=-1, keepdim=True)  # 0/0 -> NaN: no bool-hidden key
        fallback = torch.matmul(weights, tv.repeat_interleave(hq // hkv, dim=1))
    return torch.where(empty, fallback, out).numpy()


def split_merge_ref(opart, mpart, lpart) -> np.ndarray:
    """The merge of flash-decoding partials over their first (split) axis, in float64.

    ``opart`` [S, ..., D]: each split's unnormalized output (sum of exp(s - m_s) v over its keys);
    ``mpart`` / ``lpart`` [S, ...]: its running max m_s and sum l_s of exp(s - m_s). The merge is
    ``sum_s exp(m_s - M) o_s / sum_s exp(m_s - M) l_s`` with ``M = max_s m_s``, over the splits with
    ``m_s > -inf`` (a split that saw no key weighs 0, whatever its O and l hold). Every row (a position
    of ``...``) needs one such split: a row with none has no defined output and is refused.
    """
    o = _float_array(opart, "opart").astype(np.float64)
    m = _float_array(mpart, "mpart").astype(np.float64)
    l = _float_array(lpart, "lpart").astype(np.float64)
    if o.ndim < 2 or m.shape != o.shape[:-1] or l.shape != m.shape:
        raise ValueError(f"opart must be [S, ..., D] with mpart and lpart [S, ...]: got opart {list(o.shape)}, "
                         f"mpart {list(m.shape)}, lpart {list(l.shape)}")
    if np.isnan(m).any() or (m == np.inf).any():
        raise ValueError("mpart must hold finite maxima or -inf (a split that saw no key)")
    live = m > -np.inf
    if not live.any(axis=0).all():
        raise ValueError("mpart: every row needs a split with a finite max (a row with none has no output)")
    if not (np.isfinite(o[live]).all() and np.isfinite(l[live]).all()):
        raise ValueError("opart and lpart must be finite where mpart is finite")
    if (l[live] <= 0).any():  # a live split's sum holds its max's own exp(0) = 1: a sum <= 0 is no softmax state
        raise ValueError("lpart must be positive where mpart is finite (a live split's sum is at least 1)")
    top = np.where(live, m, -np.inf).max(axis=0)
    weight = np.where(live, np.exp(np.where(live, m, 0.0) - top), 0.0)
    num = (weight[..., None] * np.where(live[..., None], o, 0.0)).sum(axis=0)
    den = (weight * np.where(live, l, 0.0)).sum(axis=0)
    return num / den[..., None]
