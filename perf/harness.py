"""Timing and records: what one benchmark is, how it is timed, the ``perf`` record it leaves.

* ``Case``: one benchmark at one shape: ``benchmark`` (the family, e.g.
  ``paged_decode``), ``kernel`` (what runs: ``paged_attention``,
  ``gather_sdpa``, ``sdpa``...), ``arm`` (``graph`` / ``metal`` / ``cuda`` for
  this project's kernels, ``mlx`` for MLX's own ops, ``torch``), ``shape``,
  ``dtype``, the ``bytes`` the problem must move and its ``flops``, and
  ``build``: allocates and evaluates the inputs (untimed) and returns the
  launch: a call that builds the outputs (MLX: a lazy graph; torch: queued
  kernels) without waiting for them.
* ``batched(launch, runtime, batch)``: one timed round, ``batch`` launches then
  one wait: ``mx.eval`` of all outputs (MLX is lazy: nothing runs before it, and
  it returns when the device has finished) or ``torch.cuda.synchronize()``.
  This is protocol ``eval`` (``PROTOCOLS``): a sample holds the calls' host
  Python, the device's work and one ``mx.eval``'s fixed cost shared by the batch.
* ``Pipelined(launch, batch)``: protocol ``pipelined`` (MLX only): a round builds
  ``batch`` launches, submits them (``mx.async_eval``) and then waits for the
  PREVIOUS round's, so the host builds round r + 1 while the device runs round r,
  as a decoder overlaps its steps: a sample is max(host, device) per round, the
  device-bound throughput. ``finish()`` waits for the last round (untimed).
* ``time_call(call, rounds, warmup)``: ``warmup`` untimed rounds (they absorb
  JIT compilation: MLX compiles CUDA/Metal kernels on first use), then
  ``rounds`` rounds each timed alone with ``time.perf_counter``: the samples
  (divided by ``batch`` to give seconds per call).
* ``perf_record``: the record of ``reports/SCHEMA.md`` (kind ``perf``), call time and, where
  ``perf.kernel_time`` measured it (``Measurement.kernel``), kernel time beside it.

``bytes`` is the problem's compulsory traffic, the same for every kernel of a
benchmark and shape (e.g. decode: K and V of the live tokens, q, the output,
the block table): so GB/s compares kernels on one scale, and a kernel that
moves more (a gather's copy) shows as lower GB/s, not as more bytes.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["KERNEL_STATUSES", "PROTOCOLS", "Case", "Measurement", "TimingSamples", "batched", "check_count", "perf_record",
           "Pipelined", "summarize", "synchronizer", "taking_turns", "time_call", "time_case"]

PROTOCOLS = ("eval", "pipelined")  # how a timed round waits (module docstring)
# A perf record's kernel_status (reports/SCHEMA.md): kernel time measured, not asked for, not measurable here,
# or the case's calls failed to give it (perf.kernel_time.KernelTimeError and what a traced call raised).
KERNEL_STATUSES = ("measured", "off", "unavailable", "error")


@dataclass(frozen=True)
class Case:
    benchmark: str
    kernel: str
    arm: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    flops: int
    build: Callable[[], Callable[[], object]] = field(repr=False, compare=False)
    note: str = ""
    runtime: str = "mlx"  # how a launch's outputs are waited for: "mlx" (mx.eval) or "torch" (cuda sync)

    @property
    def id(self) -> str:
        """Stable key of this case in baselines: ``benchmark/kernel[arm]/shape/dtype``."""
        return f"{self.benchmark}/{self.kernel}[{self.arm}]/{'x'.join(map(str, self.shape))}/{self.dtype}"


class TimingSamples:
    """``median_s`` and ``iqr_s`` of a dataclass's ``samples_s`` (``summarize``): call time and kernel time alike."""

    samples_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return summarize(self.samples_s)[0]

    @property
    def iqr_s(self) -> float:
        return summarize(self.samples_s)[1]


@dataclass(frozen=True)
class Measurement(TimingSamples):
    case: Case
    samples_s: tuple[float, ...]
    kernel: object | None = None  # perf.kernel_time.KernelTime, where kernel time was measured

    @property
    def gbps(self) -> float:
        return self.case.bytes / self.median_s / 1e9

    def as_dict(self) -> dict:
        """The case and its samples, as baselines store them (``perf/baseline.py``)."""
        c = self.case
        return {"benchmark": c.benchmark, "kernel": c.kernel, "arm": c.arm, "shape": list(c.shape), "dtype": c.dtype,
                "bytes": c.bytes, "flops": c.flops, "median_s": self.median_s, "iqr_s": self.iqr_s,
                "samples_s": list(self.samples_s), **(self.kernel.as_dict() if self.kernel is not None else {})}


def synchronizer(runtime: str) -> Callable[[list], None]:
    """Waits for a list of launches' outputs: ``mx.eval`` (MLX is lazy; it returns when the device is
    done) or ``torch.cuda.synchronize()``."""
    if runtime == "mlx":
        import mlx.core as mx

        return lambda outs: mx.eval(outs)
    if runtime == "torch":
        import torch

        return lambda outs: torch.cuda.synchronize()
    raise ValueError(f"runtime must be 'mlx' or 'torch', got {runtime!r}")


def batched(launch: Callable[[], object], runtime: str, batch: int, extra_s: float = 0.0) -> Callable[[], None]:
    """One timed round: ``batch`` launches, then one wait for all their outputs.

    ``batch`` > 1 is how a decoder runs: one decode step evaluates every
    layer's attention in one graph, so the per-``eval`` overhead is shared.
    ``extra_s``: a busy wait after the wait (the calibration's slowed variant), seconds.
    """
    _check_callable("launch", launch)
    batch = check_count("batch", batch, 1)
    extra_s = _check_seconds("extra_s", extra_s)
    sync = synchronizer(runtime)

    def run():
        outs = [launch() for _ in range(batch)]
        sync(outs)
        if extra_s:
            end = time.perf_counter() + extra_s
            while time.perf_counter() < end:
                pass

    return run


class Pipelined:
    """Protocol ``pipelined``: each call is one round of ``batch`` launches, submitted with ``mx.async_eval``,
    then a wait for the previous round's outputs (module docstring). ``finish()`` waits for the last round."""

    def __init__(self, launch: Callable[[], object], batch: int):
        import mlx.core as mx

        self._mx, self._launch, self._batch = mx, _check_callable("launch", launch), check_count("batch", batch, 1)
        self._pending = None

    def __call__(self) -> None:
        outs = [self._launch() for _ in range(self._batch)]
        self._mx.async_eval(outs)
        if self._pending is not None:
            self._mx.eval(self._pending)
        self._pending = outs

    def finish(self) -> None:
        if self._pending is not None:
            self._mx.eval(self._pending)
            self._pending = None


def time_case(case: Case, *, rounds: int, warmup: int, batch: int = 1) -> list[float]:
    """Seconds per call of ``case``: each of ``rounds`` rounds times ``batch`` calls and one wait."""
    call = batched(case.build(), case.runtime, batch)
    return [t / batch for t in time_call(call, rounds=rounds, warmup=warmup)]


def taking_turns(launches: Sequence[Callable[[], object]]) -> Callable[[], object]:
    """One launch that calls ``launches`` in turn, e.g. one per input set, so that a round's calls read different
    sets (``perf.cases``; ``perf.interleaved.in_turn``). A single launch is returned as it is."""
    launches = list(launches)
    if not launches or not all(callable(launch) for launch in launches):
        raise ValueError("launches must be a non-empty sequence of callables")
    if len(launches) == 1:
        return launches[0]
    turn = itertools.cycle(launches)
    return lambda: next(turn)()


def check_count(name: str, value, minimum: int) -> int:
    """``value`` as a Python int if it is an int (NumPy's too; not a bool) >= ``minimum``; else TypeError / ValueError
    naming ``name`` (the rule of ``impl.checks.check_int``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_callable(name: str, value):
    """``value`` if it is callable; else TypeError naming ``name`` (where it is handed over, not at the first timed
    round)."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__}")
    return value


def _check_seconds(name: str, value) -> float:
    """``value`` as a float if it is a finite real number >= 0 (Python's or NumPy's; not a bool); else TypeError /
    ValueError naming ``name``. A busy wait until ``now + nan`` never waits, and until ``now + inf`` never ends."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number of seconds, got {type(value).__name__}")
    if not 0 <= value <= sys.float_info.max:  # false for NaN, inf and an int past float's range
        raise ValueError(f"{name} must be finite and >= 0 seconds, got {value!r}")
    return float(value)


def time_call(call: Callable[[], object], *, rounds: int, warmup: int = 1) -> list[float]:
    """Seconds of each of ``rounds`` calls, after ``warmup`` untimed ones (module docstring)."""
    _check_callable("call", call)
    check_count("rounds", rounds, 1)
    check_count("warmup", warmup, 0)
    for _ in range(warmup):
        call()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def summarize(samples: Sequence[float]) -> tuple[float, float]:
    """(median, interquartile range) of timing samples, seconds."""
    values = np.asarray(samples, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"samples must be a non-empty 1-D sequence, got shape {values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("samples must be positive, finite seconds")
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return float(median), float(q3 - q1)


def perf_record(measurement: Measurement, *, copy_gbps: float | None, device_key: str, verdict=None,
                baseline_median_s: float | None = None, batch: int | None = None, protocol: str = "eval",
                inputs: str | None = None, input_sets: int | None = None, kernel_status: str | None = None,
                kernel_reason: str | None = None) -> dict:
    """The ``perf`` record (reports/SCHEMA.md) of one measurement.

    ``verdict``: a ``perf.regression.Verdict`` against the stored baseline, or
    None when this device has no baseline for the case (then ``p_value``,
    ``effect`` and ``baseline_median_s`` are null and ``regressed`` false).
    ``batch`` and ``protocol``: how the rounds were timed (``PROTOCOLS``); ``inputs``: whether a round's calls
    read their own input sets (``distinct``) or one (``shared``): ``perf.run``'s ``INPUTS``; ``input_sets``: how
    many the case's group built (fewer than the calls of a round where they would pass ``perf.cases``'s budget).
    ``kernel_status`` (``KERNEL_STATUSES``, None: the writer does not measure kernel time) and ``kernel_reason``
    (why not, for ``unavailable`` and ``error``): the kernel-time fields come from ``measurement.kernel``,
    present exactly when the status is ``measured``. The verdict's ``figure`` says which samples it judged.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    kernel = measurement.kernel
    if kernel_status is None and kernel is not None:
        kernel_status = "measured"
    if kernel_status is not None and kernel_status not in KERNEL_STATUSES:
        raise ValueError(f"kernel_status must be None or one of {KERNEL_STATUSES}, got {kernel_status!r}")
    if (kernel_status == "measured") != (kernel is not None):
        raise ValueError(f"kernel_status {kernel_status!r} with {'a' if kernel is not None else 'no'} kernel-time "
                         "measurement: 'measured' exactly when measurement.kernel is given")
    if kernel_status in ("unavailable", "error") and not kernel_reason:
        raise ValueError(f"kernel_status {kernel_status!r} needs its kernel_reason")
    c = measurement.case
    median, iqr = summarize(measurement.samples_s)
    gbps = c.bytes / median / 1e9
    record = {
        "kind": "perf", "time": time.time(),
        "benchmark": c.benchmark, "kernel": c.kernel, "arm": c.arm, "shape": list(c.shape), "dtype": c.dtype,
        "case": c.id, "device_key": device_key,
        "median_s": median, "iqr_s": iqr, "rounds": len(measurement.samples_s), "batch": batch,
        "protocol": protocol, "inputs": inputs, "input_sets": input_sets,
        "bytes": c.bytes, "flops": c.flops, "gbps": gbps, "tflops": c.flops / median / 1e12,
        "copy_gbps": copy_gbps,
        "pct_copy_bw": 100.0 * gbps / copy_gbps if copy_gbps else None,
        "baseline_median_s": baseline_median_s,
        "p_value": None, "effect": None, "effect_kind": None, "regressed": False,
        "alpha": None, "min_effect": None, "cliffs_delta": None, "gated": False, "gate_floor_s": None,
        "effect_threshold": None, "process_spread": None, "baseline_processes": None, "figure": None,
        "kernel_status": kernel_status, "kernel_reason": kernel_reason if kernel_status != "measured" else None,
        "kernel_median_s": None, "kernel_iqr_s": None, "kernel_calls": None, "kernels_per_call": None,
        "kernel_names": None, "kernel_span_median_s": None, "kernel_gbps": None, "kernel_pct_copy_bw": None,
        "kernel_timer": None,
    }
    if kernel is not None:
        kernel_gbps = c.bytes / kernel.median_s / 1e9
        record.update(kernel_median_s=kernel.median_s, kernel_iqr_s=kernel.iqr_s, kernel_calls=len(kernel.samples_s),
                      kernels_per_call=kernel.per_call, kernel_names=[[n, k] for n, k in kernel.kernels],
                      kernel_span_median_s=kernel.span_median_s, kernel_gbps=kernel_gbps,
                      kernel_pct_copy_bw=100.0 * kernel_gbps / copy_gbps if copy_gbps else None,
                      kernel_timer=kernel.timer)
    if verdict is not None:
        record.update(p_value=verdict.p_value, effect=verdict.effect, effect_kind="median_slowdown",
                      regressed=verdict.regressed, alpha=verdict.alpha, min_effect=verdict.min_effect,
                      cliffs_delta=verdict.cliffs_delta, gated=verdict.gated, gate_floor_s=verdict.floor_s,
                      baseline_median_s=verdict.baseline_median_s,
                      # the pooled rule's numbers (perf/regression.py): the effect it had to exceed, how far the
                      # baseline's process medians spread, and how many processes it pooled
                      effect_threshold=verdict.threshold, process_spread=verdict.process_spread,
                      baseline_processes=verdict.n_processes, figure=getattr(verdict, "figure", "call"))
        if record["figure"] == "kernel" and kernel is None:
            raise ValueError(f"{c.id}: a verdict on the kernel figure without a kernel-time measurement")
    for key in ("median_s", "gbps"):
        if not math.isfinite(record[key]):
            raise ValueError(f"{key} of {c.id} is not finite")
    return record
