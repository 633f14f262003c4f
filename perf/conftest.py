"""Benchmark fixtures: the suite's cases as pytest-benchmark tests.

* ``--perf-suite auto|cpu|gpu|h200`` (default auto: the ``gpu`` grid on a GPU,
  ``cpu`` on the CPU) and ``--perf-rounds N`` choose what the ``test_bench_*``
  tests time; rounds and warm-up default to ``perf.run.SETTINGS`` (CPU: 7 after
  1, one call per round, which keeps the CPU perf tests within their budget in
  ``make test``; GPU: 20 rounds of 8 calls after 3).
* ``bench(case)`` times one case, a round being ``perf.harness.batched`` (the
  calls, one wait): through pytest-benchmark's
  ``benchmark.pedantic(round, rounds, warmup_rounds, iterations=1)`` (its samples
  are its per-round times, divided by the calls per round), or, when
  pytest-benchmark disabled itself (it does under pytest-xdist, as in
  ``make test``), with the same loop in
  ``perf.harness.time_call`` (run as the disabled fixture's one call). Either way
  every round ends in ``mx.eval`` (or torch's synchronize).
* ``serial``: True when no xdist worker shares the machine. Only serial
  measurements are judged against the baseline (concurrent tests would be
  measured too); ``make perf`` and ``make gate`` run serially.
"""

from __future__ import annotations

import os

import pytest

from perf.harness import Measurement, batched, time_call
from perf.run import SETTINGS, SUITES, resolve_suite


def pytest_addoption(parser):
    group = parser.getgroup("mlxgate perf")
    group.addoption("--perf-suite", choices=SUITES, default="auto", help="benchmark grid for perf/test_bench_*")
    group.addoption("--perf-rounds", type=int, default=None, help="timed rounds per benchmark")


@pytest.fixture(scope="session")
def perf_settings(pytestconfig) -> dict:
    suite = resolve_suite(pytestconfig.getoption("--perf-suite"))
    rounds, warmup, batch = SETTINGS[suite]
    return {"suite": suite, "rounds": pytestconfig.getoption("--perf-rounds") or rounds, "warmup": warmup,
            "batch": batch}


@pytest.fixture(scope="session")
def serial() -> bool:
    return "PYTEST_XDIST_WORKER" not in os.environ


@pytest.fixture
def bench(benchmark, perf_settings):
    def measure(case) -> Measurement:
        rounds, warmup, batch = perf_settings["rounds"], perf_settings["warmup"], perf_settings["batch"]
        call = batched(case.build(), case.runtime, batch)
        if getattr(benchmark, "disabled", False):
            # pytest-benchmark calls the target once, untimed: that call is our own timing loop.
            samples = benchmark.pedantic(time_call, args=(call,), kwargs={"rounds": rounds, "warmup": warmup})
        else:
            benchmark.extra_info.update(case=case.id, bytes=case.bytes, flops=case.flops)
            benchmark.pedantic(call, rounds=rounds, warmup_rounds=warmup, iterations=1)
            samples = list(benchmark.stats.stats.data)
        return Measurement(case, tuple(t / batch for t in samples))

    return measure
