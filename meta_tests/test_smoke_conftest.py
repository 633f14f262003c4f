"""The conftest wiring: profiles, device, arms parametrization, gate fixture."""

import mlx.core as mx
import pytest

import conftest
from impl import arms


def test_profile_selection_follows_environment():
    assert conftest.chosen_profile({}) == "dev"
    assert conftest.chosen_profile({"CI": "true"}) == "ci"
    assert conftest.chosen_profile({"CI": "true", "MLXGATE_PROFILE": "thorough"}) == "thorough"
    with pytest.raises(pytest.UsageError, match="MLXGATE_PROFILE must be one of"):
        conftest.chosen_profile({"MLXGATE_PROFILE": "bogus"})


def test_a_gpu_run_without_a_gpu_is_a_usage_error(tmp_path):
    if arms.gpu_available():
        pytest.skip("this machine has a GPU: --device gpu is valid here")
    import os
    import subprocess
    import sys

    env = {**os.environ, "MLXGATE_RESULTS": str(tmp_path / "r.jsonl")}
    result = subprocess.run([sys.executable, "-m", "pytest", "meta_tests/test_smoke_conftest.py", "--device", "gpu",
                             "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-k", "profile_selection"],
                            cwd=conftest.__file__.rsplit("/", 1)[0], env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert "--device gpu: device='gpu' requested but MLX has no GPU backend" in result.stderr


def test_device_is_the_configured_one(pytestconfig):
    expected = mx.gpu if pytestconfig.mlxgate_device == "gpu" else mx.cpu
    assert mx.default_device() == expected


def test_every_arm_is_parametrized(arm):
    # Reaching here means this arm is available; unavailable ones are skips with a reason.
    assert arms.discover_arms()[arm].available


def test_gate_fixture_is_bound_to_test_and_arm(gate, request):
    assert gate.test_id == request.node.nodeid
    assert gate.arm is None


def test_resolve_arm_rejects_unknown_names():
    with pytest.raises(ValueError, match="arm must be one of"):
        arms.resolve_arm("vulkan")


def test_discover_arms_names_a_bad_device():
    """A falsy bad device (0, "") is refused like any other, not read as "the current device"."""
    for device in (0, "", "tpu"):
        with pytest.raises(ValueError, match="device"):
            arms.discover_arms(device)


def test_matrix_ring_option_reaches_every_worker_and_the_record(tmp_path):
    """``--matrix-ring 3`` sets the paged matrix partial's ring in each xdist worker (a test there sees it) and in the
    run's environment record; a refused slot count is a usage error naming the option."""
    import json
    import os
    import subprocess
    import sys

    probe = tmp_path / "test_ring_probe.py"
    probe.write_text("import impl.paged_attention as paged\n\n\n"
                     "def test_ring_is_set():\n    assert paged.MATRIX_RING == 3\n")
    root = conftest.__file__.rsplit("/", 1)[0]
    results = tmp_path / "r.jsonl"
    env = {**os.environ, "MLXGATE_RESULTS": str(results), "PYTHONPATH": root}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "pytest", str(probe), "--rootdir", root, "-c",
                               f"{root}/pyproject.toml", "--confcutdir", root, "-p", "conftest", "-q",
                               "-p", "no:cacheprovider", *args],
                              cwd=root, env=env, capture_output=True, text=True, timeout=180)

    result = run("--matrix-ring", "3", "-n", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["matrix_ring"] for r in records if r["kind"] == "environment"] == [3]
    refused = run("--matrix-ring", "1", "-p", "no:xdist")
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR
    assert "--matrix-ring 1: slots must be 0" in refused.stderr
