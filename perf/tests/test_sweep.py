"""perf.sweep on the CPU: the graph arm's paged cases, stand-in traces (perf/tests/test_kernel_time.py's)."""

from __future__ import annotations

import pytest

import impl.paged_attention as paged
from perf import sweep as sw
from perf.tests.test_kernel_time import FakeTrace, a_call

SHAPE = (4, 2, 1, 64, 256)  # Hq, Hkv, rows, D, N: 16 blocks of 16 tokens, two partitions of 128 (graph arm)


@pytest.fixture
def target():
    before = paged.TARGET_THREADGROUPS
    yield
    paged.set_threadgroup_target(before)


def test_variants_are_compared_measured_in_turn_and_reset(target):
    order = []

    def choose(n):
        def apply():
            order.append(n)
            paged.set_threadgroup_target(n)
        return apply

    lines = []
    out = sw.sweep([SHAPE], {"512": choose(512), "also 512": choose(512)}, calls=2, rounds=2, arms=("graph",),
                   trace=FakeTrace([a_call(60.0, 9.0)]), timer="fake", log=lines.append)
    assert out[f"{SHAPE}|also 512|identical"] is True  # the same choice: the same bits
    assert out[f"{SHAPE}|also 512|apart"] == 0.0
    for label in ("512", "also 512", "sdpa"):
        runs = out[f"{SHAPE}|{label}"]
        assert len(runs) == 2 and all(r["median_us"] == pytest.approx(69.0) for r in runs)
        assert runs[0]["split_us"] == {"paged_partial": 60.0, "paged_merge": 9.0}
    # the comparison (first, then each other variant), two interleaved rounds, then the reset to the first
    assert order == [512, 512] + [512, 512] * 2 + [512]
    assert sum("bit-identical" in line for line in lines) == 1 and len(lines) == 1 + 3 * 2


def test_a_choice_that_changes_the_numbers_is_not_identical(target):
    # The graph arm sums partitions in their order: another partition count rounds differently.
    out = sw.sweep([SHAPE], {"512": lambda: paged.set_threadgroup_target(512),
                             "1": lambda: paged.set_threadgroup_target(1)}, calls=1, rounds=1, controls=(),
                   arms=("graph",), trace=FakeTrace([a_call()]), timer="fake", log=lambda line: None)
    assert isinstance(out[f"{SHAPE}|1|identical"], bool)
    # apart is 0 exactly when the bits are the same. A reordered float32 sum moves each output by far less than
    # 2^-16 of max|out| before it is rounded to bfloat16 once on each side, half an ULP of 8 significant bits
    # (<= 2^-8 of the value): at most 2 * 2^-8 + 2^-16 of max|out| apart.
    assert (out[f"{SHAPE}|1|apart"] == 0.0) == out[f"{SHAPE}|1|identical"]
    assert out[f"{SHAPE}|1|apart"] <= 2 * 2.0**-8 + 2.0**-16
    assert f"{SHAPE}|sdpa" not in out and paged.TARGET_THREADGROUPS == 512


def test_a_failed_measurement_is_recorded_and_the_rest_run(target):
    reset = []
    out = sw.sweep([SHAPE], {"512": lambda: paged.set_threadgroup_target(512)}, calls=1, rounds=1, arms=("graph",),
                   trace=FakeTrace([[]]), timer="fake", log=lambda line: None, reset=lambda: reset.append(1))
    for label in ("512", "sdpa"):
        assert "KernelTimeError" in out[f"{SHAPE}|{label}"][0]["error"]
        assert "recorded no device work" in out[f"{SHAPE}|{label}"][0]["error"]
    assert reset == [1]


@pytest.mark.parametrize("kwargs, error, words", [
    ({"shapes": []}, ValueError, "shapes"),
    ({"variants": {}}, ValueError, "variants"),
    ({"variants": {"a": 1}}, ValueError, "variants"),
    ({"rounds": 0}, ValueError, "rounds"),
    ({"calls": 1.5}, TypeError, "calls"),
])
def test_bad_arguments_are_refused_by_name(kwargs, error, words):
    arguments = {"shapes": [SHAPE], "variants": {"a": lambda: None}, "trace": FakeTrace([a_call()]), "timer": "fake",
                 **kwargs}
    with pytest.raises(error, match=words):
        sw.sweep(**arguments)
