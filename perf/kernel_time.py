"""Kernel time: the device time of one call's kernels, read from a CUPTI trace through torch.profiler.

    python -m perf.kernel_time --smoke [--calls 20] [--json OUT.json]   # paged D128/D256 and MLX SDPA, on CUDA

Call time (``perf.harness``, protocol eval8) is what a decode step pays, host included; its floor is MLX's
per-launch host cost, not the kernel (``perf/RESULTS.md``, "A call's fixed cost" and "Bounds": one empty
kernel takes 8.3 us per call eval8, an empty partial + the real merge 24.7-25.6 us). Kernel time is the figure a
kernel change moves: the summed device durations of the kernels one call launched.

``measure(launch)``: ``calls`` calls of a case's launch, each alone inside its own
``torch.profiler.profile(activities=[ProfilerActivity.CUDA])``. torch's profiler reads CUPTI's activity
records, which hold every CUDA kernel of the process, MLX's included (the nodes of the CUDA graphs MLX's CUDA
backend launches are recorded one by one). For each call:

1. untimed, outside any trace: ``warmup`` calls before the first (JIT compilation, CUDA-graph
   instantiation); the inputs were built and evaluated before the launch existed (``perf.cases``);
   ``mx.synchronize()`` (torch references: ``torch.cuda.synchronize()``), so no work queued earlier runs
   inside the trace;
2. in the trace: the launch (MLX builds a lazy graph, nothing runs yet), ``mx.eval`` of its outputs and
   ``mx.synchronize()``, so every kernel of the call ran, and finished, inside it; the trace then holds that
   call and nothing else.

What counts (``device_events``): the trace's device events (``device_type`` CUDA) of activity ``kernel``,
``gpu_memset`` and ``gpu_memcpy``. Since the trace holds one call alone, each of them is that call's work: a
memset that fills an output (MLX's ``init_value``) or a copy the call makes is part of its device time, and
shows by name in the call's kernel list. Left out: ``gpu_user_annotation`` (a span laid over other device
events: counting it would count them twice) and every other kind. torch without ``activity_type`` on its
events: memcpy / memset by kineto's names (``Memcpy ...``, ``Memset ...``), user annotations by
``is_user_annotation``, every other device event a kernel. A duration is the event's ``device_time_total``
(torch >= 2.4; earlier ``cuda_time_total``), in microseconds: for a device event, its end minus its start
(read from its ``time_range`` where torch reports 0, for a profiler not told its device).

Sum, not span: one stream runs a call's kernels one after another, and their sum is its device busy time.
Where a CUDA graph runs independent nodes side by side (it may: ``sdpa_rows``' eight SDPA calls, dequantizing K
and V), the sum exceeds the span from the first start to the last end; the span is recorded beside it.

Consistency: every call must record the same kernels, names and counts. A call that does not (one more or
one less kernel, another kernel) is a ``KernelTimeError`` naming the case, the call and the difference: its
sample would be of other work. A call that recorded no device work is one too (CUPTI saw none of its kernels).

Inputs: a launch of ``perf.cases`` takes its group's input sets in turn, so consecutive calls read different
K/V, and set i is read again only after every other set. With 8 sets (``perf.run``'s groups, eval8) the 7
others pass through the H200's 50 MB L2 in between: every decode case of its suite holds >= 9.4 MB of K/V
(kvq4 8/1/N32k's 4-bit cache; bf16 8/1/D128/N32k and 32/8/D128/N4k hold 2 x Hkv x N x D x 2 = 16.8 MB), so
>= 66 MB pass between two reads of one set and each call reads its K/V from HBM. The argmax cases of one row
and 64 x 32000 (64 KB to 4.1 MB of logits; 7 x 4.1 = 29 MB) stay in L2 either way.

Against ncu (``perf/RESULTS.md``, "Kernel time"): ncu locks clocks and flushes caches per kernel; this trace
runs at the GPU's own clocks, one call after another, so its figures are the device time a decode step sees.

Availability (``availability()``): MLX's backend is CUDA and its default device the GPU, torch imports, and
``torch.profiler.supported_activities()`` holds CUDA (a CUDA build of torch that sees a device). Otherwise
``Availability.reason`` says which condition failed; ``perf.run`` prints and records it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perf.harness import TimingSamples, check_count, synchronizer

__all__ = ["ACTIVITIES", "KERNEL_CALLS", "KERNEL_WARMUP", "SMOKE_SHAPES", "Availability", "DeviceEvent",
           "KernelTime", "KernelTimeError", "availability", "cupti_trace", "device_events", "measure",
           "summarize_calls"]

# 20 calls per case: the call figure has 20 rounds (perf.run's SETTINGS), so the gate judges either figure with the same sample counts (20 against 20 per baseline
# process: the smallest one-sided Mann-Whitney p-value is 1 / C(40, 20) = 7e-12, far below alpha 0.01).
KERNEL_CALLS = 20
# 3 untimed calls before the first trace: the GPU suites' warm-up rounds (perf.run's SETTINGS). A case's call
# time ran just before, so its kernels are compiled; these absorb what a first call after it still does.
KERNEL_WARMUP = 3
# The kineto activities a call's device time is made of (module docstring), and the name each is kept under.
ACTIVITIES = {"kernel": "kernel", "gpu_memset": "memset", "gpu_memcpy": "memcpy"}
NAME_LIMIT = 240  # characters of a kernel name kept in records (demangled template names run to thousands)
RUNTIMES = ("mlx", "torch")


class KernelTimeError(ValueError):
    """A case whose calls cannot give kernel-time samples (no device work recorded, calls that differ)."""


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str  # why not, "" when available
    timer: str | None  # "cupti/torch.profiler <torch version>" when available

    def describe(self) -> str:
        return f"kernel time by {self.timer}" if self.available else f"unavailable: {self.reason}"


@dataclass(frozen=True)
class DeviceEvent:
    """One device activity of a trace: ``activity`` is ``kernel``, ``memset`` or ``memcpy``."""

    name: str
    activity: str
    seconds: float
    start_us: float | None = None
    end_us: float | None = None


@dataclass(frozen=True)
class KernelTime(TimingSamples):
    """Kernel-time samples of one case: ``samples_s[i]`` the summed device seconds of call i; ``kernels`` the
    (name, count) of every kernel one call launched, in first-launch order (the same for every call);
    ``spans_s`` first start to last end per call (None where the events carry no times); ``by_kernel_s`` per
    kernel name (``kernels``' order) its summed seconds in each call: where a call's time goes (a partial and its
    merge apart)."""

    samples_s: tuple[float, ...]
    kernels: tuple[tuple[str, int], ...]
    timer: str
    spans_s: tuple[float | None, ...] = ()
    by_kernel_s: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def kernel_medians_s(self) -> dict[str, float]:
        """Per kernel name, the median over calls of its summed seconds in a call."""
        return {name: float(np.median(seconds)) for name, seconds in self.by_kernel_s}

    @property
    def per_call(self) -> int:
        return sum(count for _, count in self.kernels)

    @property
    def span_median_s(self) -> float | None:
        spans = [s for s in self.spans_s if s is not None]
        return float(np.median(spans)) if spans and len(spans) == len(self.spans_s) else None

    def gbps(self, nbytes: int) -> float:
        """``nbytes`` (the problem's compulsory bytes, ``perf.harness``) per median kernel time, GB/s."""
        return nbytes / self.median_s / 1e9

    def as_dict(self) -> dict:
        """The fields a baseline entry and a run document hold (``perf/baseline.py``)."""
        return {"kernel_samples_s": list(self.samples_s), "kernel_median_s": self.median_s,
                "kernel_iqr_s": self.iqr_s, "kernels_per_call": self.per_call,
                "kernel_names": [[name, count] for name, count in self.kernels], "kernel_timer": self.timer,
                "kernel_span_median_s": self.span_median_s}


def _timer_name(version: str | None) -> str:
    return f"cupti/torch.profiler {version or 'unknown'}"


def availability() -> Availability:
    """Whether kernel time can be measured here, and if not why (module docstring)."""
    from impl import arms as arm_registry
    from reports.environment import mlx_backend

    backend = mlx_backend()
    if backend != "cuda":
        return Availability(False, f"MLX's GPU backend here is {backend!r}, not 'cuda' (kernel time is read from "
                                   "CUPTI, NVIDIA's profiling interface)", None)
    if arm_registry.current_device_name() != "gpu":
        return Availability(False, "MLX's default device is the CPU (--device cpu): no CUDA kernel runs", None)
    try:
        import torch
        from torch.profiler import ProfilerActivity, supported_activities
    except ImportError as exc:
        return Availability(False, f"torch is not importable ({exc}); torch.profiler is what reads CUPTI "
                                   "(install torch with CUDA)", None)
    if ProfilerActivity.CUDA not in supported_activities():
        return Availability(False, f"torch {torch.__version__} cannot profile CUDA (torch.profiler."
                                   "supported_activities() lacks CUDA: a CPU-only build, or no CUDA device)", None)
    return Availability(True, "", _timer_name(torch.__version__))


def cupti_trace():
    """One trace: ``torch.profiler.profile(activities=[ProfilerActivity.CUDA])`` (its ``events()`` after exit)."""
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CUDA])


def _is_device(event) -> bool:
    kind = getattr(event, "device_type", None)
    return getattr(kind, "name", kind) == "CUDA"  # torch's DeviceType (pybind enum) has a name


def _activity(event) -> str | None:
    """``kernel`` / ``memset`` / ``memcpy``, or None for a device event that is not the call's work."""
    activity = getattr(event, "activity_type", None)
    if activity is not None:
        return ACTIVITIES.get(str(activity))
    if getattr(event, "is_user_annotation", False):
        return None
    name = str(getattr(event, "name", ""))
    return "memcpy" if name.startswith("Memcpy") else "memset" if name.startswith("Memset") else "kernel"


def _duration_us(event) -> float:
    """The event's ``device_time_total`` (``cuda_time_total`` before torch 2.4), microseconds; its time range
    where that is 0 (torch reports 0 for an event of a profiler that was not told its device, ``use_device``)."""
    value = None
    for field in ("device_time_total", "cuda_time_total"):
        value = getattr(event, field, None)
        if value is not None:
            break
    span = getattr(event, "time_range", None)
    if span is not None and not value:
        return float(span.end - span.start)
    if value is None:
        raise TypeError(f"event {getattr(event, 'name', event)!r} carries no device time (device_time_total, "
                        "cuda_time_total or time_range)")
    return float(value)


def device_events(events: Iterable) -> list[DeviceEvent]:
    """The call's device work in a trace's ``events`` (torch ``FunctionEvent``s, or objects with their fields),
    in start order where the events carry times (module docstring, "What counts")."""
    if isinstance(events, (str, bytes)) or not isinstance(events, Iterable):
        raise TypeError(f"events must be an iterable of profiler events, got {type(events).__name__}")
    kept = []
    for event in events:
        if not _is_device(event):
            continue
        activity = _activity(event)
        if activity is None:
            continue
        duration = _duration_us(event)
        if not 0 <= duration < float("inf"):
            raise ValueError(f"device event {event.name!r} has duration {duration!r} us")
        span = getattr(event, "time_range", None)
        start, end = (float(span.start), float(span.end)) if span is not None else (None, None)
        name = str(event.name)
        kept.append(DeviceEvent(name if len(name) <= NAME_LIMIT else name[:NAME_LIMIT - 3] + "...", activity,
                                duration * 1e-6, start, end))
    if all(e.start_us is not None for e in kept):
        kept.sort(key=lambda e: e.start_us)
    return kept


def _named(event: DeviceEvent) -> str:
    return event.name if event.activity == "kernel" else f"{event.activity}: {event.name}"


def _kernels(events: list[DeviceEvent]) -> tuple[tuple[str, int], ...]:
    counts = Counter(_named(e) for e in events)
    order = list(dict.fromkeys(_named(e) for e in events))
    return tuple((name, counts[name]) for name in order)


def summarize_calls(per_call: Sequence[Iterable], *, case_id: str, timer: str) -> KernelTime:
    """Kernel-time samples from one trace's events per call (``device_events`` of each); a call without device
    work, or whose kernels differ from the first call's, is a ``KernelTimeError`` naming ``case_id``."""
    if not isinstance(case_id, str) or not case_id:
        raise TypeError(f"case_id must be a non-empty str, got {case_id!r}")
    if isinstance(per_call, (str, bytes)) or not isinstance(per_call, Sequence) or not per_call:
        raise TypeError(f"per_call must be a non-empty sequence of per-call event lists, got "
                        f"{type(per_call).__name__}")
    samples, spans, first, by_kernel = [], [], None, []
    for i, events in enumerate(per_call):
        kept = device_events(events)
        if not kept:
            raise KernelTimeError(f"{case_id}: call {i + 1} of {len(per_call)} recorded no device work (CUPTI saw "
                                  "none of its kernels: is another profiler holding CUPTI?)")
        kernels = _kernels(kept)
        if first is None:
            first = kernels
        elif Counter(dict(kernels)) != Counter(dict(first)):
            # The same kernels in another start order are the same work: a call of several streams (MLX's
            # gather + SDPA controls on the H200) started its kernels in a different order in ~1 call of 20.
            count, expected = sum(c for _, c in kernels), sum(c for _, c in first)
            extra = sorted((Counter(dict(kernels)) - Counter(dict(first))).items())
            missing = sorted((Counter(dict(first)) - Counter(dict(kernels))).items())
            raise KernelTimeError(f"{case_id}: call {i + 1} of {len(per_call)} launched {count} kernels, call 1 "
                                  f"{expected}; beyond call 1's: {extra}, missing: {missing}")
        total = sum(e.seconds for e in kept)
        if not total > 0:
            raise KernelTimeError(f"{case_id}: call {i + 1} of {len(per_call)} recorded zero device time")
        samples.append(total)
        seconds = Counter()
        for e in kept:
            seconds[_named(e)] += e.seconds
        by_kernel.append(seconds)
        timed = [e for e in kept if e.start_us is not None and e.end_us is not None]
        spans.append((max(e.end_us for e in timed) - min(e.start_us for e in timed)) * 1e-6
                     if len(timed) == len(kept) else None)
    return KernelTime(tuple(samples), first, timer, tuple(spans),
                      tuple((name, tuple(call[name] for call in by_kernel)) for name, _ in first))


def _drain(runtime: str) -> Callable[[], None]:
    if runtime == "mlx":
        import mlx.core as mx

        return mx.synchronize
    import torch

    return torch.cuda.synchronize


def measure(launch: Callable[[], object], *, case_id: str, runtime: str = "mlx", calls: int = KERNEL_CALLS,
            warmup: int = KERNEL_WARMUP, trace: Callable[[], object] | None = None,
            timer: str | None = None) -> KernelTime:
    """Kernel-time samples of ``calls`` calls of ``launch`` (a case's launch: ``perf.harness.Case.build()``),
    each evaluated alone in its own trace after ``warmup`` untimed calls (module docstring). ``trace``: a
    factory of trace context managers whose value has ``events()`` (default ``cupti_trace``); ``timer``: the
    name recorded for it (default ``cupti/torch.profiler <torch version>``)."""
    if not callable(launch):
        raise TypeError(f"launch must be callable, got {type(launch).__name__}")
    if runtime not in RUNTIMES:
        raise ValueError(f"runtime must be one of {RUNTIMES}, got {runtime!r}")
    if not isinstance(case_id, str) or not case_id:
        raise TypeError(f"case_id must be a non-empty str, got {case_id!r}")
    calls = check_count("calls", calls, 1)
    warmup = check_count("warmup", warmup, 0)
    if trace is not None and not callable(trace):
        raise TypeError(f"trace must be a callable returning a trace context, got {type(trace).__name__}")
    if timer is None:
        from reports.environment import package_version

        timer = _timer_name(package_version("torch"))
    trace = trace or cupti_trace
    sync, drain = synchronizer(runtime), _drain(runtime)
    for _ in range(warmup):
        sync([launch()])
    drain()
    per_call = []
    for _ in range(calls):
        with trace() as profile:
            out = launch()
            sync([out])
            drain()
        del out
        per_call.append(list(profile.events()))
    return summarize_calls(per_call, case_id=case_id, timer=timer)


# --- the smoke check the H200 runs --------------------------------------------------------------

# The paged bf16 shapes of the H200 suite (perf.shapes.H200_PAGED) the smoke check measures: the two headline
# shapes, the long and the short D128 context, the MQA-like 8/1 layout.
SMOKE_SHAPES = ((32, 8, 1, 128, 32768), (32, 8, 1, 128, 131072), (8, 1, 1, 128, 32768), (16, 8, 1, 256, 131072),
                (32, 8, 1, 128, 4096))
SMOKE_KERNELS = ("paged_attention", "sdpa")  # the direct paged kernel; MLX's SDPA over contiguous K/V


def smoke(*, calls: int = KERNEL_CALLS, log=print) -> dict:
    """Kernel time of ``paged_attention[cuda]`` and ``sdpa[mlx]`` (contiguous K/V) at ``SMOKE_SHAPES``, each call
    on its own input set (up to ``calls`` sets, within ``perf.cases``'s memory budget). ``{case id: fields}``;
    a case that fails holds ``{"error": ...}``."""
    from impl import arms as arm_registry
    from perf.cases import paged_group
    from perf.shapes import DecodeShape

    available = availability()
    if not available.available:
        raise KernelTimeError(f"kernel time {available.describe()}")
    status = arm_registry.discover_arms()["cuda"]
    if not status.available:
        raise KernelTimeError(f"the cuda arm is unavailable here: {status.reason}")
    arms = ["cuda"]
    out = {}
    for dims in SMOKE_SHAPES:
        group = paged_group(DecodeShape(*dims), arms, copies=calls)
        try:
            for case in group.cases:
                if case.kernel not in SMOKE_KERNELS:
                    continue
                try:
                    result = measure(case.build(), case_id=case.id, runtime=case.runtime, calls=calls,
                                     timer=available.timer)
                except Exception as exc:  # one case's failure is reported; the others still run
                    out[case.id] = {"error": f"{type(exc).__name__}: {exc}"}
                    log(f"{case.id}: {out[case.id]['error']}")
                    continue
                sets = len(group.inputs())
                out[case.id] = {**result.as_dict(), "bytes": case.bytes, "kernel_gbps": result.gbps(case.bytes),
                                "input_sets": sets}
                names = ", ".join(f"{name[:60]} x{count}" for name, count in result.kernels)
                span = result.span_median_s
                log(f"{case.id}: kernel {result.median_s * 1e6:.1f} us median (IQR {result.iqr_s * 1e6:.1f}), "
                    f"{result.gbps(case.bytes):,.0f} GB/s; {result.per_call} per call ({names})"
                    + (f"; span {span * 1e6:.1f} us" if span is not None else "")
                    + f"; {len(result.samples_s)} calls on {sets} input sets")
        finally:
            group.release()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.kernel_time", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="measure the paged and MLX SDPA smoke cases")
    parser.add_argument("--calls", type=int, default=KERNEL_CALLS, help="traced calls per case")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"--calls must be >= 1, got {args.calls}")
    available = availability()
    print(f"perf.kernel_time: {available.describe()}", file=sys.stdout if available.available else sys.stderr)
    if not available.available:
        return 2
    if not args.smoke:
        return 0
    try:
        cases = smoke(calls=args.calls)
    except KernelTimeError as exc:
        print(f"perf.kernel_time: {exc}", file=sys.stderr)
        return 2
    if args.json is not None:
        args.json.write_text(json.dumps({"timer": available.timer, "calls": args.calls, "cases": cases},
                                        indent=1, sort_keys=True) + "\n")
    failed = [cid for cid, fields in cases.items() if "error" in fields]
    print(f"perf.kernel_time: {len(cases) - len(failed)} cases measured, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
