"""The statistical regression gate: is this run's benchmark slower than its stored baseline?

    verdict = compare_pooled(current_samples, baseline_processes, alpha=0.01, min_effect=0.10)
    verdict = compare(current_samples, baseline_samples)  # a baseline measured in one process

A baseline holds the timing samples of one benchmark from k >= 1 separate
processes, each process's samples kept apart (``perf/baseline.py``: ``update
--from a.json --from b.json --from c.json`` pools k = 3 runs). With m_1..m_k the
per-process medians, the reference is ``median(m_1..m_k)`` and the slowest
process ``max(m_i)``. A regression is declared only when ALL of these hold:

* significance: a one-sided Mann-Whitney U test of the current samples against
  every baseline sample pooled (``scipy.stats.mannwhitneyu(current, pooled,
  alternative="greater")``: current timings stochastically larger) gives
  ``p_value < alpha`` (default 0.01). Rank-based, so it assumes nothing about
  the timing distribution (right-skewed, with outliers from the OS or clock
  changes) beyond independent rounds.
* size: the current median is more than ``min_effect`` (default 10%) slower
  than the SLOWEST baseline process: ``median(current) > (1 + min_effect) *
  max(m_i)``. It is recorded as ``effect = median(current) / reference - 1``
  against ``threshold = (1 + min_effect) * max(m_i) / reference - 1``, which is
  at least ``max(min_effect, max(m_i) / reference - 1)``. With one process the
  slowest process is the reference and the threshold is ``min_effect``: exactly
  the single-process rule (a committed one-process baseline judges as before).
* the floor: the baseline reference is at least ``floor_s`` (below).

Why the slowest process, and why the size condition at all (the derivation):

1. Rounds of one process are not the whole noise. On the NVIDIA H200 the median
   of a case moves between processes more than between rounds of one process:
   A/A in one process flagged 0 of 25 gated cases, A/A across two processes 2
   (+13.0% and +15.6%, nothing changed; the median |shift| was 1.6%;
   ``perf/RESULTS.md``, "Calibration"). Mann-Whitney takes rounds for
   independent draws, so with 20 + 20 rounds it calls such a shift
   significant; the size condition is the only guard against a process shift,
   and a fixed 10% is too small for the cases whose process shift exceeds it.
   One process cannot show how far its case moves between processes; k
   processes show k draws of that move: m_1..m_k.
2. False flags. For an unchanged kernel the k + 1 process medians (the k pooled
   ones and the new run's) are exchangeable, so the new one is the largest with
   probability 1 / (k + 1), whatever the distribution of the process effect.
   The rule flags only a new median above ``(1 + min_effect) * max(m_i)``, which
   needs it to be the largest and by 10% more: at most 1 / (k + 1) per case
   (1/4 at k = 3), and far less unless the process effect is large against
   10%. Two process-effect models, simulated (seeded,
   ``perf/tests/test_regression.py``): two modes 15% apart, half the processes
   in each (what the H200's worst cases look like): 1/4 with one baseline
   process, 1/16 with three (three pooled processes all in the fast mode, the
   new one slow: nothing can tell that from a regression); log-normal process
   effect of sigma 5%: 9% with one process, about 1% with three. The cases whose
   process effect is small (most: median |shift| 1.6%) are decided by
   ``min_effect`` as before.
3. The price is resolution. A slowdown by ``1 + r`` of a run whose unchanged
   median would lie within the pool's range [min m_i, max m_i] is flagged for
   sure when ``(1 + r) * min m_i > (1 + min_effect) * max m_i``, i.e. when the
   process spread ``s = max m_i / min m_i - 1`` is below
   ``(1 + r) / (1 + min_effect) - 1``: for r = 20%, s < 1/11 (9.1%). A case that
   spreads more across processes is gated more coarsely, and its record says by
   how much (``effect_threshold``, ``process_spread``). The premise is the
   run's own speed: passes of one process drift too (up to 7% on the H200), and
   a slowed run that happens to be faster than every pooled process can be
   missed below that spread (one case of 22 in the H200 calibration: spread
   7.0%, its slowed pass 5% under the fastest process; ``perf/RESULTS.md``).
4. Not the brief's first sketch ``effect > max(min_effect, s)`` against the
   reference: it flags a new run that merely repeats the slowest pooled
   process's mode whenever it lands a little above it (simulated: 11% vs 6% for
   the two-mode model, 4% vs 1% for sigma 5%, both at k = 3), for the same
   worst-case resolution (s < 1/11 at r = 20%). Nor a prediction interval from
   the k medians' standard deviation: at k = 3 a 99% one uses t(2, 0.995) *
   sqrt(1 + 1/3) = 11.5 deviations, a threshold that would gate nothing.

The pooled samples violate Mann-Whitney's independence (rounds cluster by
process), which makes its p-value optimistic; that is why it is only the first
condition and the size condition carries the process spread.

The floor, ``floor_s`` (a device's baseline stores it as
``settings.gate_floor_s``; default 0, no floor): a case whose baseline reference
per call is below the floor is measured and recorded but not gated
(``gated: false``), because its time is mostly host overhead (Python, launch,
``mx.eval``) whose jitter between rounds and processes exceeds the minimum
effect. The H200's floor, 0.25 ms, and its derivation: ``perf/RESULTS.md``.

Two figures (``perf.baseline.FIGURES``), one rule. ``judge(..., figure=)`` applies it to either: ``call``, the
call-time samples (protocol eval8: host Python, MLX's per-launch host cost and the device's work), or
``kernel``, the kernel-time samples of ``perf.kernel_time`` (the device time of a call's kernels, one sample
per traced call). A baseline says per case which one its gate judges (``perf.baseline.figure_of``), and the
verdict and its record say which was judged (``figure``). The kernel figure's floor is its own,
``settings.kernel_gate_floor_s``, default 0 (every case gated): the call floor below is derived from host
overhead, which kernel time does not contain, and no kernel-time calibration across processes has been
recorded on the H200 yet to derive another; until one is, the size condition (10% beyond the slowest
baseline process) is what stands between kernel time's process-to-process shift and a false flag.

The numbers are kept in the ``Verdict`` and in the perf record (``p_value``,
``effect`` with ``effect_kind = "median_slowdown"``, ``effect_threshold``,
``process_spread``, ``baseline_processes``; Cliff's delta, the rank effect size,
as ``cliffs_delta``).

The smallest p-value the test can give with n current and m pooled samples
(all current rounds slower than all baseline rounds) is 1 / C(n + m, n) (exact
test); if that is not below ``alpha`` the gate could never fire, so the
comparison refuses such sample counts (ValueError naming them): at least 5 + 5
rounds for alpha 0.01 (1/252).

Calibration on recorded samples: ``perf/tests/test_regression.py``, and
``python -m perf.regression BASELINE.json CALIBRATION.json`` prints it for any
recorded pair (a baseline and the calibration file of a later ``perf.run
--gate --calibration`` process). On the H200 (3 pooled processes and a 4th,
``records/h200-calibration/pooled``): each process against the pool of the
other 3 flags 0 of 28 gated cases, where the one-process rule on the same
processes flags 15 times over their 12 ordered pairs.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu

from perf.baseline import FIGURES, baseline_processes, gate_floor, read_document, validate_baseline

__all__ = ["ALPHA", "MIN_EFFECT", "SLOWED_DETECTABLE_SPREAD", "Calibration", "Verdict", "calibrate",
           "calibration_processes", "compare", "compare_pooled", "judge", "min_p_value", "process_spread"]

ALPHA = 0.01
MIN_EFFECT = 0.10
# The largest process spread at which a +20% slowdown is flagged for sure (point 3 of the module
# docstring): (1 + 0.20) / (1 + MIN_EFFECT) - 1 = 1/11.
SLOWED_DETECTABLE_SPREAD = 1.20 / (1.0 + MIN_EFFECT) - 1.0


@dataclass(frozen=True)
class Verdict:
    p_value: float  # one-sided Mann-Whitney U, current > every baseline sample pooled
    effect: float  # median(current) / baseline_median_s - 1
    cliffs_delta: float  # P(current > baseline) - P(current < baseline), in [-1, 1]
    regressed: bool  # gated and p_value < alpha and effect > threshold
    alpha: float
    min_effect: float
    gated: bool  # False: the baseline reference is below floor_s, so the case is recorded, never flagged
    floor_s: float
    current_median_s: float
    baseline_median_s: float  # the reference: the median of the baseline processes' medians
    n_current: int
    n_baseline: int  # baseline samples, all processes
    threshold: float  # (1 + min_effect) * slowest process median / baseline_median_s - 1
    process_spread: float  # slowest / fastest process median - 1 (0 for one process)
    n_processes: int
    figure: str = "call"  # which samples were judged: "call" or "kernel" (perf.baseline.FIGURES)

    def describe(self) -> str:
        verdict = "REGRESSED" if self.regressed else "ok" if self.gated else "not gated (below the floor)"
        pooled = (f"; {self.n_processes} baseline processes spread {self.process_spread:.1%}"
                  if self.n_processes > 1 else "")
        return (f"{self.figure} time {verdict}: median {self.current_median_s * 1e3:.4g} ms vs baseline "
                f"{self.baseline_median_s * 1e3:.4g} ms ({self.effect:+.1%}, threshold +{self.threshold:.1%}"
                f"{pooled}); Mann-Whitney p = {self.p_value:.3g} (alpha {self.alpha}); "
                f"n = {self.n_current} vs {self.n_baseline}")


def _samples(name: str, values) -> np.ndarray:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of seconds, got {type(values).__name__}")
    if getattr(values, "dtype", None) == np.bool_ or any(isinstance(v, (bool, np.bool_)) for v in values):
        raise TypeError(f"{name} must be a sequence of seconds: it holds booleans")  # True would be 1 s
    if any(isinstance(v, (str, bytes)) or v is None for v in values):  # asarray reads "0.001" as a number
        raise TypeError(f"{name} must be a sequence of seconds (numbers): it holds strings or None")
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{name} must be a sequence of seconds (numbers): {exc}") from exc
    if array.ndim != 1 or array.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of seconds, got shape {array.shape}")
    if not np.all(np.isfinite(array)) or np.any(array <= 0):
        raise ValueError(f"{name} must hold positive, finite seconds")
    return array


def min_p_value(n: int, m: int) -> float:
    """The smallest one-sided p-value of the exact Mann-Whitney test with n and m samples (counts >= 1)."""
    for name, count in (("n", n), ("m", m)):
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
            raise TypeError(f"{name} must be a count of samples (an int), got {type(count).__name__}")
        if count < 1:
            raise ValueError(f"{name} must be >= 1, got {count}")
    return 1.0 / math.comb(int(n) + int(m), int(n))


def process_spread(medians: Sequence[float]) -> float:
    """``max / min - 1`` of per-process medians: how far one case moved between processes (0 for one)."""
    values = _samples("medians", medians)
    return float(values.max() / values.min() - 1.0)


def _check_fraction(name: str, value, upper: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not 0 < value < upper:
        raise ValueError(f"{name} must be in (0, {upper}), got {value}")
    return float(value)


def compare(current: Sequence[float], baseline: Sequence[float], *, alpha: float = ALPHA,
            min_effect: float = MIN_EFFECT, floor_s: float = 0.0) -> Verdict:
    """The verdict on ``current`` against a baseline measured in one process (module docstring)."""
    return compare_pooled(current, [_samples("baseline", baseline)], alpha=alpha, min_effect=min_effect,
                          floor_s=floor_s)


def compare_pooled(current: Sequence[float], processes: Sequence[Sequence[float]], *, alpha: float = ALPHA,
                   min_effect: float = MIN_EFFECT, floor_s: float = 0.0) -> Verdict:
    """The verdict on ``current`` against a baseline of ``processes``: one list of seconds per process
    (module docstring)."""
    cur = _samples("current", current)
    if isinstance(processes, (str, bytes)) or not isinstance(processes, Sequence) or not processes:
        raise TypeError(f"processes must be a non-empty sequence of per-process sample sequences, "
                        f"got {type(processes).__name__}")
    if any(isinstance(p, (int, float, np.floating)) for p in processes):
        raise TypeError("processes must hold one sequence of seconds per process, not seconds "
                        "(compare() takes a single process's samples)")
    runs = [_samples(f"processes[{i}]", p) for i, p in enumerate(processes)]
    alpha = _check_fraction("alpha", alpha, 1.0)
    min_effect = _check_fraction("min_effect", min_effect, math.inf)
    if isinstance(floor_s, bool) or not isinstance(floor_s, (int, float, np.integer, np.floating)):
        raise TypeError(f"floor_s must be a number of seconds, got {type(floor_s).__name__}")
    if not 0 <= floor_s < math.inf:
        raise ValueError(f"floor_s must be a finite number of seconds >= 0, got {floor_s!r}")
    pooled = np.concatenate(runs)
    floor = min_p_value(cur.size, pooled.size)
    if floor >= alpha:
        raise ValueError(f"current ({cur.size}) and baseline ({pooled.size}) samples are too few: the smallest "
                         f"p-value they allow is {floor:.3g}, not below alpha={alpha}")
    result = mannwhitneyu(cur, pooled, alternative="greater")
    p_value = float(result.pvalue)
    u = float(result.statistic)  # counts pairs current > baseline (+ half the ties)
    cliffs = 2.0 * u / (cur.size * pooled.size) - 1.0
    medians = [float(np.median(r)) for r in runs]
    reference, slowest = float(np.median(medians)), max(medians)
    cur_median = float(np.median(cur))
    effect = cur_median / reference - 1.0
    threshold = (1.0 + min_effect) * slowest / reference - 1.0
    gated = reference >= floor_s
    return Verdict(p_value=p_value, effect=effect, cliffs_delta=cliffs,
                   regressed=bool(gated and p_value < alpha and effect > threshold), alpha=alpha,
                   min_effect=min_effect, gated=bool(gated), floor_s=float(floor_s),
                   current_median_s=cur_median, baseline_median_s=reference,
                   n_current=int(cur.size), n_baseline=int(pooled.size), threshold=threshold,
                   process_spread=process_spread(medians), n_processes=len(runs))


def judge(current: Sequence[float], baseline: dict | None, case_id: str, *, figure: str = "call",
          alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> Verdict | None:
    """The verdict on one case's ``current`` samples of ``figure`` (``call`` or ``kernel``, module docstring)
    against a baseline document: its processes of that figure (``perf.baseline.baseline_processes``) and
    that figure's floor (``perf.baseline.gate_floor``); None when there is no baseline or it does not hold
    ``case_id``; ValueError when it holds the case without samples of ``figure``. What ``perf.run`` and
    the pytest benchmarks apply."""
    if figure not in FIGURES:
        raise ValueError(f"figure must be one of {FIGURES}, got {figure!r}")
    if baseline is None:
        return None
    # what judging reads, by kind (a list, a string or a null where an object belongs raised AttributeError later)
    if not isinstance(baseline, dict):
        raise TypeError(f"baseline must be a baseline document (an object) or None, got {type(baseline).__name__}")
    if not isinstance(baseline.get("benchmarks"), dict):
        raise TypeError(f"baseline 'benchmarks' must be an object, got {type(baseline.get('benchmarks')).__name__}")
    if not isinstance(baseline.get("settings", {}), (dict, type(None))):
        raise TypeError(f"baseline 'settings' must be an object, got {type(baseline['settings']).__name__}")
    entry = baseline["benchmarks"].get(case_id)
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise TypeError(f"baseline benchmarks[{case_id!r}] must be an object, got {type(entry).__name__}")
    try:
        processes = baseline_processes(entry, figure)
    except ValueError as exc:
        raise ValueError(f"{case_id}: {exc}") from None
    verdict = compare_pooled(current, processes, alpha=alpha, min_effect=min_effect,
                             floor_s=gate_floor(baseline, figure))
    return dataclasses.replace(verdict, figure=figure)


# --- calibration on recorded samples ----------------------------------------------------------


def calibration_processes(baseline: dict, calibration: dict) -> dict[str, list[list[float]]]:
    """For every case both documents hold, the samples of every recorded process: the baseline's
    processes first (``perf.baseline.baseline_processes``), then the calibration run's ``a1`` (its
    gate pass; that run is a later, separate process, so it must not be one of the baseline's)."""
    if not isinstance(calibration, dict) or not isinstance(calibration.get("cases"), dict):
        raise TypeError("calibration must be a perf.run --calibration document: an object whose 'cases' is an object "
                        f"of case id -> samples, got {type(calibration).__name__}")
    if calibration.get("device_key") != baseline.get("device_key"):
        raise ValueError(f"calibration is of device {calibration.get('device_key')!r}, the baseline of "
                         f"{baseline.get('device_key')!r}")
    settings = baseline.get("settings") or {}
    for name in ("suite", "rounds", "warmup", "batch", "inputs"):
        if name in settings and calibration.get(name) != settings[name]:
            raise ValueError(f"calibration {name} is {calibration.get(name)!r}, the baseline's {settings[name]!r}")
    for case_id, c in calibration["cases"].items():  # every case: a reader indexes a1, a2 and slowed
        _check_calibration_case(case_id, c)
    out = {}
    for case_id, c in calibration["cases"].items():
        entry = baseline["benchmarks"].get(case_id)
        if entry is None:
            continue
        processes = baseline_processes(entry)
        if any(list(c["a1"]) == list(p) for p in processes):
            raise ValueError(f"calibration {case_id}: a1 is one of the baseline's processes; the calibration "
                             f"run must be a separate process")
        out[case_id] = [list(p) for p in processes] + [list(c["a1"])]
    return out


CALIBRATION_SAMPLES = ("a1", "a2", "slowed")  # a perf.run --calibration case's sample lists


def _check_calibration_case(case_id, case) -> None:
    """ValueError naming the case and field unless ``case`` holds every ``CALIBRATION_SAMPLES`` list as non-empty
    positive, finite seconds (a missing or mistyped one was a bare KeyError or TypeError deep in the replay)."""
    if not isinstance(case, dict):
        raise ValueError(f"calibration cases[{case_id!r}] must be an object with {', '.join(CALIBRATION_SAMPLES)}, "
                         f"got {type(case).__name__}")
    for name in CALIBRATION_SAMPLES:
        samples = case.get(name)
        if not isinstance(samples, list) or not samples:
            raise ValueError(f"calibration cases[{case_id!r}].{name} must be a non-empty list of seconds, got "
                             f"{'nothing' if name not in case else repr(samples)}")
        for t in samples:
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < math.inf:
                raise ValueError(f"calibration cases[{case_id!r}].{name} must hold positive finite seconds, "
                                 f"got {t!r}")


@dataclass(frozen=True)
class Calibration:
    """What the gate does on recorded samples (``calibrate``); each dict maps case id -> Verdict."""

    gated: tuple[str, ...]  # the cases whose baseline reference is at least the floor
    n_processes: int  # recorded processes per case: the baseline's + the calibration run
    same_process: dict  # a2 vs a1 (one process)
    seen_process: dict  # a2 vs every recorded process (a2's own process among them)
    leave_one_out: list  # per recorded process i: its samples vs the pool of all the others
    single_pairs: list  # per ordered pair (i, j) of recorded processes: i vs j alone (the one-process rule)
    slowed: dict  # the +20% variant vs every recorded process (its own unchanged a1 among them)
    spread: dict  # process_spread over all the recorded processes of a case

    def flagged(self, verdicts: dict) -> dict:
        return {cid: v for cid, v in verdicts.items() if cid in self.gated and v.regressed}


def calibrate(baseline: dict, calibration: dict, *, alpha: float = ALPHA,
              min_effect: float = MIN_EFFECT) -> Calibration:
    """Replay ``calibration`` (a ``perf.run --calibration`` file of a later process) against ``baseline``."""
    floor_s = float((baseline.get("settings") or {}).get("gate_floor_s") or 0.0)
    processes = calibration_processes(baseline, calibration)
    if not processes:
        raise ValueError("calibration and baseline share no case")
    kw = {"alpha": alpha, "min_effect": min_effect, "floor_s": floor_s}
    counts = {len(p) for p in processes.values()}
    if len(counts) != 1:
        raise ValueError(f"cases hold different numbers of recorded processes: {sorted(counts)}")
    k = counts.pop()
    cases = calibration["cases"]
    reference = {cid: float(np.median([np.median(p) for p in procs[:-1]])) for cid, procs in processes.items()}
    gated = tuple(cid for cid in processes if reference[cid] >= floor_s)
    return Calibration(
        gated=gated, n_processes=k,
        same_process={cid: compare(cases[cid]["a2"], cases[cid]["a1"], **kw) for cid in processes},
        seen_process={cid: compare_pooled(cases[cid]["a2"], procs, **kw) for cid, procs in processes.items()},
        leave_one_out=[{cid: compare_pooled(procs[i], procs[:i] + procs[i + 1:], **kw)
                        for cid, procs in processes.items()} for i in range(k)],
        single_pairs=[{cid: compare(procs[i], procs[j], **kw) for cid, procs in processes.items()}
                      for i in range(k) for j in range(k) if i != j],
        slowed={cid: compare_pooled(cases[cid]["slowed"], procs, **kw) for cid, procs in processes.items()},
        spread={cid: process_spread([float(np.median(p)) for p in procs]) for cid, procs in processes.items()},
    )


def _report(cal: Calibration) -> str:
    lines = [f"calibration: {len(cal.gated)} gated cases, {cal.n_processes} recorded processes per case "
             f"(the baseline's, then the calibration run); rule: Mann-Whitney p < {ALPHA} and median > "
             f"(1 + {MIN_EFFECT}) x the slowest baseline process (perf/regression.py)"]

    def block(title: str, verdicts: dict, want: str) -> None:
        flagged = cal.flagged(verdicts)
        lines.append(f"{title}: {len(flagged)} of {len(cal.gated)} gated cases flagged (should be {want})")
        for cid, v in sorted(flagged.items()):
            lines.append(f"    FLAGGED {cid}: {v.describe()}")

    block("A/A in one process (a2 vs a1)", cal.same_process, "0")
    for i, verdicts in enumerate(cal.leave_one_out):
        block(f"A/A leave-one-process-out, process {i + 1} vs the pool of the other {cal.n_processes - 1}",
              verdicts, "0")
    pairs = sum(len(cal.flagged(v)) for v in cal.single_pairs)
    lines.append(f"one-process rule for comparison (every ordered pair of processes, {len(cal.single_pairs)} "
                 f"pairs): {pairs} flags in all")
    block("A/A of a process the pool holds (a2 vs all recorded processes)", cal.seen_process, "0")
    slowed = cal.flagged(cal.slowed)
    lines.append(f"+20% slowed vs all recorded processes: {len(slowed)} of {len(cal.gated)} gated cases flagged "
                 f"(should be all with process spread < {SLOWED_DETECTABLE_SPREAD:.1%})")
    for cid in sorted(set(cal.gated) - set(slowed)):
        lines.append(f"    missed {cid} (spread {cal.spread[cid]:.1%}): {cal.slowed[cid].describe()}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.regression",
                                     description="Replay a recorded calibration against a (pooled) baseline.")
    parser.add_argument("baseline", type=Path, help="a baseline document (perf/baselines/<key>.json or pooled)")
    parser.add_argument("calibration", type=Path, help="a perf.run --calibration file of a later process")
    args = parser.parse_args(argv)
    try:
        baseline = validate_baseline(read_document(args.baseline))
        cal = calibrate(baseline, read_document(args.calibration))
    except (KeyError, TypeError, ValueError) as exc:
        print(f"perf.regression: {exc}", file=sys.stderr)
        return 2
    print(_report(cal))
    bad = sum(len(cal.flagged(v)) for v in [cal.same_process, cal.seen_process, *cal.leave_one_out])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
