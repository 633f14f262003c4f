"""pytest wiring of the Metal canary (``impl/canary.py``); conftest.py registers it.

* When the metal arm runs in this pytest run, the canary runs once per process
  (each xdist worker, or the only process), in the setup of the first
  metal-arm test, before that test's fixtures; its result is recorded
  (kind ``canary``, reports/SCHEMA.md).
* If it did not pass, every metal-arm test of the process FAILS with the
  canary's message, in its call phase before its body runs: results from a
  device that returns zeros or garbage must neither reach the report as
  gate records nor read as skips.
* When the metal arm does not run (no Metal, a paravirtual device, or
  ``--device cpu``), the process that owns the run records why, so the
  report says it in the same place.

A metal-arm test is one parametrized with ``arm="metal"`` (conftest.py's
arm parametrization, or an explicit ``parametrize("arm", ...)``).
"""

from __future__ import annotations

import pytest

from impl import arms, canary
from reports.recorder import append_record

RESULT_KEY = pytest.StashKey[canary.CanaryResult]()
STATUS_KEY = pytest.StashKey[arms.ArmStatus]()
FAILURE_KEY = pytest.StashKey[str]()


def metal_arm_status(config) -> arms.ArmStatus:
    """The metal arm's status for this run's device (conftest.py sets ``config.mlxgate_device``)."""
    if STATUS_KEY not in config.stash:
        device = getattr(config, "mlxgate_device", None) or arms.current_device_name()
        config.stash[STATUS_KEY] = arms.discover_arms(device)["metal"]
    return config.stash[STATUS_KEY]


def is_metal_item(item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("arm") == "metal"


def process_name(config) -> str:
    return getattr(config, "workerinput", {}).get("workerid", "main")


def run_canary(config) -> canary.CanaryResult:
    """The canary's result in this process: run and recorded the first time it is asked for."""
    if RESULT_KEY not in config.stash:
        result = canary.run_canary()
        config.stash[RESULT_KEY] = result
        append_record(result.record(where=process_name(config)))
    return config.stash[RESULT_KEY]


@pytest.hookimpl(trylast=True)  # after conftest.py's pytest_configure has reset the results file
def pytest_configure(config):
    if hasattr(config, "workerinput"):
        return
    status = metal_arm_status(config)
    if not status.available:
        append_record(canary.status_without_running(status.reason).record(where="run"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not is_metal_item(item) or not metal_arm_status(item.config).available:
        return  # an unavailable arm is conftest's skip, with its reason
    result = run_canary(item.config)
    if not result.ok:
        item.stash[FAILURE_KEY] = canary.failure_message(result)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    message = item.stash.get(FAILURE_KEY, None)
    if message:
        pytest.fail(message, pytrace=False)
