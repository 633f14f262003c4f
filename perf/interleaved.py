"""Interleaved A/B: several variants of one call, timed block by block in one process.

Pools of separate processes an hour apart move more than the changes they should judge: on the H200 normalized
argmax, unchanged, took 0.036 / 0.042 / 0.046 ms in three pools, while multi-query's ring partial was 8-12% faster
than two stages at D256 interleaved in one process and invisible pool to pool (``perf/RESULTS.md``). So a change
is judged here: every block times every variant under every protocol once, in turn, and a variant's figure is the
median over blocks of its block medians. A drift of the host or the device during the run then falls on all
variants alike. (The pooled baseline stays what the regression gate compares against: ``perf.baseline``.)

    results = interleaved({"before": launch_a, "after": launch_b, "control": control}, blocks=5, rounds=20)
    print(table(results))
    print(ratios(results, "control"))  # a target's "N x faster than the control", per protocol

* A variant is a launch as ``perf.harness`` has it: a call that builds its MLX outputs and returns them.
* ``in_turn(sets, call_of)`` is a launch that takes the input sets in turn (``perf.cases`` builds a group's sets:
  with one set, a round's concurrent calls share their K / V in the GPU's L2).
* Protocols are ``eval<B>`` (``perf.harness.batched``: B launches, one ``mx.eval``) and ``pipelined<B>``
  (``perf.harness.Pipelined``: B launches submitted, the previous round awaited). The default set is four: 8 calls
  per round as perf runs them, and one, as a decode step's calls run alone.
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Callable, Mapping, Sequence

from perf.harness import Pipelined, check_count, batched, taking_turns, time_call

__all__ = ["PROTOCOLS", "in_turn", "interleaved", "parse_protocol", "per_call_seconds", "ratios", "table"]

PROTOCOLS = ("eval8", "pipelined8", "eval1", "pipelined1")
_PROTOCOL = re.compile(r"(eval|pipelined)([1-9][0-9]*)")


def parse_protocol(protocol: str) -> tuple[str, int]:
    """``"eval8"`` -> ``("eval", 8)``; ``"pipelined1"`` -> ``("pipelined", 1)``."""
    match = _PROTOCOL.fullmatch(protocol) if isinstance(protocol, str) else None
    if match is None:
        raise ValueError(f"protocol must be 'eval<B>' or 'pipelined<B>' with B >= 1 calls per round, got {protocol!r}")
    return match[1], int(match[2])


def per_call_seconds(launch: Callable[[], object], protocol: str, *, rounds: int, warmup: int = 2) -> float:
    """The median over ``rounds`` rounds of ``protocol`` of one call's share of a round, in seconds."""
    kind, batch = parse_protocol(protocol)
    if kind == "eval":
        return statistics.median(time_call(batched(launch, "mlx", batch), rounds=rounds, warmup=warmup)) / batch
    round_ = Pipelined(launch, batch)
    try:
        return statistics.median(time_call(round_, rounds=rounds, warmup=warmup)) / batch
    finally:
        round_.finish()  # the last round's outputs: awaited, untimed


def interleaved(calls: Mapping[str, Callable[[], object]], *, protocols: Sequence[str] = PROTOCOLS, blocks: int = 4,
                rounds: int = 20, warmup: int = 3) -> dict[str, dict[str, list[float]]]:
    """Each variant of ``calls`` (name -> launch) under each of ``protocols``, ``blocks`` times in turn.

    ``warmup`` untimed calls of every variant come first (they take the JIT compilations). Returns, per name and
    protocol, the block medians in seconds per call, in block order."""
    if not isinstance(calls, Mapping) or not calls:
        raise ValueError("calls must be a non-empty mapping of variant names to launches")
    for name, launch in calls.items():
        if not isinstance(name, str) or not callable(launch):
            raise TypeError(f"calls must map str names to callables, got {name!r}: {type(launch).__name__}")
    if isinstance(protocols, str) or not protocols:
        raise ValueError(f"protocols must be a non-empty sequence of protocol names, got {protocols!r}")
    protocols = tuple(protocols)
    if len(set(protocols)) != len(protocols):  # one list per protocol: a repeat would merge two into one
        raise ValueError(f"protocols must not repeat a protocol, got {protocols!r}")
    for protocol in protocols:
        parse_protocol(protocol)
    check_count("blocks", blocks, 1)
    check_count("rounds", rounds, 1)
    check_count("warmup", warmup, 0)
    import mlx.core as mx

    for launch in calls.values():
        for _ in range(warmup):
            mx.eval(launch())
    results = {name: {protocol: [] for protocol in protocols} for name in calls}
    for _ in range(blocks):
        for name, launch in calls.items():
            for protocol in protocols:
                results[name][protocol].append(per_call_seconds(launch, protocol, rounds=rounds))
    return results


def in_turn(sets: Sequence, call_of: Callable[[object], object]) -> Callable[[], object]:
    """A launch that calls ``call_of(set)`` on ``sets`` in turn, one set per call (``perf.harness.taking_turns``)."""
    if isinstance(sets, (str, bytes)) or not isinstance(sets, Sequence) or not sets:
        raise ValueError("sets must be a non-empty sequence of input sets")
    if not callable(call_of):
        raise TypeError(f"call_of must be callable, got {type(call_of).__name__}")
    return taking_turns([functools.partial(call_of, s) for s in sets])


def _medians(results, names) -> dict[str, dict[str, float]]:
    """Per variant of ``names`` and protocol, the median of its block medians; ValueError naming ``results``
    when it is not what ``interleaved`` returns (every variant with the same protocols, each a non-empty list of
    positive seconds)."""
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty mapping of variant -> {protocol: block medians}")
    protocols = None
    medians = {}
    for name in names:
        by_protocol = results[name]
        if not isinstance(by_protocol, Mapping):
            raise ValueError(f"results[{name!r}] must map protocols to block medians, got {type(by_protocol).__name__}")
        if protocols is None:
            protocols = list(by_protocol)
        if list(by_protocol) != protocols:
            raise ValueError(f"every variant needs the protocols {protocols}; {name!r} has {list(by_protocol)}")
        medians[name] = {}
        for protocol, values in by_protocol.items():
            values = list(values) if isinstance(values, Sequence) and not isinstance(values, str) else None
            if not values or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf")
                                 for v in values):
                raise ValueError(f"results[{name!r}][{protocol!r}] must be a non-empty list of positive seconds")
            medians[name][protocol] = statistics.median(values)
    return medians


def table(results: Mapping[str, Mapping[str, Sequence[float]]], *, unit: str = "us") -> str:
    """One line per variant: the median over blocks per protocol, in ``unit`` per call (``us`` or ``ms``)."""
    scale = {"us": 1e6, "ms": 1e3}.get(unit)
    if scale is None:
        raise ValueError(f"unit must be 'us' or 'ms', got {unit!r}")
    medians = _medians(results, list(results) if isinstance(results, Mapping) else ())
    protocols = list(next(iter(medians.values())))
    width = max(len("variant"), *(len(name) for name in results))
    lines = [f"{'variant':{width}s} " + " ".join(f"{p:>11s}" for p in protocols) + f"  ({unit} per call)"]
    for name, by_protocol in medians.items():
        lines.append(f"{name:{width}s} " + " ".join(f"{by_protocol[p] * scale:11.1f}" for p in protocols))
    return "\n".join(lines)


def ratios(results: Mapping[str, Mapping[str, Sequence[float]]], control: str,
           names: Sequence[str] | None = None) -> str:
    """One line per variant of ``names`` (default: every variant but ``control``): per protocol, the control's
    median over blocks divided by the variant's, as ``3.52x`` (above 1: the variant is faster). Both medians come
    from the same interleaved blocks, so a drift of the host between processes does not enter the ratio."""
    if not isinstance(results, Mapping) or control not in results:
        raise ValueError(f"control must name a variant of the results, got {control!r}")
    names = [n for n in results if n != control] if names is None else list(names)
    for name in names:
        if name not in results:
            raise ValueError(f"names must be variants of the results, got {name!r}")
    medians = _medians(results, [control, *names])
    protocols = list(medians[control])
    lines = []
    for name in names:
        cells = [f"{medians[control][p] / medians[name][p]:.2f}x" for p in protocols]
        lines.append(f"{control} / {name}: " + " ".join(f"{p} {c}" for p, c in zip(protocols, cells)))
    return "\n".join(lines)
