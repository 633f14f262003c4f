"""The pytest plugin every run inside a mutated copy loads (``-p mutants.pytest_plugin``).

* Hypothesis: the ``ci`` profile (or the one named by ``MLXGATE_MUTANT_PARENT``)
  with three changes. No example database: the shared one in ``.hypothesis/``
  stays untouched and no mutant's counterexample leaks into the next run.
  ``derandomize``: each property draws the same examples in the clean run and
  in every mutant's run, so a kill is reproducible and the clean check covers
  exactly the examples the mutants meet. No shrink phase: a mutant needs one
  failing example, not the minimal one (shrinking a stateful program costs
  seconds per mutant).
* Outcomes: written as JSON to the file ``MLXGATE_MUTANT_OUTCOMES`` names:
  ``{"passed", "failed", "skipped", "failed_ids", "exitstatus"}``;
  ``failed_ids`` are the node ids of the tests that failed (in any phase), and of
  the test modules that failed to collect, in order: the runner reads the killer
  there. ``slowest``: ``[nodeid, seconds]`` of the test whose phases took longest
  (setup + call + teardown), from which the runner derives its hang limit.
* Hangs: with ``MLXGATE_MUTANT_TEST_LIMIT`` (seconds) set, each test runs under
  ``faulthandler.dump_traceback_later(limit, exit=True)``, whose watchdog thread
  needs no GIL, so it fires even while a kernel that never returns holds the
  main thread in MLX's wait. It writes the test's node id, then Python's
  tracebacks, to ``<outcomes>.hang-<pid>`` and ends the process: the runner reads
  the node id there as the killer (under xdist the controller also reports the
  crashed worker's test as failed).
"""

from __future__ import annotations

import faulthandler
import json
import os

import pytest
from hypothesis import Phase, settings

PROFILE = "mutants"
PARENT_ENV = "MLXGATE_MUTANT_PARENT"
OUTCOMES_ENV = "MLXGATE_MUTANT_OUTCOMES"
TEST_LIMIT_ENV = "MLXGATE_MUTANT_TEST_LIMIT"
HANG_SUFFIX = ".hang-"  # <outcomes>.hang-<pid>: a watchdog's node id and tracebacks
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)


_OUTCOMES: dict = {}
_DURATIONS: dict[str, float] = {}
_WATCHDOG: list = []  # the armed test's hang file, open while the test runs


def pytest_configure(config):
    # conftest.py (loaded before this hook) has registered and loaded the suite's profiles.
    parent = settings.get_profile(os.environ.get(PARENT_ENV, "ci"))
    settings.register_profile(PROFILE, parent=parent, database=None, derandomize=True, phases=PHASES)
    settings.load_profile(PROFILE)
    _OUTCOMES.update(passed=0, failed=0, skipped=0, failed_ids=[])
    _DURATIONS.clear()


def _test_limit() -> float | None:
    text = os.environ.get(TEST_LIMIT_ENV)
    if not text:
        return None
    limit = float(text)
    if not limit > 0:
        raise ValueError(f"{TEST_LIMIT_ENV} must be a number of seconds > 0, got {text!r}")
    return limit


def hang_path(outcomes: str, pid: int) -> str:
    return f"{outcomes}{HANG_SUFFIX}{pid}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # A plain function hook returning None: pytest runs the test as always, the watchdog armed around it.
    limit, outcomes = _test_limit(), os.environ.get(OUTCOMES_ENV)
    if limit is None or not outcomes:
        return None
    handle = open(hang_path(outcomes, os.getpid()), "w")
    handle.write(item.nodeid + "\n")
    handle.flush()
    faulthandler.dump_traceback_later(limit, exit=True, file=handle)
    _WATCHDOG.append(handle)  # disarmed by pytest_runtest_logfinish
    return None


def pytest_runtest_logfinish(nodeid, location):
    if not _WATCHDOG:
        return
    faulthandler.cancel_dump_traceback_later()
    handle = _WATCHDOG.pop()
    handle.close()
    os.remove(handle.name)  # the test returned: nothing hung


def pytest_report_header(config):
    return [f"mutants: Hypothesis profile {PROFILE!r} ({os.environ.get(PARENT_ENV, 'ci')} without database, "
            "derandomized, no shrinking)"]


def pytest_collectreport(report):
    # A test module that no longer imports with the mutant in (a mutated constant its parametrization reads, a
    # dropped decorator it builds on) is a failure the suite reports: a kill, its module the killer. The clean check
    # runs the same modules on the unmutated tree, where they collect.
    if report.failed:
        _OUTCOMES["failed"] += 1
        if report.nodeid not in _OUTCOMES["failed_ids"]:
            _OUTCOMES["failed_ids"].append(report.nodeid)


def pytest_runtest_logreport(report):
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + float(getattr(report, "duration", 0.0))
    if report.failed:
        _OUTCOMES["failed"] += 1
        if report.nodeid not in _OUTCOMES["failed_ids"]:
            _OUTCOMES["failed_ids"].append(report.nodeid)
    elif report.skipped:
        _OUTCOMES["skipped"] += 1
    elif report.when == "call":
        _OUTCOMES["passed"] += 1


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(OUTCOMES_ENV)
    if path and not hasattr(session.config, "workerinput"):  # the xdist controller, or the only process
        with open(path, "w") as handle:
            slowest = max(_DURATIONS.items(), key=lambda kv: kv[1], default=None)
            json.dump({**_OUTCOMES, "slowest": list(slowest) if slowest else None, "exitstatus": int(exitstatus)},
                      handle)
