"""Calibration of the regression gate on recorded samples (deterministic: no timing happens here).

Two recordings of the H200 (MLX CUDA, 20 rounds of 8 calls), each a baseline plus the
calibration file of a LATER, separate ``python -m perf.run --gate --calibration`` process: per
case ``a1`` (its gate pass), ``a2`` (the same call timed again in that process: an A/A pair with
a1) and ``slowed`` (each call followed by a busy wait of 0.2 x median(a1): a deliberately slowed
variant). A case then has k + 1 recorded processes: the baseline's k, then a1.

* Pooled, k = 3 (``records/h200-calibration/pooled``; its README says how it was recorded):
  ``pool/p1-p3.json`` pooled exactly as ``perf/baselines/cuda-NVIDIA_H200.json`` was stored
  (``pool_documents``, floor 0.25 ms), and ``gate-run/calibration.json``. Read from the
  record folder, not from ``perf/baselines/``, so that re-baselining the device does not change
  what these tests replay.
* One process, k = 1 (``records/h200-calibration/single-process``: ``h200.json``, the H200
  baseline before pooling, and ``calibration.json``): the data that showed why one process is not
  enough.

``perf.regression.calibrate`` replays them (the tests below and ``python -m perf.regression
BASELINE CALIBRATION`` use the same code). What the gate must do (``perf/regression.py``:
Mann-Whitney p < 0.01 against the pooled samples AND median > 1.1 x the slowest baseline
process; the H200 floor 0.25 ms per call):

* A/A in one process: no gated case flags.
* A/A of a process the pool holds (a2 against every recorded process, a1 among them): none.
* A/A across processes, leave-one-process-out (each of the 4 recorded processes against the pool
  of the other 3): none; the one-process rule on the same pairs does flag (the reason for pools).
* +20% slowed: flagged wherever the derivation guarantees it (``perf/regression.py`` point 3),
  and that must be most cases. The recorded miss outside that guarantee is pinned as a finding.

Synthetic tests (seeded NumPy draws) pin the rule itself: a one-process pool is the
single-process rule, the threshold is relative to the slowest process, the false-flag rates the
module docstring quotes, both conditions are needed, and bad input is refused.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from perf.baseline import baseline_processes, pool_documents
from perf.regression import (ALPHA, MIN_EFFECT, SLOWED_DETECTABLE_SPREAD, calibrate, calibration_processes,
                             compare, compare_pooled, judge, min_p_value)
from perf.regression import main as regression_main

RECORDS = Path(__file__).resolve().parents[2] / "records" / "h200-calibration"
POOLED_RUN = RECORDS / "pooled"
# The single-process H200 run of 2026-11-29 (the baseline committed that day, before pooling).
SINGLE_PROCESS_RUN = RECORDS / "single-process"
H200 = "cuda-NVIDIA_H200"
# The H200's gate floor, 0.25 ms per call, with which both H200 baselines were stored (derivation:
# perf/RESULTS.md, "The floor").
H200_FLOOR_S = 0.25e-3


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def _pooled_baseline() -> dict:
    sources = [POOLED_RUN / "pool" / f"p{i}.json" for i in (1, 2, 3)]
    document = pool_documents([_read(p) for p in sources], [str(p) for p in sources])
    document["settings"]["gate_floor_s"] = H200_FLOOR_S  # what update --gate-floor-ms 0.25 stores
    return document


def _single_process_baseline() -> dict:
    document = _read(SINGLE_PROCESS_RUN / "h200.json")
    document["settings"]["gate_floor_s"] = H200_FLOOR_S
    return document


def _recording(baseline: dict, calibration: dict) -> dict:
    assert calibration["device_key"] == baseline["device_key"] == H200
    cal = calibrate(baseline, calibration)
    assert len(cal.gated) >= 20, "the calibration needs enough gated cases to mean something"
    return {"calibration": calibration, "baseline": baseline, "floor": baseline["settings"]["gate_floor_s"],
            "cal": cal}


@pytest.fixture(scope="module")
def h200():
    """The pooled recording: 3 baseline processes and the calibration run, 4 in all."""
    recording = _recording(_pooled_baseline(), _read(POOLED_RUN / "gate-run" / "calibration.json"))
    assert recording["cal"].n_processes == 4
    return recording


@pytest.fixture(scope="module")
def h200_one_process():
    """The one-process recording: the baseline of one process and the calibration run, 2 in all."""
    recording = _recording(_single_process_baseline(), _read(SINGLE_PROCESS_RUN / "calibration.json"))
    assert recording["cal"].n_processes == 2
    return recording


def _describe(verdicts: dict) -> dict:
    return {cid: v.describe() for cid, v in verdicts.items()}


# --- the recorded H200 samples ---------------------------------------------------------------


@pytest.mark.parametrize("recording", ["h200", "h200_one_process"])
def test_h200_aa_same_process_does_not_flag(recording, request):
    cal = request.getfixturevalue(recording)["cal"]
    assert not cal.flagged(cal.same_process), f"A/A pairs of an unchanged kernel flagged: " \
                                              f"{_describe(cal.flagged(cal.same_process))}"


@pytest.mark.parametrize("recording", ["h200", "h200_one_process"])
def test_h200_slowed_by_20_percent_is_flagged_in_its_own_process(recording, request):
    # a1 is the baseline here, so the floor applies to a1's median (gated: a1 at or above 0.25 ms).
    h200 = request.getfixturevalue(recording)
    gated = 0
    for cid, c in h200["calibration"]["cases"].items():
        verdict = compare(c["slowed"], c["a1"], floor_s=h200["floor"])
        assert c["slowdown"] == 0.2
        if not verdict.gated:
            continue
        gated += 1
        assert verdict.regressed, f"{cid}: a +20% variant was not flagged: {verdict.describe()}"
        assert verdict.p_value < ALPHA and verdict.effect > MIN_EFFECT
    assert gated >= 20, "the calibration needs enough gated cases to mean something"


def test_h200_below_the_floor_is_recorded_not_gated(h200):
    # Judged by the reference of the pool it is compared with: the slowed variant's pool holds all 4 processes,
    # so a case near the floor (gather_sdpa at N = 4k) can sit below it for the baseline's 3 and above for all 4.
    verdicts = h200["cal"].slowed
    below = {cid: v for cid, v in verdicts.items() if v.baseline_median_s < h200["floor"]}
    assert below, "the recording holds latency-bound cases below the floor"
    for cid, verdict in verdicts.items():
        assert verdict.gated is (cid not in below), cid
    for cid, verdict in below.items():
        assert not verdict.regressed, cid
        assert 0 <= verdict.p_value <= 1  # still measured and recorded


@pytest.mark.parametrize("recording", ["h200", "h200_one_process"])
def test_h200_aa_of_a_pooled_process_does_not_flag(recording, request):
    cal = request.getfixturevalue(recording)["cal"]
    flagged = cal.flagged(cal.seen_process)
    assert not flagged, f"a2 against a pool holding its own process flagged: {_describe(flagged)}"
    assert all(v.n_processes == cal.n_processes for v in cal.seen_process.values())


def test_h200_aa_across_processes_does_not_flag(h200):
    # 4 separate processes of one unchanged tree: each against the pool of the other 3.
    cal = h200["cal"]
    flagged = {f"process {i + 1}: {cid}": v.describe()
               for i, verdicts in enumerate(cal.leave_one_out) for cid, v in cal.flagged(verdicts).items()}
    assert len(cal.leave_one_out) == 4 and not flagged, f"cross-process A/A flagged: {flagged}"


def test_h200_one_process_baselines_flag_unchanged_kernels(h200, h200_one_process):
    # Why pools: the one-process rule (median > 1.1 x one baseline process) on the same unchanged processes
    # flags. The pooled recording: 15 flags over its 12 ordered pairs (6 cases, process shifts of +10% to +26%)
    # where the pools above flag none. The one-process recording: 2 of 25 gated cases, the shifts
    # perf/regression.py point 1 quotes.
    cal = h200["cal"]
    pairs = [cal.flagged(verdicts) for verdicts in cal.single_pairs]
    assert len(pairs) == 12 and sum(map(len, pairs)) == 15
    assert len(set().union(*pairs)) == 6
    old = h200_one_process["cal"]
    shifts = sorted(round(v.effect, 3) for v in old.flagged(old.leave_one_out[1]).values())
    assert len(old.gated) == 25 and shifts == [0.130, 0.156] and not old.flagged(old.leave_one_out[0])


def _slowed_premise(h200: dict) -> dict:
    """Per gated case: (spread, u, fastest). u = median(slowed) - slow_by_s, the slowed pass's median
    without its busy wait (the wait adds slow_by_s to every sample), fastest = the fastest recorded process."""
    processes = calibration_processes(h200["baseline"], h200["calibration"])
    cal, cases = h200["cal"], h200["calibration"]["cases"]
    return {cid: (cal.spread[cid], float(np.median(cases[cid]["slowed"])) - cases[cid]["slow_by_s"],
                  min(float(np.median(p)) for p in processes[cid])) for cid in cal.gated}


def test_h200_slowed_by_20_percent_is_flagged_against_the_pool(h200):
    # The slowed variant against every recorded process, its own unchanged a1 among them. perf/regression.py
    # point 3: with a1 and the slowed pass's unchanged median u both at or above the fastest recorded process m,
    # median(slowed) = u + 0.2 x a1 >= 1.2 m, which clears 1.1 x the slowest process when the process spread is
    # below 1.2 / 1.1 - 1 = 1/11; a1 >= m holds by construction (a1 is one of the processes), u >= m is checked.
    cal = h200["cal"]
    premise = _slowed_premise(h200)
    guaranteed = [cid for cid, (spread, u, fastest) in premise.items()
                  if spread < SLOWED_DETECTABLE_SPREAD and u >= fastest]
    missed = {cid: cal.slowed[cid].describe() for cid in guaranteed if not cal.slowed[cid].regressed}
    assert not missed, f"+20% not flagged against the pool: {missed}"
    # At least half the gated cases must keep that resolution; fewer would make the pool's spread the gate's
    # blind spot, a finding to report rather than a calibration. Recorded: 16 of 28.
    assert 2 * len(guaranteed) >= len(cal.gated), f"only {len(guaranteed)} of {len(cal.gated)} cases guaranteed"


def test_h200_finding_a_slowed_pass_faster_than_every_process_can_be_missed(h200):
    # A finding, not a tolerance: 22 of 28 gated cases spread less than 1/11 across the 4 processes, but in 6
    # of them the slowed pass itself ran faster than every recorded process (passes of one process drift by up
    # to 7%: a2 / a1 from 0.935 to 1.076), outside point 3's premise. 5 were flagged anyway; one was missed:
    # its pass ran 5.0% faster than the fastest process, so the +20% wait made it only 14.5% slower than a1
    # and 7.6% above the slowest process, under the 10% the rule asks (perf/RESULTS.md, "Calibration").
    cal = h200["cal"]
    premise = _slowed_premise(h200)
    narrow = {cid for cid, (spread, _, _) in premise.items() if spread < SLOWED_DETECTABLE_SPREAD}
    outside = {cid for cid in narrow if premise[cid][1] < premise[cid][2]}
    missed = {cid for cid in narrow if not cal.slowed[cid].regressed}
    assert (len(cal.gated), len(narrow), len(outside)) == (28, 22, 6)
    assert missed == {"multi_query/sdpa_causal[mlx]/16x8x8x256x32768/bfloat16"} and missed <= outside
    (cid,) = missed
    spread, u, fastest = premise[cid]
    assert u / fastest - 1 == pytest.approx(-0.050, abs=0.001)
    assert cal.slowed[cid].effect < cal.slowed[cid].threshold and cal.slowed[cid].p_value < ALPHA


def test_a_single_process_baseline_judges_as_before(h200_one_process):
    # Backward compatibility: an entry without process_samples_s (a run document, the H200 baseline of
    # 2026-11-29) is one process, and the pooled rule on it is the single-process rule, verdict for verdict.
    run, floor = h200_one_process["baseline"], h200_one_process["floor"]
    judged = 0
    for cid, c in h200_one_process["calibration"]["cases"].items():
        entry = run["benchmarks"].get(cid)
        if entry is None:
            continue
        assert "process_samples_s" not in entry and baseline_processes(entry) == [entry["samples_s"]]
        single = compare(c["a1"], entry["samples_s"], floor_s=floor)
        assert compare_pooled(c["a1"], baseline_processes(entry), floor_s=floor) == single
        judged += 1
    assert judged >= 20, "the run and the calibration share too few cases to mean something"


def test_judge_uses_the_baseline_processes_and_floor(h200):
    # What perf.run and the pytest benchmarks apply: compare_pooled against the entry's processes (not their
    # concatenation as one process) with the document's floor; None where the baseline lacks the case.
    baseline, cases = h200["baseline"], h200["calibration"]["cases"]
    for cid in h200["cal"].gated[:3]:
        processes = baseline_processes(baseline["benchmarks"][cid])
        verdict = judge(cases[cid]["a1"], baseline, cid)
        assert verdict == compare_pooled(cases[cid]["a1"], processes, floor_s=H200_FLOOR_S)
        assert verdict.n_processes == 3 and verdict.floor_s == H200_FLOOR_S
    assert judge(cases[cid]["a1"], baseline, "no/such[case]/1/bfloat16") is None
    assert judge(cases[cid]["a1"], None, cid) is None


def test_calibration_refuses_a_run_that_is_in_the_pool(h200):
    calibration = json.loads(json.dumps(h200["calibration"]))
    cid = next(iter(calibration["cases"]))
    calibration["cases"][cid]["a1"] = baseline_processes(h200["baseline"]["benchmarks"][cid])[0]
    with pytest.raises(ValueError, match="separate process"):
        calibration_processes(h200["baseline"], calibration)
    with pytest.raises(ValueError, match="device"):
        calibration_processes(h200["baseline"], {**calibration, "device_key": "cuda-Other"})
    with pytest.raises(ValueError, match="rounds"):
        calibration_processes(h200["baseline"], {**calibration, "rounds": 7})



@pytest.mark.parametrize("change, words", [
    (lambda c: c.pop("slowed"), ".slowed must be a non-empty list of seconds, got nothing"),
    (lambda c: c.update(a2="fast"), ".a2 must be a non-empty list of seconds, got 'fast'"),
    (lambda c: c.update(a1=[1e-3, float("nan")]), ".a1 must hold positive finite seconds, got nan"),
], ids=["no-slowed", "a2-str", "a1-nan"])
def test_a_malformed_calibration_case_is_refused_naming_case_and_field(h200, change, words):
    calibration = json.loads(json.dumps(h200["calibration"]))
    cid = next(iter(calibration["cases"]))
    change(calibration["cases"][cid])
    with pytest.raises(ValueError) as error:
        calibration_processes(h200["baseline"], calibration)
    assert f"cases[{cid!r}]{words}" in str(error.value)


@pytest.mark.parametrize("case, words", [(5, "cases['c'] must be an object"),
                                         ({"a1": 5}, "cases['c'].a1 must be a non-empty list")])
def test_the_command_names_a_malformed_calibration_case(tmp_path, capsys, case, words):
    # the regression CLI's messages were "'int' object is not subscriptable" / "... not iterable"
    baseline = {"schema": 1, "device_key": "cpu-Test", "settings": {},
                "benchmarks": {"c": {"benchmark": "b", "kernel": "k", "arm": "graph", "shape": [1], "dtype": "f",
                                     "bytes": 1, "flops": 1, "samples_s": [1e-3] * 3}}}
    (tmp_path / "b.json").write_text(json.dumps(baseline))
    (tmp_path / "c.json").write_text(json.dumps({"device_key": "cpu-Test", "cases": {"c": case}}))
    assert regression_main([str(tmp_path / "b.json"), str(tmp_path / "c.json")]) == 2
    assert words in capsys.readouterr().err

# --- the rule, on synthetic samples ----------------------------------------------------------


def _lognormal(seed: int, median: float, spread: float = 0.03, n: int = 20) -> np.ndarray:
    return median * np.exp(np.random.default_rng(seed).normal(0.0, spread, n))


@pytest.mark.parametrize("seed", range(5))
def test_same_distribution_does_not_flag(seed):
    verdict = compare(_lognormal(seed, 1e-3), _lognormal(100 + seed, 1e-3))
    assert not verdict.regressed, verdict.describe()


def test_one_process_pool_is_the_single_process_rule():
    base, current = _lognormal(1, 1e-3), _lognormal(2, 1.2e-3)
    single, pooled = compare(current, base), compare_pooled(current, [base])
    assert single == pooled and single.regressed
    assert single.threshold == pytest.approx(MIN_EFFECT) and single.process_spread == 0 and single.n_processes == 1


def test_threshold_is_relative_to_the_slowest_process():
    # Three tight processes at 1.00, 1.05 and 1.15 ms: reference 1.05 (the median process), slowest 1.15.
    processes = [_lognormal(10 + i, m, spread=0.002) for i, m in enumerate((1.00e-3, 1.05e-3, 1.15e-3))]
    inside = compare_pooled(_lognormal(20, 1.20e-3, spread=0.002), processes)  # +14% on the reference,
    assert inside.p_value < ALPHA and inside.effect > MIN_EFFECT          # significant and past 10%,
    assert not inside.regressed, inside.describe()                        # but within 10% of the slowest
    assert inside.threshold == pytest.approx(1.1 * 1.15 / 1.05 - 1, abs=0.01)
    assert inside.process_spread == pytest.approx(0.15, abs=0.01) and inside.n_processes == 3
    assert inside.baseline_median_s == pytest.approx(1.05e-3, rel=0.01) and inside.n_baseline == 60
    beyond = compare_pooled(_lognormal(21, 1.30e-3, spread=0.002), processes)  # > 1.1 x 1.15 = 1.265
    assert beyond.regressed and "3 baseline processes spread" in beyond.describe()


@pytest.mark.parametrize("spread, flagged", [(0.085, True), (0.10, False)])
def test_a_20_percent_slowdown_is_seen_below_a_spread_of_one_eleventh(spread, flagged):
    # perf/regression.py point 3: the worst case, a run at the pool's fastest process slowed by 20%:
    # 1.2 x fastest > 1.1 x slowest exactly when the spread is below 1.2 / 1.1 - 1 = 1/11.
    assert SLOWED_DETECTABLE_SPREAD == pytest.approx(1 / 11)
    processes = [_lognormal(30, 1e-3, spread=0.002), _lognormal(31, 1e-3 * (1 + spread), spread=0.002)]
    verdict = compare_pooled(_lognormal(32, 1.2e-3, spread=0.002), processes)
    assert verdict.regressed is flagged, verdict.describe()


def _false_flag_rates(process_effect, seed: int, trials: int = 1000) -> tuple[float, float]:
    """An unchanged kernel in 4 processes (each: a drawn process effect, 20 rounds of 1% noise): how often the
    4th flags against the 1st alone (one-process baseline) and against the pool of the first 3."""
    rng = np.random.default_rng(seed)
    single = pooled = 0
    for _ in range(trials):
        processes = [1e-3 * e * np.exp(rng.normal(0.0, 0.01, 20)) for e in process_effect(rng, 4)]
        single += compare(processes[3], processes[0]).regressed
        pooled += compare_pooled(processes[3], processes[:3]).regressed
    return single / trials, pooled / trials


# 4 binomial standard deviations of a rate p estimated from 1000 trials.
def _tolerance(p: float, trials: int = 1000) -> float:
    return 4 * (p * (1 - p) / trials) ** 0.5


def test_two_mode_process_effect_flags_far_less_with_a_pool():
    # The H200's worst cases look like two modes 15% apart. One baseline process: flagged when the baseline is
    # fast and the new run slow, 1/2 x 1/2. Three: only when all three are fast and the new one slow, 1/2^4.
    single, pooled = _false_flag_rates(lambda rng, k: np.where(rng.random(k) < 0.5, 1.15, 1.0), seed=0)
    assert single == pytest.approx(1 / 4, abs=_tolerance(1 / 4))
    assert pooled == pytest.approx(1 / 16, abs=_tolerance(1 / 16))
    assert pooled <= 1 / 4  # the distribution-free bound 1 / (k + 1)


def test_lognormal_process_effect_flags_far_less_with_a_pool():
    # Process effect log-normal, sigma 5%. One process: the log-ratio of two processes is N(0, 5% x sqrt 2), past
    # log 1.1 with probability 1 - Phi(log(1.1) / 0.0707) = 0.089. Three (the size condition simulated alone with
    # 200k draws): 0.013.
    single, pooled = _false_flag_rates(lambda rng, k: np.exp(rng.normal(0.0, 0.05, k)), seed=1)
    assert single == pytest.approx(0.089, abs=_tolerance(0.089))
    assert pooled == pytest.approx(0.013, abs=_tolerance(0.013))


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
    pooled = compare_pooled(base * 0.5, [base, base * 1.1])
    assert not pooled.regressed and pooled.p_value > 0.99


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
    # The count is of the pooled samples: processes of 3 and 2 rounds make 5, enough with 5 current rounds.
    assert not compare_pooled([1.0] * 5, [[1.0] * 3, [1.0] * 2]).regressed
    with pytest.raises(ValueError, match="too few"):
        compare_pooled([1.0] * 4, [[1.0] * 2, [1.0] * 2])


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


@pytest.mark.parametrize("processes, error, words", [
    ([], TypeError, "processes"),
    ([1.0] * 5, TypeError, "one sequence of seconds per process"),
    ([[1.0] * 5, []], ValueError, r"processes\[1\]"),
    ([[1.0] * 5, [1.0, 0.0]], ValueError, r"processes\[1\]"),
    ("fast", TypeError, "processes"),
], ids=["none", "flat", "empty-process", "zero", "str"])
def test_bad_processes_name_the_argument(processes, error, words):
    with pytest.raises(error, match=words):
        compare_pooled([1.0] * 5, processes)


def test_the_replay_command_prints_the_recorded_report(tmp_path, capsys):
    """``python -m perf.regression BASELINE CALIBRATION`` on the pooled recording prints what
    ``records/h200-calibration/pooled/replay.txt`` holds, line for line (its blocks, process numbers and misses),
    and exits 0: no A/A case is flagged there. (The record predates the judged figure's name in a verdict's
    description: "call time ok: ..." was "ok: ...".)"""
    from perf.regression import main

    baseline = tmp_path / "pooled.json"
    baseline.write_text(json.dumps(_pooled_baseline()))
    assert main([str(baseline), str(POOLED_RUN / "gate-run" / "calibration.json")]) == 0
    printed = [line.replace("): call time ", "): ") for line in capsys.readouterr().out.splitlines()]
    assert printed == (POOLED_RUN / "replay.txt").read_text().splitlines()


@pytest.mark.parametrize("name, value", [("alpha", 0.0), ("alpha", 1.0), ("alpha", 1.5), ("alpha", -0.01),
                                         ("min_effect", 0.0), ("min_effect", -0.1), ("min_effect", math.inf)])
def test_the_gate_refuses_an_alpha_or_effect_out_of_range(name, value):
    """alpha in (0, 1), min_effect in (0, inf): an edge or a value past it is refused, naming the argument."""
    with pytest.raises(ValueError, match=rf"{name} must be in \(0, "):
        compare_pooled([1.0, 1.1, 1.2], [[1.0, 1.1, 1.2]], **{name: value})


@pytest.mark.parametrize("baseline, words", [([1], "baseline must be"), ("doc", "baseline must be"),
                                             ({"benchmarks": None}, "'benchmarks' must be"),
                                             ({"benchmarks": {"c": {}}, "settings": "x"}, "'settings' must be"),
                                             ({"benchmarks": {"c": [1.0]}}, r"benchmarks\['c'\] must be")])
def test_judge_refuses_a_document_of_another_shape_by_name(baseline, words):
    """What judging reads is checked by kind first (these raised AttributeError inside it)."""
    with pytest.raises(TypeError, match=words):
        judge([1e-3] * 5, baseline, "c")


@pytest.mark.parametrize("call, error, words", [
    (lambda: compare(["0.001"] * 5, [1e-3] * 5), TypeError, "current must be"),
    (lambda: compare([1e-3] * 5, [None] * 5), TypeError, "baseline must be"),
    (lambda: compare([1e-3] * 5, [1e-3] * 5, floor_s="0"), TypeError, "floor_s must be"),
    (lambda: min_p_value(True, 3), TypeError, "^n must"),
    (lambda: min_p_value(3, 0), ValueError, "^m must"),
    (lambda: min_p_value(3.0, 3), TypeError, "^n must"),
], ids=["str samples", "None samples", "str floor", "bool count", "zero count", "float count"])
def test_bad_samples_and_counts_are_refused_by_kind(call, error, words):
    """A string sample was read as seconds, a bool as a count of 1: wrong kinds are TypeErrors naming the argument."""
    with pytest.raises(error, match=words):
        call()


def test_numpy_numbers_are_thresholds():
    """NumPy floats and ints are real numbers (they were refused as alpha / floor_s)."""
    samples = [1e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3]
    assert compare(samples, samples, alpha=np.float64(0.01), floor_s=np.float32(0.0)) == \
        compare(samples, samples, alpha=0.01, floor_s=0.0)
    assert compare(samples, samples, alpha=np.float32(0.25)).alpha == 0.25  # (exact in float32)
    assert min_p_value(np.int64(5), 5) == min_p_value(5, 5)


def test_a_baseline_median_at_the_floor_is_gated():
    """The floor reads "at least floor_s": a baseline whose median is exactly the floor is judged, so a 2x slowdown
    there regresses (a strict comparison left every case at the floor unjudged)."""
    baseline, current = [0.9, 0.95, 1.0, 1.05, 1.1], [2.0, 2.1, 2.2, 2.3, 2.4]
    at = compare(current, baseline, floor_s=1.0)
    assert at.baseline_median_s == 1.0 and at.gated and at.regressed
    above = compare(current, baseline, floor_s=math.nextafter(1.0, 2.0))
    assert not above.gated and not above.regressed
