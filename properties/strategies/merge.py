"""Flash-decoding partials for the merge kernels' gates (multi-query's split merge, paged attention's merge).

A partial of one row over one split (or partition) is its running max ``m``, its sum ``l`` of ``exp(s - m)`` over
the split's keys and its unnormalized output ``o`` (the sum of ``exp(s - m) v``). ``split_partials`` builds them in
float32, split axis first, so that the exact merge is easy to bound:

* the maxima lie on a grid of 1/4 below 64 in magnitude, so every difference a merge takes is exact in float32
  (exp's argument carries no rounding);
* ``l`` is a sum of exps whose largest term is 1 (in [1, e^4]) and ``o / l`` lies in [0.5, 1.5]: positive, no
  cancellation, so a first-order relative bound holds;
* patterns: ``rising`` (every split raises the row's max: a rescale at each step of a one-pass merge), ``falling``
  (none does), ``masked`` (-inf partials, as a split with no visible key writes: every split whose index is 3 mod 8,
  a whole slice of an 8-way merge, and 30% of the rest; split 0 stays live, so every row has one), ``random``,
  ``spread`` (maxima more than float32 exp's range apart, ``attention.EXP_OVERFLOW``: split 0 at PEAK_LOW (100, an
  attention sink's), the last split outside merge slice 0 at PEAK_HIGH (220, an outlier's), the rest in [-4, 4): a
  merge that rescales by exp(m - ref) with any reference but the largest of all the maxima, e.g. the first
  slice's, overflows; the maxima stay on the grid of 1/4, below 256, so the differences are still exact).

``merge_ulps`` is the gates' tolerance for a merge's output in its dtype, given the float32 bound.
"""

from __future__ import annotations

import numpy as np

from .attention import PEAK_HIGH, PEAK_LOW

__all__ = ["EXP_ULPS", "MERGE_PATTERNS", "merge_ulps", "split_partials"]

MERGE_PATTERNS = ("rising", "falling", "masked", "random", "spread")
# exp's error bound in the merge kernels: Metal's precise exp (4 ulp; CUDA's expf is 2; MLX gives NVRTC no fast-math
# flag: __logf for logf changes the fused argmax's lse on the H200)
EXP_ULPS = 4


def split_partials(splits: int, cells: tuple[int, ...], d: int, pattern: str,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(o [splits, *cells, d], m [splits, *cells], l [splits, *cells]) in float32 (module docstring)."""
    if pattern not in MERGE_PATTERNS:
        raise ValueError(f"pattern must be one of {MERGE_PATTERNS}, got {pattern!r}")
    if splits < 1 or d < 1 or any(c < 1 for c in cells):
        raise ValueError(f"splits, cells and d must be positive, got {splits}, {cells}, {d}")
    shape = (splits, *cells)
    step = (np.arange(splits, dtype=np.float64) / 4.0).reshape(splits, *(1,) * len(cells))
    if pattern == "rising":
        m = np.broadcast_to(step - 24.0, shape).copy()
    elif pattern == "falling":
        m = np.broadcast_to(24.0 - step, shape).copy()
    elif pattern == "spread":
        m = rng.integers(-16, 16, shape) / 4.0
        late = max((s for s in range(splits) if s % 8), default=0)
        m[0] = PEAK_LOW
        m[late] = PEAK_HIGH
    else:
        m = rng.integers(-80, 80, shape) / 4.0
    if pattern == "masked":
        hidden = (np.arange(splits) % 8 == 3).reshape(splits, *(1,) * len(cells)) | (rng.random(shape) < 0.3)
        hidden[0] = False
        m[hidden] = -np.inf
    live = m > -np.inf
    l = np.where(live, np.exp(rng.uniform(0.0, 4.0, shape)), 0.0)
    o = np.where(live[..., None], l[..., None] * rng.uniform(0.5, 1.5, (*shape, d)), 0.0)
    return o.astype(np.float32), m.astype(np.float32), l.astype(np.float32)


def merge_ulps(dtype: str, float32_ulps: int, float32_why: str) -> tuple[int, str]:
    """(ulps, why) a merge's output in ``dtype`` may be from the float64 merge rounded to it: the float32 bound
    itself for float32; for float16 / bfloat16, 1: the float32 result is within ``float32_ulps`` float32 ulps,
    far below half a ``dtype`` ulp, so rounding lands on the exact value's rounding or, at a midpoint, its
    neighbour."""
    if dtype == "float32":
        return float32_ulps, float32_why
    return 1, (f"the float32 merge is within {float32_ulps} float32 ulps ({float32_why}), far below half a {dtype} "
               f"ulp: rounding to {dtype} lands on the exact value's rounding or, at a rounding midpoint, its neighbour")
