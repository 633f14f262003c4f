"""The statistical regression gate: is this run's benchmark slower than its stored baseline?

    verdict = compare(current_samples, baseline_samples, alpha=0.01, min_effect=0.10)

A regression is declared only when BOTH hold:

* significance: a one-sided Mann-Whitney U test (``scipy.stats.mannwhitneyu(current,
  baseline, alternative="greater")``: current timings stochastically larger)
  gives ``p_value < alpha`` (default 0.01). Rank-based, so it assumes nothing
  about the timing distribution (right-skewed, with outliers from the OS or
  clock changes) beyond independent rounds.
* size: the median slowdown ``effect = median(current) / median(baseline) - 1``
  exceeds ``min_effect`` (default 0.10, i.e. 10%). With tens of rounds the
  test alone finds a 2% shift significant; a gate that fails on 2% fails on
  noise between sessions (clocks, thermals, another process), which the
  test's independence assumption does not cover.

A third, optional condition, ``floor_s`` (a device's baseline stores it as
``settings.gate_floor_s``; default 0, no floor): a case whose baseline median
per call is below the floor is measured and recorded but not gated
(``gated: false``), because its time is mostly host overhead (Python, launch,
``mx.eval``) whose jitter between rounds and processes exceeds the minimum
effect. The H200's floor, 0.25 ms, and its derivation: ``perf/RESULTS.md``.

Both numbers are kept in the ``Verdict`` and in the perf record (``p_value``,
``effect`` with ``effect_kind = "median_slowdown"``; Cliff's delta, the rank
effect size, as ``cliffs_delta``). Calibration on recorded samples:
``perf/tests/test_regression.py``.

The smallest p-value the test can give with n and m samples (all current
rounds slower than all baseline rounds) is 1 / C(n + m, n) (exact test); if
that is not below ``alpha`` the gate could never fire, so ``compare`` refuses
such sample counts (ValueError naming them): at least 5 + 5 rounds for
alpha 0.01 (1/252).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu

__all__ = ["ALPHA", "MIN_EFFECT", "Verdict", "compare", "min_p_value"]

ALPHA = 0.01
MIN_EFFECT = 0.10


@dataclass(frozen=True)
class Verdict:
    p_value: float  # one-sided Mann-Whitney U, current > baseline
    effect: float  # median(current) / median(baseline) - 1
    cliffs_delta: float  # P(current > baseline) - P(current < baseline), in [-1, 1]
    regressed: bool  # gated and p_value < alpha and effect > min_effect
    alpha: float
    min_effect: float
    gated: bool  # False: the baseline median is below floor_s, so the case is recorded, never flagged
    floor_s: float
    current_median_s: float
    baseline_median_s: float
    n_current: int
    n_baseline: int

    def describe(self) -> str:
        verdict = "REGRESSED" if self.regressed else "ok" if self.gated else "not gated (below the floor)"
        return (f"{verdict}: median {self.current_median_s * 1e3:.4g} ms vs baseline "
                f"{self.baseline_median_s * 1e3:.4g} ms ({self.effect:+.1%}, threshold +{self.min_effect:.0%}); "
                f"Mann-Whitney p = {self.p_value:.3g} (alpha {self.alpha}); "
                f"n = {self.n_current} vs {self.n_baseline}")


def _samples(name: str, values) -> np.ndarray:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of seconds, got {type(values).__name__}")
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of seconds, got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{name} must hold positive, finite seconds")
    return array


def min_p_value(n: int, m: int) -> float:
    """The smallest one-sided p-value of the exact Mann-Whitney test with n and m samples."""
    return 1.0 / math.comb(n + m, n)


def _check_fraction(name: str, value, upper: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not 0 < value < upper:
        raise ValueError(f"{name} must be in (0, {upper}), got {value}")
    return float(value)


def compare(current: Sequence[float], baseline: Sequence[float], *, alpha: float = ALPHA,
            min_effect: float = MIN_EFFECT, floor_s: float = 0.0) -> Verdict:
    """The gate's verdict on ``current`` timings against ``baseline`` timings (module docstring)."""
    cur, base = _samples("current", current), _samples("baseline", baseline)
    alpha = _check_fraction("alpha", alpha, 1.0)
    min_effect = _check_fraction("min_effect", min_effect, math.inf)
    if isinstance(floor_s, bool) or not isinstance(floor_s, (int, float)) or not 0 <= floor_s < math.inf:
        raise ValueError(f"floor_s must be a finite number of seconds >= 0, got {floor_s!r}")
    floor = min_p_value(cur.size, base.size)
    if floor >= alpha:
        raise ValueError(f"current ({cur.size}) and baseline ({base.size}) samples are too few: the smallest "
                         f"p-value they allow is {floor:.3g}, not below alpha={alpha}")
    result = mannwhitneyu(cur, base, alternative="greater")
    p_value = float(result.pvalue)
    u = float(result.statistic)  # counts pairs current > baseline (+ half the ties)
    cliffs = 2.0 * u / (cur.size * base.size) - 1.0
    cur_median, base_median = float(np.median(cur)), float(np.median(base))
    effect = cur_median / base_median - 1.0
    gated = base_median >= floor_s
    return Verdict(p_value=p_value, effect=effect, cliffs_delta=cliffs,
                   regressed=bool(gated and p_value < alpha and effect > min_effect), alpha=alpha,
                   min_effect=min_effect, gated=bool(gated), floor_s=float(floor_s),
                   current_median_s=cur_median, baseline_median_s=base_median,
                   n_current=int(cur.size), n_baseline=int(base.size))
