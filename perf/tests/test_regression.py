"""Calibration of the regression gate on recorded samples (deterministic: no timing happens here).

Fixture ``fixtures/cuda-NVIDIA_H200.json``: real samples from the NVIDIA H200
(``perf/runs/2026-11-29-h200/2-batched``, MLX CUDA, 20 rounds of 8 calls),
recorded by ``python -m perf.run --gate --calibration``: for each of 35 cases,
``a1`` (the gate's pass), ``a2`` (the same call timed again in the same
process: an A/A pair with a1) and ``slowed`` (the call plus a busy wait of
20% of a1's median: a deliberately slowed variant). The committed H200
baseline (``perf/baselines/cuda-NVIDIA_H200.json``) was measured by another
process just before, so baseline vs a1 is a cross-process A/A pair, the
comparison ``make gate`` makes.

What the gate must do (``perf/regression.py``, alpha 0.01, minimum effect 10%,
the H200 baseline's floor 0.25 ms per call):

* A/A in one process: no gated case flags.
* +20% slowed: every gated case flags.
* A/A across processes: should not flag, but does for 2 of the gated cases
  (a 13% and a 16% median shift between two processes): ``xfail(strict=True)``
  below, and ``perf/RESULTS.md`` says what it means for ``make gate``.

Synthetic tests (seeded NumPy draws) pin the rule itself: both conditions are
needed, and too few samples are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perf.baseline import load_baseline
from perf.regression import ALPHA, MIN_EFFECT, compare, min_p_value

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H200 = "cuda-NVIDIA_H200"


@pytest.fixture(scope="module")
def h200():
    calibration = json.loads((FIXTURES / f"{H200}.json").read_text())
    baseline = load_baseline(H200)
    assert calibration["device_key"] == H200 and baseline is not None
    floor = baseline["settings"]["gate_floor_s"]
    gated = {cid: c for cid, c in calibration["cases"].items() if np.median(c["a1"]) >= floor}
    assert len(gated) >= 20, "the calibration needs enough gated cases to mean something"
    return {"calibration": calibration, "baseline": baseline, "floor": floor, "gated": gated}


# --- the recorded H200 samples ---------------------------------------------------------------


def test_h200_aa_same_process_does_not_flag(h200):
    flagged = {cid: compare(c["a2"], c["a1"], floor_s=h200["floor"]).describe()
               for cid, c in h200["gated"].items() if compare(c["a2"], c["a1"], floor_s=h200["floor"]).regressed}
    assert not flagged, f"A/A pairs of an unchanged kernel flagged: {flagged}"


def test_h200_slowed_by_20_percent_is_flagged(h200):
    for cid, c in h200["gated"].items():
        verdict = compare(c["slowed"], c["a1"], floor_s=h200["floor"])
        assert c["slowdown"] == 0.2
        assert verdict.regressed, f"{cid}: a +20% variant was not flagged: {verdict.describe()}"
        assert verdict.p_value < ALPHA and verdict.effect > MIN_EFFECT


def test_h200_below_the_floor_is_recorded_not_gated(h200):
    below = {cid: c for cid, c in h200["calibration"]["cases"].items() if cid not in h200["gated"]}
    assert below, "the fixture holds latency-bound cases below the floor"
    for cid, c in below.items():
        verdict = compare(c["slowed"], c["a1"], floor_s=h200["floor"])
        assert not verdict.gated and not verdict.regressed, cid
        assert 0 <= verdict.p_value <= 1  # still measured and recorded


@pytest.mark.xfail(strict=True, reason="measured: 2 of the H200's gated cases shift 13% and 16% between two "
                                       "processes (perf/RESULTS.md, 'Calibration'); a cross-process A/A can flag")
def test_h200_aa_across_processes_does_not_flag(h200):
    flagged = {}
    for cid, c in h200["gated"].items():
        verdict = compare(c["a1"], h200["baseline"]["benchmarks"][cid]["samples_s"], floor_s=h200["floor"])
        if verdict.regressed:
            flagged[cid] = verdict.describe()
    assert not flagged, f"cross-process A/A flagged: {flagged}"


# --- the rule, on synthetic samples ----------------------------------------------------------


def _lognormal(seed: int, median: float, spread: float = 0.03, n: int = 20) -> np.ndarray:
    return median * np.exp(np.random.default_rng(seed).normal(0.0, spread, n))


@pytest.mark.parametrize("seed", range(5))
def test_same_distribution_does_not_flag(seed):
    verdict = compare(_lognormal(seed, 1e-3), _lognormal(100 + seed, 1e-3))
    assert not verdict.regressed, verdict.describe()


def test_both_conditions_are_needed():
    base = _lognormal(1, 1e-3, spread=0.01)
    small = compare(_lognormal(2, 1.05e-3, spread=0.01), base)  # significant, but 5% < 10%
    assert small.p_value < ALPHA and not small.regressed
    noisy_base, noisy = _lognormal(3, 1e-3, spread=0.8, n=6), _lognormal(4, 1.15e-3, spread=0.8, n=6)
    noisy_verdict = compare(noisy, noisy_base)  # a larger median by chance, not significant
    assert noisy_verdict.p_value >= ALPHA and not noisy_verdict.regressed
    big = compare(base * 1.2, base)
    assert big.regressed and big.effect == pytest.approx(0.2) and big.cliffs_delta == 1.0


def test_faster_is_never_a_regression():
    base = _lognormal(5, 1e-3)
    verdict = compare(base * 0.5, base)
    assert not verdict.regressed and verdict.effect == pytest.approx(-0.5) and verdict.p_value > 0.99


def test_floor_disables_the_gate_below_it():
    base = _lognormal(6, 1e-4)
    assert compare(base * 1.5, base).regressed
    verdict = compare(base * 1.5, base, floor_s=2.5e-4)
    assert not verdict.gated and not verdict.regressed and verdict.effect == pytest.approx(0.5)


def test_too_few_samples_are_refused():
    assert min_p_value(5, 5) == 1 / 252 < ALPHA
    assert min_p_value(4, 4) == 1 / 70 > ALPHA
    with pytest.raises(ValueError, match="too few"):
        compare([1.0] * 4, [1.0] * 4)
    assert not compare([1.0] * 5, [1.0] * 5).regressed  # ties: p = 1 for equal samples


@pytest.mark.parametrize("kwargs, error, words", [
    ({"current": [], "baseline": [1.0] * 5}, ValueError, "current"),
    ({"current": [1.0] * 5, "baseline": [1.0, -1.0, 1.0, 1.0, 1.0]}, ValueError, "baseline"),
    ({"current": [1.0] * 4 + [float("nan")], "baseline": [1.0] * 5}, ValueError, "current"),
    ({"current": "fast", "baseline": [1.0] * 5}, TypeError, "current"),
    ({"current": [1.0] * 5, "baseline": [1.0] * 5, "alpha": 0}, ValueError, "alpha"),
    ({"current": [1.0] * 5, "baseline": [1.0] * 5, "min_effect": -0.1}, ValueError, "min_effect"),
    ({"current": [1.0] * 5, "baseline": [1.0] * 5, "floor_s": -1.0}, ValueError, "floor_s"),
], ids=["empty", "negative", "nan", "str", "alpha", "min-effect", "floor"])
def test_bad_input_names_the_argument(kwargs, error, words):
    with pytest.raises(error, match=words):
        compare(**kwargs)
