"""Suite-wide configuration: Hypothesis profiles, the device, kernel arms, the gate fixture.

* Hypothesis profiles ``dev`` (25 examples), ``ci`` (100, no deadline, print_blob,
  on-disk example database so past failures replay first) and ``thorough``
  (1000). Choose with ``--hypothesis-profile NAME`` or ``MLXGATE_PROFILE=NAME``;
  ``CI=true`` selects ``ci``; otherwise ``dev``.
* ``--device cpu|gpu`` (default: gpu where MLX has one, else cpu) becomes MLX's
  default device for the whole run.
* Arms: any test with an ``arm`` argument runs once per arm in ``impl.arms.ARMS``;
  an arm this machine cannot run is a skip whose reason names it.
* ``gate``: a ``parity.gates.Gate`` bound to the test id and its ``arm``; every
  call is recorded in ``reports/out/results.jsonl``. ``make_gate`` builds gates
  with another sink (meta tests use it so deliberate failures stay out of the
  results).
"""

from __future__ import annotations

import os
import platform
import sys
import time

import pytest
from hypothesis import HealthCheck, Verbosity, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from impl import arms as arm_registry
from parity.gates import Gate
from reports import recorder
from reports.environment import run_context

# The Metal canary runs before the first metal-arm test and fails them if the device is broken (impl/canary.py).
pytest_plugins = ("impl.canary_plugin",)

HYPOTHESIS_DB = DirectoryBasedExampleDatabase(os.path.join(os.path.dirname(__file__), ".hypothesis", "examples"))
_SLOW_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("dev", max_examples=25, deadline=None, database=HYPOTHESIS_DB,
                          suppress_health_check=_SLOW_DATA)
settings.register_profile("ci", max_examples=100, deadline=None, print_blob=True, database=HYPOTHESIS_DB,
                          suppress_health_check=_SLOW_DATA, derandomize=False)
settings.register_profile("thorough", max_examples=1000, deadline=None, print_blob=True, database=HYPOTHESIS_DB,
                          suppress_health_check=_SLOW_DATA, verbosity=Verbosity.normal)


PROFILES = ("dev", "ci", "thorough")


def chosen_profile(environ=os.environ) -> str:
    if environ.get("MLXGATE_PROFILE"):
        if environ["MLXGATE_PROFILE"] not in PROFILES:
            raise pytest.UsageError(f"MLXGATE_PROFILE must be one of {PROFILES}, got {environ['MLXGATE_PROFILE']!r}")
        return environ["MLXGATE_PROFILE"]
    return "ci" if environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"


settings.load_profile(chosen_profile())


def pytest_addoption(parser):
    group = parser.getgroup("mlxgate")
    group.addoption("--device", choices=arm_registry.DEVICES, default=None,
                    help="MLX device for the run (default: gpu where MLX has one, else cpu)")
    group.addoption("--matrix-ring", type=int, default=None, metavar="SLOTS",
                    help="run paged attention's matrix partial with its ring fetch on the cuda arm "
                         "(impl.paged_attention.set_matrix_ring; default: the package's MATRIX_RING)")


def pytest_configure(config):
    device = config.getoption("--device") or arm_registry.default_device_name()
    try:
        arm_registry.use_device(device)
    except ValueError as exc:  # --device gpu on a machine without one: a usage error, not an internal one
        raise pytest.UsageError(f"--device {device}: {exc}") from None
    config.mlxgate_device = device
    ring = config.getoption("--matrix-ring")
    if ring is not None:  # every process of the run (xdist workers load this file too) takes the same fetch
        import impl.paged_attention as paged

        try:
            paged.set_matrix_ring(ring)
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(f"--matrix-ring {ring}: {exc}") from None
    if not hasattr(config, "workerinput"):  # the xdist controller, or a plain run
        recorder.reset()
        recorder.append_record(environment_record(device))


def _matrix_ring() -> int:
    """The paged matrix partial's ring slots this run's cuda arm takes (``--matrix-ring``; 0: register loads)."""
    import impl.paged_attention as paged

    return paged.MATRIX_RING


def environment_record(device: str) -> dict:
    import mlx.core as mx
    import numpy
    import scipy

    import hypothesis

    statuses = arm_registry.discover_arms(device)
    return {
        "kind": "environment",
        "time": time.time(),
        "device": device,
        "mlx": mx.__version__,
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "hypothesis": hypothesis.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "profile": settings._current_profile,
        "matrix_ring": _matrix_ring(),
        "arms": {name: {"available": s.available, "reason": s.reason} for name, s in statuses.items()},
        **run_context(),  # os, date, mlx_backend, torch, git commit/dirty (reports/environment.py)
    }


def pytest_report_header(config):
    statuses = arm_registry.discover_arms(config.mlxgate_device)
    ran = ", ".join(n for n, s in statuses.items() if s.available)
    skipped = "; ".join(f"{n}: {s.reason}" for n, s in statuses.items() if not s.available)
    return [f"mlxgate: device={config.mlxgate_device} profile={settings._current_profile} arms=[{ran}]"
            + (f" skipped=[{skipped}]" if skipped else "")]


def slow_seconds(item) -> float | None:
    """The measured cost a ``slow`` mark states (``slow(seconds=N)``), 0 when it states none; None if not slow."""
    mark = item.get_closest_marker("slow")
    if mark is None:
        return None
    seconds = mark.kwargs.get("seconds", 0)
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < 0:
        raise pytest.UsageError(f"{item.nodeid}: slow(seconds=) must be a number of seconds >= 0, got {seconds!r}")
    return float(seconds)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The slow tests first, longest first, the rest in collection order. xdist hands the pending tests out one per
    worker in turn from the front, so the longest start at once, on different workers, and the short ones fill in
    around them: on 2 cores the suite's tail was one 150 s nvcc test started late, alone."""
    costs = {id(item): slow_seconds(item) for item in items}
    items.sort(key=lambda item: (costs[id(item)] is None, -(costs[id(item)] or 0.0)))


def pytest_generate_tests(metafunc):
    if "arm" not in metafunc.fixturenames:
        return
    if any(m.name == "parametrize" and "arm" in m.args[0] for m in metafunc.definition.iter_markers()):
        return
    only = metafunc.definition.get_closest_marker("arms")
    wanted = only.args if only else arm_registry.ARMS
    statuses = arm_registry.discover_arms(metafunc.config.mlxgate_device)
    params = []
    for name in wanted:
        status = statuses[name]
        marks = () if status.available else (pytest.mark.skip(reason=f"arm {name}: {status.reason}"),)
        params.append(pytest.param(name, id=name, marks=marks))
    metafunc.parametrize("arm", params)


@pytest.fixture
def gate(request) -> Gate:
    callspec = getattr(request.node, "callspec", None)
    arm = callspec.params.get("arm") if callspec else None
    return Gate(test_id=request.node.nodeid, arm=arm)


@pytest.fixture
def make_gate(request):
    """Factory: ``make_gate(sink=records.append)`` gives a Gate writing elsewhere."""

    def build(sink=None, **context) -> Gate:
        g = Gate(test_id=request.node.nodeid, **context)
        return g if sink is None else Gate(test_id=g.test_id, kernel=g.kernel, arm=g.arm, sink=sink)

    return build
