"""Interleaved A/B timing (``perf.interleaved``): the order it times in, what it returns, what it refuses."""

from __future__ import annotations

import time

import mlx.core as mx
import pytest

from perf.interleaved import PROTOCOLS, in_turn, interleaved, parse_protocol, per_call_seconds, ratios, table


def logged(log: list, name: str, sleep_s: float = 0.0):
    """A launch that records its name and returns a small MLX output (after ``sleep_s`` of host time)."""
    def launch():
        log.append(name)
        if sleep_s:
            time.sleep(sleep_s)
        return mx.ones((4,)) * 2
    return launch


def test_protocols_parse_and_bad_ones_are_refused():
    assert [parse_protocol(p) for p in PROTOCOLS] == [("eval", 8), ("pipelined", 8), ("eval", 1), ("pipelined", 1)]
    assert parse_protocol("eval32") == ("eval", 32)
    for bad in ("eval0", "eval", "pipelined-1", "batch8", "eval08", 8, None):
        with pytest.raises(ValueError, match="protocol must be"):
            parse_protocol(bad)


def test_every_variant_is_timed_in_every_block_in_turn():
    """Block by block: within a block every variant takes its protocols, and no variant's blocks run back to back
    (the point of interleaving: a drift during the run falls on all variants alike)."""
    log = []
    calls = {"a": logged(log, "a"), "b": logged(log, "b"), "c": logged(log, "c")}
    results = interleaved(calls, protocols=("eval2", "pipelined1"), blocks=3, rounds=2, warmup=1)
    assert list(results) == ["a", "b", "c"]
    for name in calls:
        assert list(results[name]) == ["eval2", "pipelined1"]
        assert all(len(v) == 3 and all(s > 0 for s in v) for v in results[name].values())
    warm, timed = log[:3], log[3:]
    assert warm == ["a", "b", "c"]
    # Per variant and block: eval2 takes (2 warmup + 2 timed rounds) x 2 calls, pipelined1 (2 + 2) x 1 = 12 calls.
    per_block = [name for name in ("a", "b", "c") for _ in range(12)]
    assert timed == per_block * 3


def test_a_slower_variant_measures_slower():
    """2 ms of host time per call in an eval protocol (the round holds the host's work) against none."""
    results = interleaved({"fast": logged([], "fast"), "slow": logged([], "slow", sleep_s=2e-3)},
                          protocols=("eval1",), blocks=2, rounds=3, warmup=0)
    fast, slow = (min(results[n]["eval1"]) for n in ("fast", "slow"))
    assert slow >= 2e-3 > fast


def test_per_call_seconds_divides_a_round_by_its_calls():
    log = []
    seconds = per_call_seconds(logged(log, "x", sleep_s=1e-3), "eval4", rounds=2, warmup=0)
    assert len(log) == 8 and 1e-3 <= seconds < 0.5


def test_in_turn_cycles_through_the_sets():
    seen = []
    launch = in_turn([1, 2, 3], lambda s: seen.append(s))
    for _ in range(7):
        launch()
    assert seen == [1, 2, 3, 1, 2, 3, 1]
    with pytest.raises(ValueError, match="sets"):
        in_turn([], lambda s: s)
    with pytest.raises(TypeError, match="call_of"):
        in_turn([1], None)


def test_table_prints_the_median_over_blocks():
    results = {"before": {"eval8": [3e-6, 1e-6, 2e-6]}, "after, longer name": {"eval8": [1e-6, 1e-6, 5e-6]}}
    lines = table(results).splitlines()
    assert lines[0].split()[:2] == ["variant", "eval8"] and "(us per call)" in lines[0]
    assert lines[1].split()[-1] == "2.0" and lines[2].startswith("after, longer name") and lines[2].endswith("1.0")
    assert table(results, unit="ms").splitlines()[1].split()[-1] == "0.0"
    with pytest.raises(ValueError, match="unit"):
        table(results, unit="s")
    with pytest.raises(ValueError, match="every variant needs the protocols"):
        table({"a": {"eval8": [1.0]}, "b": {"eval1": [1.0]}})


def test_ratios_divide_the_control_by_each_variant_per_protocol():
    results = {"control": {"eval8": [4e-6, 8e-6, 6e-6], "eval1": [9e-6, 9e-6, 9e-6]},
               "kernel": {"eval8": [2e-6, 1e-6, 3e-6], "eval1": [3e-6, 3e-6, 3e-6]},
               "slower": {"eval8": [12e-6, 12e-6, 12e-6], "eval1": [18e-6, 18e-6, 18e-6]}}
    lines = ratios(results, "control").splitlines()
    assert lines == ["control / kernel: eval8 3.00x eval1 3.00x", "control / slower: eval8 0.50x eval1 0.50x"]
    assert ratios(results, "control", ["slower"]) == lines[1]
    with pytest.raises(ValueError, match="control must name"):
        ratios(results, "sdpa")
    with pytest.raises(ValueError, match="names must be variants"):
        ratios(results, "control", ["kernel", "nope"])
    with pytest.raises(ValueError, match="every variant needs the protocols"):
        ratios({"control": {"eval8": [1.0]}, "k": {"eval1": [1.0]}}, "control")


@pytest.mark.parametrize("kwargs, error, match", [
    ({"calls": {}}, ValueError, "calls must be a non-empty mapping"),
    ({"calls": {"a": 3}}, TypeError, "calls must map"),
    ({"protocols": ()}, ValueError, "protocols must be"),
    ({"protocols": "eval8"}, ValueError, "protocols must be"),
    ({"protocols": ("eval8", "warm")}, ValueError, "protocol must be"),
    ({"blocks": 0}, ValueError, "blocks"),
    ({"rounds": 1.5}, TypeError, "rounds"),
    ({"warmup": -1}, ValueError, "warmup"),
    ({"protocols": ("eval1", "eval1")}, ValueError, "repeat"),
])
def test_bad_input_is_refused_before_anything_runs(kwargs, error, match):
    log = []
    arguments = {"calls": {"a": logged(log, "a")}, **kwargs}
    calls = arguments.pop("calls")
    with pytest.raises(error, match=match):
        interleaved(calls, **arguments)
    assert log == []


@pytest.mark.parametrize("results, control, match", [
    ({"a": {"eval8": []}}, None, r"results\['a'\]\['eval8'\] must be a non-empty list"),
    ({"c": {"eval8": [1e-3]}, "x": {"eval8": [0.0]}}, "c", r"results\['x'\]\['eval8'\]"),
    ({"a": [1.0]}, None, r"results\['a'\] must map protocols"),
    ({}, None, "non-empty mapping"),
    ({"a": {"eval8": [1e-3]}, "b": {"eval1": [1e-3]}}, None, "every variant needs the protocols"),
])
def test_table_and_ratios_refuse_what_interleaved_does_not_return(results, control, match):
    with pytest.raises(ValueError, match=match):
        table(results) if control is None else ratios(results, control)
