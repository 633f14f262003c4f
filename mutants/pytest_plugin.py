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
  there.
"""

from __future__ import annotations

import json
import os

from hypothesis import Phase, settings

PROFILE = "mutants"
PARENT_ENV = "MLXGATE_MUTANT_PARENT"
OUTCOMES_ENV = "MLXGATE_MUTANT_OUTCOMES"
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)


_OUTCOMES: dict = {}


def pytest_configure(config):
    # conftest.py (loaded before this hook) has registered and loaded the suite's profiles.
    parent = settings.get_profile(os.environ.get(PARENT_ENV, "ci"))
    settings.register_profile(PROFILE, parent=parent, database=None, derandomize=True, phases=PHASES)
    settings.load_profile(PROFILE)
    _OUTCOMES.update(passed=0, failed=0, skipped=0, failed_ids=[])


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
            json.dump({**_OUTCOMES, "exitstatus": int(exitstatus)}, handle)
