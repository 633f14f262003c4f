"""Every benchmark of the device's suite as a pytest-benchmark test, each leaving a perf record.

One test per case of ``perf.run.suite_groups(--perf-suite)`` (the CPU grid on
the CPU, the GPU grid on a GPU): time it (``perf/conftest.py``'s ``bench``),
append its perf record (``reports/SCHEMA.md``: median, IQR, bytes, FLOPs, GB/s,
% of the copy bandwidth measured once per pytest run) to the run's results, and,
when the run is serial and this device key has a baseline holding the case,
judge it with the regression gate as ``perf.run`` does
(``perf.regression.judge``: against the baseline's processes, kept apart in a
pooled baseline, and its floor) and fail on a regression. Under pytest-xdist
(``make test``) the record is written without a verdict: a concurrent
measurement is not evidence of a regression.
"""

from __future__ import annotations

import pytest

from perf.bandwidth import copy_bandwidth
from perf.baseline import device_key, load_baseline
from perf.harness import perf_record
from perf.regression import judge
from perf.run import SETTINGS, check_comparable, effective_inputs, suite_groups
from reports.recorder import append_record

_GROUPS: dict[str, list] = {}  # suite -> groups (built once per process; inputs are lazy)


def _groups(suite: str):
    if suite not in _GROUPS:
        # a round's calls each on their own input set, as perf.run's default (--inputs distinct)
        _GROUPS[suite] = list(suite_groups(suite, copies=SETTINGS[suite][2]))
    return _GROUPS[suite]


def pytest_generate_tests(metafunc):
    if "case_id" in metafunc.fixturenames:
        from perf.run import resolve_suite

        suite = resolve_suite(metafunc.config.getoption("--perf-suite"))
        ids = [case.id for group in _groups(suite) for case in group.cases]
        metafunc.parametrize("case_id", ids, ids=ids)


@pytest.fixture(scope="session")
def copy_gbps() -> float:
    return copy_bandwidth().gbps


@pytest.fixture(scope="session")
def stored_baseline(perf_settings):
    """This device's baseline, or None when it was measured with other settings (then nothing is judged:
    perf.run refuses such a baseline the same way)."""
    stored = load_baseline(device_key())
    try:
        check_comparable(stored, perf_settings["batch"], "eval", "distinct")
    except ValueError:
        return None
    return stored


def test_bench(case_id, bench, perf_settings, serial, copy_gbps, stored_baseline):
    groups = _groups(perf_settings["suite"])
    group = next(g for g in groups if any(c.id == case_id for c in g.cases))
    case = next(c for c in group.cases if c.id == case_id)
    try:
        measurement = bench(case)
        sets = len(group.inputs())  # built by the case's launch (before release drops them)
    finally:
        if case is group.cases[-1]:  # the group's last case: free its inputs
            group.release()
    verdict = judge(measurement.samples_s, stored_baseline, case_id) if serial else None
    record = perf_record(measurement, copy_gbps=copy_gbps, device_key=device_key(), verdict=verdict,
                         batch=perf_settings["batch"], inputs=effective_inputs("distinct", perf_settings["batch"]),
                         input_sets=sets)
    append_record(record)
    assert record["median_s"] > 0 and record["gbps"] > 0, f"{case_id}: {record}"
    if verdict is not None and verdict.regressed:
        pytest.fail(f"{case_id} regressed against perf/baselines/{device_key()}.json: {verdict.describe()}")
