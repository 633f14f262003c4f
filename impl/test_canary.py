"""The Metal canary: its judgement of kernel outputs, its statuses, its command line, its pytest wiring, its report row.

No Metal device here, so the judgement is tested on fake outputs (correct,
zeros, garbage, partial, one element off) and the device paths through
monkeypatched device probes; the pytest wiring runs a small suite in a
subprocess with a fake canary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from impl import arms, canary
from reports.render import render
from reports.results import build_results

ROOT = Path(__file__).resolve().parents[1]
N = canary.N


def fake_device(monkeypatch, name: str, launch=None) -> None:
    """Pretend this machine has a Metal device called ``name`` whose canary kernel returns ``launch(n)``."""
    monkeypatch.setattr(arms, "metal_available", lambda: True)
    monkeypatch.setattr(canary, "metal_device_name", lambda: name)

    def no_launch(n):
        raise AssertionError("the canary kernel must not run on this device")

    monkeypatch.setattr(canary, "_launch", launch or no_launch)


# --- the judgement --------------------------------------------------------------


def test_expected_output_is_exact_in_float32():
    # The check is bit-exact only because no value needs rounding: float64 and float32 agree.
    inp = canary.canary_input(N).astype(np.float64)
    exact = inp * 2 + np.arange(N)
    assert np.array_equal(canary.expected_output(N).astype(np.float64), exact)
    assert np.all(inp * 4 == np.round(inp * 4)) and inp.min() >= -64 and inp.max() < 64


def test_correct_output_passes():
    result = canary.check_output(canary.expected_output(N), device_name="Apple M2")
    assert result.ok and result.status == "passed" and result.wrong == 0
    assert "Apple M2" in result.message and result.first_bad is None


def test_all_zeros_fail_and_say_so():
    result = canary.check_output(np.zeros(N, np.float32), device_name="Apple Paravirtual device")
    assert result.status == "failed" and not result.ok
    assert "all zeros" in result.message and result.zeros == N
    # expected[0] = inp[0]*2 + 0 = -128: the first element already differs.
    assert result.first_bad == {"index": 0, "actual": 0.0, "expected": -128.0}


def test_garbage_fails_with_the_first_wrong_element():
    garbage = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    result = canary.check_output(garbage)
    assert result.status == "failed" and "garbage" in result.message
    assert result.wrong == N and "index 0" in result.message


def test_only_the_first_threadgroup_ran():
    out = canary.expected_output(N)
    out[canary.THREADGROUP:] = 0
    result = canary.check_output(out)
    # Past the first group |2*inp| < 128 < i, so no expected value there is 0: all of them are wrong.
    assert result.status == "failed" and result.wrong == N - canary.THREADGROUP
    assert result.first_bad["index"] == canary.THREADGROUP


@pytest.mark.parametrize("bad", ["one_ulp", "nan", "inf"])
def test_a_single_wrong_element_fails(bad):
    out = canary.expected_output(N)
    index = 1234
    out[index] = {"one_ulp": np.nextafter(out[index], np.float32(np.inf)), "nan": np.nan, "inf": np.inf}[bad]
    result = canary.check_output(out)
    assert result.status == "failed" and result.wrong == 1 and result.first_bad["index"] == index
    assert ("1 non-finite" in result.message) == (bad != "one_ulp")


@pytest.mark.parametrize("actual", [np.zeros(N // 2, np.float32), canary.expected_output(N).astype(np.float16),
                                    canary.expected_output(N).reshape(64, 64)], ids=["short", "float16", "2d"])
def test_wrong_shape_or_dtype_fails(actual):
    result = canary.check_output(actual)
    assert result.status == "failed" and "expected (4096,) float32" in result.message


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(TypeError, match="actual"):
        canary.check_output(None)
    with pytest.raises(ValueError, match="n must be a positive multiple"):
        canary.check_output(np.zeros(100, np.float32), n=100)
    with pytest.raises(TypeError, match="n must be an int"):
        canary.canary_input(True)
    with pytest.raises(ValueError, match="status must be one of"):
        canary.CanaryResult("maybe", "why")
    with pytest.raises(ValueError, match="message"):
        canary.CanaryResult("passed", "")
    with pytest.raises(TypeError, match="result must be a CanaryResult"):
        canary.failure_message("failed")


# --- statuses on this machine and on faked devices -------------------------------


def test_run_canary_on_this_machine():
    result = canary.run_canary()
    if not arms.metal_available():
        assert result.status == "unavailable" and result.message.startswith("no Metal device")
    elif canary.unavailable_reason() is None:
        assert result.ok, f"this Mac's Metal device fails the canary: {result}"
    else:
        assert result.status == "unavailable" and "paravirtual" in result.message


def test_paravirtual_device_is_unavailable_without_running_anything(monkeypatch):
    fake_device(monkeypatch, "Apple Paravirtual device")
    result = canary.run_canary()
    assert result.status == "unavailable" and "paravirtual GPU" in result.message
    assert result.device_name == "Apple Paravirtual device"


def test_device_returning_zeros_fails(monkeypatch):
    fake_device(monkeypatch, "Apple M9", launch=lambda n: np.zeros(n, np.float32))
    result = canary.run_canary()
    assert result.status == "failed" and "all zeros" in result.message and "Apple M9" in result.message
    assert result.seconds is not None


def test_kernel_that_raises_fails(monkeypatch):
    def launch(n):
        raise RuntimeError("[metal_kernel] Unable to build metal library from source")

    fake_device(monkeypatch, "Apple M9", launch=launch)
    result = canary.run_canary()
    assert result.status == "failed" and "raised RuntimeError" in result.message
    assert "Unable to build metal library" in result.message


def test_working_device_passes(monkeypatch):
    fake_device(monkeypatch, "Apple M9", launch=canary.expected_output)
    assert canary.run_canary().ok


def test_status_without_running(monkeypatch):
    monkeypatch.setattr(arms, "metal_available", lambda: False)
    assert canary.status_without_running("no Metal device").status == "unavailable"
    fake_device(monkeypatch, "Apple M9")
    result = canary.status_without_running("metal needs the GPU stream; this run uses --device cpu")
    assert result.status == "not_run" and "--device cpu" in result.message
    with pytest.raises(ValueError, match="arm_reason"):
        canary.status_without_running("")


def test_failure_message_names_the_status_and_the_way_to_reproduce():
    result = canary.check_output(np.zeros(N, np.float32))
    message = canary.failure_message(result)
    assert message.startswith("Metal canary failed: ") and "all zeros" in message
    assert "python -m impl.canary" in message and "every metal-arm test fails" in message


def test_record_follows_the_schema():
    record = canary.check_output(np.zeros(N, np.float32), device_name="Apple M9").record(where="gw1")
    assert record["kind"] == "canary" and record["arm"] == "metal" and record["where"] == "gw1"
    assert {"status", "message", "device_name", "n", "wrong", "zeros", "first_bad", "seconds", "time"} <= set(record)


# --- the command line --------------------------------------------------------------

RESULTS = {
    "passed": canary.CanaryResult("passed", "exact", device_name="Apple M9"),
    "failed": canary.CanaryResult("failed", "returned all zeros", device_name="Apple M9"),
    "unavailable": canary.CanaryResult("unavailable", "no Metal device: test"),
}
EXIT_CODES = [  # (status, --allow-unavailable, exit code)
    ("passed", False, 0), ("passed", True, 0),
    ("failed", False, 1), ("failed", True, 1),  # a broken device is never "expected"
    ("unavailable", False, 2), ("unavailable", True, 0),
]


@pytest.mark.parametrize("status,allow,code", EXIT_CODES,
                         ids=[f"{s}-{'allow' if a else 'strict'}" for s, a, _ in EXIT_CODES])
def test_cli_exit_codes(monkeypatch, capsys, status, allow, code):
    monkeypatch.setattr(canary, "run_canary", lambda: RESULTS[status])
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert canary.main(["--allow-unavailable"] if allow else []) == code
    assert f"mlxgate metal canary: {RESULTS[status]}" in capsys.readouterr().out


def test_a_bad_command_line_is_not_read_as_no_device(capsys):
    with pytest.raises(SystemExit) as exit_:
        canary.main(["--bogus"])
    assert exit_.value.code == canary.EXIT_USAGE != canary.EXIT_UNAVAILABLE
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


@pytest.mark.parametrize("status,allow,level", [("failed", True, "error"), ("unavailable", True, "notice"),
                                                ("unavailable", False, "error"), ("passed", False, "notice")])
def test_cli_annotates_under_github_actions(monkeypatch, capsys, tmp_path, status, allow, level):
    summary = tmp_path / "summary.md"
    monkeypatch.setattr(canary, "run_canary", lambda: RESULTS[status])
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    canary.main(["--allow-unavailable"] if allow else [])
    assert f"::{level} title=Metal canary::{RESULTS[status]}" in capsys.readouterr().out
    assert f"`{status}`" in summary.read_text()


def test_cli_json_prints_the_record(monkeypatch, capsys):
    monkeypatch.setattr(canary, "run_canary", lambda: RESULTS["failed"])
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    canary.main(["--json"])
    record = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert record["kind"] == "canary" and record["status"] == "failed" and record["where"] == "cli"


def test_cli_in_a_fresh_process():
    expected = canary.run_canary()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    run = subprocess.run([sys.executable, "-m", "impl.canary", "--allow-unavailable"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert f"mlxgate metal canary: {expected.status}: " in run.stdout, run.stdout + run.stderr
    assert run.returncode == (0 if expected.status in ("passed", "unavailable") else 1)


# --- the pytest wiring (impl/canary_plugin.py) ------------------------------------

SAMPLE_CONFTEST = '''
import os

import numpy as np

from impl import arms, canary, canary_plugin

# This machine has no Metal: pretend the metal arm is available and the device answers FAKE_CANARY.
canary_plugin.metal_arm_status = lambda config: arms.ArmStatus("metal", True, "faked by the test")


def fake_run_canary(n=canary.N):
    out = canary.expected_output(n) if os.environ["FAKE_CANARY"] == "correct" else np.zeros(n, np.float32)
    return canary.check_output(out, n=n, device_name="Fake GPU")


canary.run_canary = fake_run_canary
pytest_plugins = ("impl.canary_plugin",)
'''
SAMPLE_TESTS = '''
import pytest


@pytest.mark.parametrize("arm", ["graph", "metal"])
def test_kernel(arm):
    open(f"{arm}.ran", "a").close()


@pytest.mark.parametrize("arm", ["metal", "cuda"])
def test_other(arm):
    open(f"{arm}.ran", "a").close()


def test_plain():
    pass
'''


def run_sample(tmp_path: Path, fake: str, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(SAMPLE_CONFTEST))
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE_TESTS))
    results = tmp_path / "results.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLXGATE_RESULTS": str(results), "FAKE_CANARY": fake}
    # The conftest imports the plugin to patch it before pytest registers it: no assertion rewriting, fine here.
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q",
                          "-W", "ignore::pytest.PytestAssertRewriteWarning", *args],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    return run, [r for r in records if r["kind"] == "canary"]


def test_broken_device_fails_every_metal_test_before_its_body(tmp_path):
    run, records = run_sample(tmp_path, "zeros")
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "FAILED test_sample.py::test_kernel[metal] - Failed: Metal canary failed" in out
    assert "FAILED test_sample.py::test_other[metal] - Failed: Metal canary failed" in out
    assert "all zeros" in out and "3 passed" in out and "2 failed" in out
    assert not (tmp_path / "metal.ran").exists()  # no metal-arm test body ran
    assert (tmp_path / "graph.ran").exists() and (tmp_path / "cuda.ran").exists()
    assert len(records) == 1 and records[0]["status"] == "failed" and records[0]["where"] == "main"


def test_working_device_runs_the_metal_tests_after_one_canary(tmp_path):
    run, records = run_sample(tmp_path, "correct")
    assert run.returncode == 0 and "5 passed" in run.stdout, run.stdout + run.stderr
    assert (tmp_path / "metal.ran").exists()
    assert [r["status"] for r in records] == ["passed"]  # once per process, not once per test


def test_under_xdist_each_worker_checks_before_its_first_metal_test(tmp_path):
    run, records = run_sample(tmp_path, "zeros", "-n", "2")
    assert run.returncode == 1 and "2 failed" in run.stdout, run.stdout + run.stderr
    assert 1 <= len(records) <= 2 and all(r["where"].startswith("gw") for r in records)


def test_a_run_without_the_metal_arm_records_why(tmp_path):
    # --device cpu: the metal arm never runs, on any machine, so the run's one did-not-run record says why.
    results = tmp_path / "results.jsonl"
    run = subprocess.run([sys.executable, "-m", "pytest", "meta_tests/test_smoke_conftest.py::test_profile_selection_"
                          "follows_environment", "--device", "cpu", "-q", "-p", "no:xdist"], cwd=ROOT,
                         env={**os.environ, "MLXGATE_RESULTS": str(results)}, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    canaries = [r for r in records if r["kind"] == "canary"]
    assert len(canaries) == 1 and canaries[0]["where"] == "run"
    assert canaries[0]["status"] in ("unavailable", "not_run") and canaries[0]["message"]


# --- the report -------------------------------------------------------------------


def test_report_shows_the_canary_failures_first():
    failed = canary.check_output(np.zeros(N, np.float32), device_name="Apple M9")
    unavailable = canary.CanaryResult("unavailable", "no Metal device: MLX has no Metal backend here")
    records = [{"kind": "environment", "device": "gpu", "arms": {}},
               unavailable.record(where="run"), failed.record(where="gw0"), failed.record(where="gw1")]
    html = render(build_results(records, pytest_status=1))
    row = html[html.index('id="canary"'):]
    row = row[:row.index("</td>")]
    assert row.index("failed") < row.index("unavailable")
    assert "all zeros" in row and "Apple M9" in row and "gw0, gw1" in row
    assert "not recorded" in render(build_results([{"kind": "environment", "arms": {}}]))
