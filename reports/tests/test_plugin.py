"""reports.plugin in a real pytest run (a subprocess on a small sample suite), plain and under xdist."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SAMPLE = '''
import pytest
from hypothesis import given, settings, strategies as st


@settings(database=None, print_blob=True, max_examples=50)
@given(st.integers())
def test_small(x):
    assert x < 10  # the minimal failing example is always x=10


@settings(database=None, max_examples=30)
@given(st.lists(st.integers()))
def test_sort_is_idempotent(xs):
    assert sorted(sorted(xs)) == sorted(xs)


@pytest.mark.parametrize("arm", [
    "graph", pytest.param("metal", marks=pytest.mark.skip(reason="arm metal: no Metal device"))])
def test_arm(arm):
    assert arm == "graph"


@pytest.mark.xfail(reason="documents a known gap", strict=True)
def test_known_gap():
    assert False


@pytest.fixture
def broken():
    raise RuntimeError("this fixture is known broken")


@pytest.mark.xfail(reason="its fixture is known broken", strict=True)
def test_known_broken_fixture(broken):
    pass


@pytest.mark.xfail(reason="a known property gap", strict=True)
@settings(database=None, max_examples=50)
@given(st.integers())
def test_known_property_gap(x):
    assert x < 10
'''
OTHER = '''
def test_one():
    pass


def test_two():
    pass
'''
EXPECTED_OUTCOMES = {
    "test_sample.py::test_small": "failed",
    "test_sample.py::test_sort_is_idempotent": "passed",
    "test_sample.py::test_arm[graph]": "passed",
    "test_sample.py::test_arm[metal]": "skipped",
    "test_sample.py::test_known_gap": "xfailed",
    "test_sample.py::test_known_broken_fixture": "xfailed",  # at setup: an xfail still, not a skip
    "test_sample.py::test_known_property_gap": "xfailed",
    "test_other.py::test_one": "passed",
    "test_other.py::test_two": "passed",
}


def run_pytest(cwd: Path, *args: str, env_extra: dict | None = None) -> tuple[subprocess.CompletedProcess, list]:
    results = cwd / f"results-{len(list(cwd.glob('results-*')))}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLXGATE_RESULTS": str(results), **(env_extra or {})}
    # CI=true makes Hypothesis load its own "ci" profile (derandomize: no seed to replay).
    for name in ("CI", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    return done, records


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_sample.py").write_text(SAMPLE)
    (root / "test_other.py").write_text(OTHER)
    return root


_RUNS: dict[tuple[Path, str], tuple] = {}


def sample_run(sample: Path, mode: str) -> tuple[subprocess.CompletedProcess, list]:
    """The sample suite run once per mode and process, as `make gate` runs the suite."""
    if (sample, mode) not in _RUNS:
        _RUNS[sample, mode] = run_pytest(sample, "-p", "reports.plugin", *(["-n", "2"] if mode == "xdist" else []))
    return _RUNS[sample, mode]


@pytest.fixture(params=["plain", "xdist"])
def gate_run(request, sample):
    return sample_run(sample, request.param)


def test_one_test_record_per_test_with_its_outcome(gate_run):
    done, records = gate_run
    assert done.returncode == 1, done.stdout[-2000:]
    tests = [r for r in records if r["kind"] == "test"]
    assert {t["nodeid"]: t["outcome"] for t in tests} == EXPECTED_OUTCOMES
    assert len(tests) == len(EXPECTED_OUTCOMES)  # written once: by the controller, not also by workers
    by_id = {t["nodeid"]: t for t in tests}
    assert by_id["test_sample.py::test_arm[metal]"]["skip_reason"] == "arm metal: no Metal device"
    failed = by_id["test_sample.py::test_small"]
    assert failed["when"] == "call" and "assert 10 < 10" in failed["message"]
    assert all(t["duration"] >= 0 for t in tests)


def test_property_records_carry_hypothesis_statistics(gate_run):
    _, records = gate_run
    props = {r["nodeid"]: r for r in records if r["kind"] == "property"}
    assert set(props) == {"test_sample.py::test_small", "test_sample.py::test_sort_is_idempotent",
                          "test_sample.py::test_known_property_gap"}
    known = props["test_sample.py::test_known_property_gap"]  # xfailed, not "passed": its example is kept
    assert known["outcome"] == "xfailed" and known["failure"]["examples"] == ["test_known_property_gap(\n    x=10,\n)"]
    passing = props["test_sample.py::test_sort_is_idempotent"]
    assert passing["outcome"] == "passed" and passing["failure"] is None
    assert passing["examples"] == 30  # max_examples, all valid
    assert passing["stopped_because"] == "settings.max_examples=30"
    assert passing["phases"]["generate"]["valid"] + passing["phases"].get("explicit", {}).get("valid", 0) <= 30
    failing = props["test_sample.py::test_small"]
    assert failing["outcome"] == "failed" and failing["failing"] >= 1 and failing["shrinks"] >= 1
    failure = failing["failure"]
    assert failure["examples"] == ["test_small(\n    x=10,\n)"]
    assert failure["hypothesis_version"] and failure["blob"] and isinstance(failure["seed"], int)
    assert len(failure["commands"]) == 2


def test_progress_line_per_module(gate_run):
    done, _ = gate_run
    lines = [line for line in done.stdout.splitlines() if line.startswith("mlxgate: ")]
    assert len(lines) == 2, done.stdout
    assert any(line.startswith("mlxgate: test_other.py  2 passed, 0 failed, 0 skipped") for line in lines)
    assert any(line.startswith("mlxgate: test_sample.py  2 passed, 1 failed, 1 skipped, 3 xfailed") for line in lines)


def test_replay_commands_reproduce_the_failure(sample):
    """Both copy-paste commands of the record replay the same minimal example."""
    _, records = sample_run(sample, "plain")
    (failing,) = [r for r in records if r["kind"] == "property" and r["failure"] and r["outcome"] == "failed"]
    for command in failing["failure"]["commands"]:
        words = shlex.split(command)
        env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-") and "::" not in w)
        argv = [w for w in words if w not in {f"{k}={v}" for k, v in env.items()}]
        assert argv[:3] == [".venv/bin/python", "-m", "pytest"]
        done, _ = run_pytest(sample, *argv[3:], env_extra=env)
        assert done.returncode == 1, command
        assert "x=10," in done.stdout and "1 failed" in done.stdout, command


def test_malformed_reproduce_argument_is_refused(sample):
    done, _ = run_pytest(sample, "-p", "reports.plugin", "--mlxgate-reproduce=no-colon", "test_other.py")
    assert done.returncode == 4 and "--mlxgate-reproduce wants VERSION:BLOB" in done.stderr


FALSIFIED = '''
import numpy as np
from hypothesis import given, settings, strategies as st

from parity.gates import Gate


@settings(database=None, max_examples=100)
@given(st.integers(0, 1000))
def test_capped(n):
    gate = Gate(test_id="test_falsified.py::test_capped", kernel="toy")
    gate.equal(np.array([n]), np.array([min(n, 9)]), what="values above 9 are capped", case=f"n={n}")
'''


def test_a_falsified_property_counts_its_minimal_example_once(tmp_path):
    """Hypothesis reruns the gate on every example it tries while shrinking: one failure is counted, all are kept."""
    from reports.compare import compare
    from reports.results import build_results

    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_falsified.py").write_text(FALSIFIED)
    done, records = run_pytest(tmp_path, "-p", "reports.plugin", "test_falsified.py")
    assert done.returncode == 1, done.stdout[-2000:]
    gates = [r for r in records if r["kind"] == "gate"]
    final = [g for g in gates if g["example"] == "final"]
    searched = [g for g in gates if g["example"] == "search" and not g["passed"]]
    assert [(g["case"], g["passed"]) for g in final] == [("n=10", False)]  # the minimal example, once
    assert len(searched) >= 2  # the first failure found, and the shrink steps to n=10
    assert all(g["example"] == "search" for g in gates if g["passed"])

    results = build_results(records, pytest_status=1)
    assert results["totals"]["gates"]["failed"] == 1
    assert results["totals"]["gates"]["superseded"] == len(searched)
    assert "1 gate record(s) failed" in results["reasons"]
    assert results["records"] == records  # every record kept as evidence
    assert [(r["kernel"], r["verdict"], r["count"]) for r in results["by_kernel_gate"]
            if r["verdict"] == "FAIL"] == [("toy", "FAIL", 1)]
    # The comparison sees one new failure (the minimal example), not one per shrink step.
    passing_before = [{**g, "passed": True, "example": "search"} for g in gates if g["passed"]]
    new_failures = compare(passing_before, records)["new_failures"]
    assert [(f["kind"], f.get("case")) for f in new_failures] == [("gate", "n=10"), ("test", None)]


def test_one_selection_record_per_run(gate_run):
    _, records = gate_run
    (selection,) = [r for r in records if r["kind"] == "selection"]  # under xdist: the first worker's only
    assert (selection["args"], selection["deselected"], selection["selected"]) == (["."], [], len(EXPECTED_OUTCOMES))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_the_selection_record_names_what_the_run_left_out(sample, workers):
    """A comparison reads it to tell a test this run did not select from one that is gone."""
    done, records = run_pytest(sample, "-p", "reports.plugin", "-k", "one or arm", "test_other.py",
                               "test_sample.py::test_arm", *workers)
    assert done.returncode == 0, done.stdout[-2000:]
    (selection,) = [r for r in records if r["kind"] == "selection"]
    assert selection["args"] == ["test_other.py", "test_sample.py::test_arm"] and selection["keyword"] == "one or arm"
    assert selection["deselected"] == ["test_other.py::test_two"] and selection["selected"] == 3


SKIPPED_MODULE = '''
import pytest

pytest.skip("arm metal: no Metal device (the whole module)", allow_module_level=True)


def test_never_collected():
    pass
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_a_module_skipped_at_collection_gets_a_record_and_a_line(tmp_path, workers):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_skipped.py").write_text(SKIPPED_MODULE)
    (tmp_path / "test_other.py").write_text(OTHER)
    done, records = run_pytest(tmp_path, "-p", "reports.plugin", *workers)
    assert done.returncode == 0, done.stdout[-2000:]
    tests = {r["nodeid"]: r for r in records if r["kind"] == "test"}
    assert set(tests) == {"test_skipped.py", "test_other.py::test_one", "test_other.py::test_two"}
    skipped = tests["test_skipped.py"]
    assert (skipped["outcome"], skipped["when"], skipped["module"]) == ("skipped", "collect", "test_skipped.py")
    assert skipped["skip_reason"] == "arm metal: no Metal device (the whole module)"
    assert any(line.startswith("mlxgate: test_skipped.py  0 passed, 0 failed, 1 skipped")
               for line in done.stdout.splitlines()), done.stdout


TEARDOWN_FAILS = '''
import pytest


@pytest.fixture
def leaky():
    yield
    raise RuntimeError("the fixture could not release its buffer")


def test_body_passes(leaky):
    pass
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["plain", "xdist"])
def test_a_fixture_failing_in_teardown_is_an_error_that_fails_the_verdict(tmp_path, workers):
    """A test whose body passed but whose fixture raised in teardown is an error (pytest says so and exits 1): its
    record must say outcome "error", when "teardown", with the fixture's message, so the verdict fails on the
    records alone (``python -m reports.summary`` without --pytest-status), not a pass that hides the failure."""
    from reports.results import build_results

    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_teardown.py").write_text(TEARDOWN_FAILS)
    done, records = run_pytest(tmp_path, "-p", "reports.plugin", *workers)
    assert done.returncode == 1, done.stdout[-2000:]
    (test,) = [r for r in records if r["kind"] == "test"]
    assert (test["nodeid"], test["outcome"], test["when"]) == ("test_teardown.py::test_body_passes", "error",
                                                               "teardown")
    assert "could not release its buffer" in test["message"]
    results = build_results(records)
    assert (results["verdict"], results["reasons"]) == ("FAIL", ["1 test(s) failed"])
