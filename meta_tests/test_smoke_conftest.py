"""The conftest wiring: profiles, device, arms parametrization, gate fixture."""

import mlx.core as mx
import pytest

import conftest
from impl import arms


def test_profile_selection_follows_environment():
    assert conftest.chosen_profile({}) == "dev"
    assert conftest.chosen_profile({"CI": "true"}) == "ci"
    assert conftest.chosen_profile({"CI": "true", "MLXGATE_PROFILE": "thorough"}) == "thorough"


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
