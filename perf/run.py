"""Run a benchmark suite serially, compare it with this device's baseline, write perf records.

    python -m perf.run [--suite auto|cpu|gpu|h200] [--rounds R] [--device cpu|gpu] [--protocol eval|pipelined]
                       [--inputs distinct|shared] [--results PATH [--fresh]] [--save RUN.json]
                       [--calibration CAL.json] [--torch] [--kernel-time | --no-kernel-time] [--kernel-calls N]
                       [--figure call|kernel]
    python -m perf.run --gate --results reports/out/results.jsonl [--baseline FILE] [--figure call|kernel]

* Suites (grids in ``perf/shapes.py``): ``cpu`` (few small shapes, the graph
  arm; a smoke check), ``gpu`` (the full grid, compiled arms), ``h200`` (the
  subset of ``perf/RESULTS.md``), ``auto`` (``gpu`` on a GPU, else ``cpu``).
* Every case runs alone in this process, one after another (never under
  pytest-xdist: concurrent work on the device would be measured too): build
  (inputs allocated and evaluated, untimed), ``warmup`` untimed rounds (JIT
  compilation), ``rounds`` timed rounds each ending in ``mx.eval``. The copy
  bandwidth (``perf.bandwidth``) is measured first.
* Against the baseline of this device key (``perf/baselines/<key>.json``, or
  ``--baseline FILE``: any baseline document of this device key, e.g. a trial
  pooled one), each case it holds is judged by ``perf.regression.judge``
  (``compare_pooled`` against the baseline's processes and floor); the perf
  record (``reports/SCHEMA.md``) carries the verdict, plus
  ``effect_threshold`` (the effect it had to exceed), ``process_spread`` and
  ``baseline_processes`` (``perf/regression.py``). ``--results`` appends the records
  (``--fresh``: to a new file that starts with an environment record, so
  ``python -m reports.summary DIR`` can render it). Exit status 1 when a case
  regressed, 0 otherwise (2 for bad arguments).
* Kernel time (``perf.kernel_time``): after a case's call time, ``--kernel-calls`` (default 20) calls of it
  are each traced alone with torch.profiler (CUPTI) and the device durations of their kernels summed per
  call: the perf record's ``kernel_*`` fields beside the call figure, and ``kernel_samples_s`` in ``--save``'s
  document. Default: measured where ``perf.kernel_time.availability()`` says it can be (MLX's CUDA backend,
  torch with CUDA profiling), and where it cannot the run says why at its start and every record carries
  ``kernel_status: "unavailable"`` with the reason; ``--kernel-time`` makes it required (unavailable: exit
  status 2), ``--no-kernel-time`` leaves it out (``kernel_status: "off"``). A case whose traced calls fail
  (no kernels recorded, calls launching different kernels) keeps its call figure and records
  ``kernel_status: "error"`` with the message naming the case. Call time stays recorded as before; in eval8
  its floor is MLX's per-launch host cost (perf/RESULTS.md's bounds), so it is not a kernel's target.
* ``--figure call|kernel``: the figure the regression gate judges, for every case; default: the baseline's
  choice per case (``perf.baseline.figure_of``: an entry's ``figure``, ``settings.figure``, else ``call``).
  The record's ``figure`` says which was judged. A case whose figure is ``kernel`` but has no kernel samples
  (here or in the baseline) is not judged: the run lists it, and ``--gate`` exits 2.
* ``--gate`` (``make gate``): when this device key has a baseline, rerun exactly
  its cases (same suite, rounds and warm-up) and append their records to the
  gate's results, where a ``regressed: true`` record fails the verdict; without a
  baseline say so and do nothing (``--no-baseline`` with it is refused: a gate that judges nothing). A
  baseline case that did not run (it raised, or the suite no longer has it)
  was not judged: the gate then exits with status 2, which fails ``make gate``.
* ``--save RUN.json``: the run as a baseline document (``perf/baseline.py``;
  torch cases excluded: they are references, not this project's code), written
  again after every shape so an interrupted run keeps what it measured.
  ``python -m perf.baseline update --from RUN.json`` stores it.
* ``--calibration CAL.json``: after each shape, every case is timed again
  (``a2``, an unchanged kernel: an A/A pair with the first pass ``a1``) and once
  more slowed by 20% (``slowed``: each round's wait followed by a busy wait of
  0.2 x a1's median x the calls per round). ``records/h200-calibration/`` holds
  such files from the H200; the gate's calibration tests replay them.
* Rounds: ``SETTINGS`` per suite (rounds, warm-up rounds, calls per round);
  a timed round is that many calls then one wait (``perf.harness.batched``),
  and a sample is the round's time / calls.
* ``--protocol``: ``eval`` (the default, above: what baselines and the gate use)
  or ``pipelined`` (``perf.harness.Pipelined``: a round's calls are submitted
  and the previous round's awaited, so host time overlaps device time; MLX cases
  only, torch references are skipped). A run is compared only with a baseline of
  the same protocol and calls per round (anything else is refused: the per-call
  times would not be comparable); documents record the protocol in ``settings``.
* ``--batch 1``: one call per round. A round's calls are independent, so with 8 of them
  their threadgroups fill the GPU for each other; a decode step's layers call a kernel
  one after another, each call filling the GPU alone. Check a split or partition default
  with one call per round as well: on the H200, 8-16 multi-query splits won with 8 calls
  per round and lost 1.3-2.5x with one.
* ``--inputs``: ``distinct`` (the default) gives each call of a round its own input set
  (``perf.cases``: up to ``batch`` sets, within a quarter of the device's memory), as a
  decode step's layers read different caches; ``shared`` runs every call on one set, so
  a round's concurrent calls share K/V in the GPU's cache (``perf.cases`` has the H200
  figures). With one call per round there is one
  set either way, recorded as ``shared``. A baseline is compared only with runs of its own
  setting (absent in a document: ``shared``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx

from impl import arms as arm_registry
from perf import kernel_time as kernel_timing
from perf import shapes
from perf.bandwidth import CopyBandwidth, copy_bandwidth
from perf.baseline import FIGURES, SCHEMA, device_key, figure_of, has_figure, load_baseline, validate_baseline
from perf.cases import Group, argmax_group, kvq4_group, multi_query_group, paged_group
from perf.harness import PROTOCOLS, Measurement, Pipelined, batched, check_count, perf_record, time_call
from perf.regression import ALPHA, MIN_EFFECT, judge
from reports.recorder import append_record, reset

__all__ = ["INPUTS", "SETTINGS", "SUITES", "RunResult", "effective_inputs", "environment_record", "resolve_suite",
           "run_suite", "suite_groups"]

SUITES = ("auto", "cpu", "gpu", "h200")
# (rounds, warmup rounds, calls per round) per suite. The CPU's few rounds keep `make test`-sized
# runs short; its calls take milliseconds, one per round. A GPU's kernels take micro- to
# milliseconds: 20 rounds cost little and give the test its power, and a round is 8 calls and one
# wait (a decode step evaluates many layers' attention in one graph), which also spreads MLX's
# per-eval host overhead (launch, graph, allocation: 0.1-0.7 ms on the H200, varying) over them.
SETTINGS = {"cpu": (7, 1, 1), "gpu": (20, 3, 8), "h200": (20, 3, 8)}
SLOWDOWN = 0.20  # the calibration's deliberately slowed variant: +20% of a1's median
INPUTS = ("distinct", "shared")  # a round's calls on their own input sets, or all on one (module docstring)
TORCH_BACKENDS = ("default", "flash", "cudnn")


def resolve_suite(suite: str) -> str:
    """``suite``, with ``auto`` made ``gpu`` on a GPU device and ``cpu`` otherwise."""
    if suite not in SUITES:
        raise ValueError(f"suite must be one of {SUITES}, got {suite!r}")
    if suite == "auto":
        return "gpu" if arm_registry.current_device_name() == "gpu" else "cpu"
    return suite


def suite_groups(suite: str, *, torch: bool = False, copies: int = 1) -> Iterator[Group]:
    """The groups of ``suite`` for the arms available here (compiled arms on a GPU, graph on the CPU), each with
    up to ``copies`` input sets (``perf.cases``)."""
    suite = resolve_suite(suite)
    available = arm_registry.available_arms()
    compiled = [a for a in available if a != "graph"]
    arms = compiled if compiled else ["graph"]  # graph on a GPU would time MLX's op graph, not the kernel
    prefix = suite.upper()
    torch_backends = TORCH_BACKENDS if torch else ()
    for shape in getattr(shapes, f"{prefix}_PAGED"):
        yield paged_group(shape, arms, torch_backends=torch_backends, copies=copies)
    for shape in getattr(shapes, f"{prefix}_PAGED_QUANTIZED"):
        for bits in (4, 8):
            yield paged_group(shape, arms, bits=bits, copies=copies)
    for shape in getattr(shapes, f"{prefix}_KVQ4"):
        yield kvq4_group(shape, arms, copies=copies)
    for shape in getattr(shapes, f"{prefix}_MULTI_QUERY"):
        yield multi_query_group(shape, arms, copies=copies)
    for shape in getattr(shapes, f"{prefix}_ARGMAX"):
        yield argmax_group(shape, arms, copies=copies)


@dataclass
class RunResult:
    suite: str
    device_key: str
    copy: CopyBandwidth
    rounds: int
    warmup: int
    batch: int
    protocol: str = "eval"
    inputs: str = "distinct"
    measurements: list[Measurement] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # case id -> why it did not run
    calibration: dict[str, dict] = field(default_factory=dict)
    records: list[dict] = field(default_factory=list)
    kernel_calls: int | None = None  # traced calls per case where kernel time was measured, else None
    kernel_errors: dict[str, str] = field(default_factory=dict)  # case id -> why its kernel time failed
    unjudged: dict[str, str] = field(default_factory=dict)  # baseline case id -> why its figure was not judged

    def document(self) -> dict:
        """This run as a baseline document (``perf/baseline.py``); torch references left out."""
        return {
            "schema": SCHEMA,
            "device_key": self.device_key,
            "device": {k: v for k, v in mx.device_info(mx.default_device()).items()},
            "environment": _environment_fields(),
            "copy_bandwidth": self.copy.as_dict(),
            "settings": {"suite": self.suite, "rounds": self.rounds, "warmup": self.warmup, "batch": self.batch,
                         "protocol": self.protocol, "inputs": self.inputs,
                         **({"kernel_calls": self.kernel_calls, "kernel_warmup": kernel_timing.KERNEL_WARMUP}
                            if self.kernel_calls is not None else {})},
            "benchmarks": {m.case.id: m.as_dict() for m in self.measurements if m.case.arm != "torch"},
            "references": {m.case.id: m.as_dict() for m in self.measurements if m.case.arm == "torch"},
            "skipped": dict(self.skipped),
        }

    @property
    def regressed(self) -> list[dict]:
        return [r for r in self.records if r.get("regressed")]


def _environment_fields() -> dict:
    from reports.environment import git_state, package_version

    return {"mlx": mx.__version__, "torch": package_version("torch"), "python": platform.python_version(),
            "platform": platform.platform(), "git": git_state(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def environment_record(device: str) -> dict:
    """An environment record (reports/SCHEMA.md) for a results file perf.run starts itself."""
    import numpy
    import scipy

    from reports.environment import run_context

    statuses = arm_registry.discover_arms(device)
    return {"kind": "environment", "time": time.time(), "device": device, "mlx": mx.__version__,
            "numpy": numpy.__version__, "scipy": scipy.__version__, "hypothesis": None,
            "python": platform.python_version(), "platform": platform.platform(), "machine": platform.machine(),
            "profile": None, "arms": {n: {"available": s.available, "reason": s.reason} for n, s in statuses.items()},
            **run_context()}


def effective_inputs(inputs: str, batch: int) -> str:
    """The input-set setting a run of ``batch`` calls per round records: one call per round reads one set."""
    return "distinct" if inputs == "distinct" and batch > 1 else "shared"


def check_comparable(stored: dict | None, batch: int, protocol: str, inputs: str = "distinct") -> None:
    """A baseline measured with other calls per round, another protocol or other input sets cannot judge this
    run: ValueError. (Documents without ``inputs`` were measured with ``shared``; so is one call per round.)"""
    if not stored:
        return
    inputs = effective_inputs(inputs, batch)
    settings = stored.get("settings") or {}
    theirs = (settings.get("batch", batch), settings.get("protocol", "eval"), settings.get("inputs", "shared"))
    if theirs != (batch, protocol, inputs):
        raise ValueError(f"the baseline was measured with batch={theirs[0]}, protocol={theirs[1]!r}, "
                         f"inputs={theirs[2]!r}; this run uses batch={batch}, protocol={protocol!r}, "
                         f"inputs={inputs!r}: per-call times are not comparable "
                         "(pass --no-baseline, or a baseline of the same settings)")


def run_suite(suite: str = "auto", *, rounds: int | None = None, warmup: int | None = None, batch: int | None = None,
              protocol: str = "eval", inputs: str = "distinct", device: str | None = None,
              torch: bool = False, only: set[str] | None = None, baseline: dict | None | bool = True,
              results: Path | None = None, save: Path | None = None, calibration: Path | None = None,
              alpha: float = ALPHA, min_effect: float = MIN_EFFECT, copy: CopyBandwidth | None = None,
              kernel_time: bool | None = None, kernel_calls: int = kernel_timing.KERNEL_CALLS,
              figure: str | None = None, fresh: bool = False, log=print) -> RunResult:
    """Run ``suite`` (module docstring); ``baseline=True`` loads this device's, False/None compares with none,
    a dict is used as the baseline. ``only``: run just these case ids. ``copy``: a copy bandwidth measured
    earlier (default: measure it now). ``inputs``: ``INPUTS`` (module docstring). ``kernel_time``: None
    measures it where available, True requires it (ValueError naming why not), False leaves it out;
    ``kernel_calls`` traced calls per case. ``figure``: what the gate judges (``perf.baseline.FIGURES``; None:
    the baseline's choice per case). ``fresh``: start ``results`` anew with an environment record, once the
    arguments are checked (a refused run leaves the file as it was)."""
    if device is not None:
        arm_registry.use_device(device)
    resolved = resolve_suite(suite)
    default_rounds, default_warmup, default_batch = SETTINGS[resolved]
    rounds = default_rounds if rounds is None else rounds
    warmup = default_warmup if warmup is None else warmup
    batch = default_batch if batch is None else batch
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if inputs not in INPUTS:
        raise ValueError(f"inputs must be one of {INPUTS}, got {inputs!r}")
    inputs = effective_inputs(inputs, batch)
    if protocol == "pipelined" and calibration is not None:
        raise ValueError("calibration samples are taken with protocol 'eval' (the gate's)")
    if kernel_time is not None and not isinstance(kernel_time, bool):
        raise TypeError(f"kernel_time must be None, True or False, got {kernel_time!r}")
    kernel_calls = check_count("kernel_calls", kernel_calls, 1)
    if figure is not None and figure not in FIGURES:
        raise ValueError(f"figure must be None or one of {FIGURES}, got {figure!r}")
    if figure == "kernel" and kernel_time is False:
        raise ValueError("figure 'kernel' judges kernel time, which kernel_time=False leaves out")
    available = kernel_timing.availability() if kernel_time is not False else None
    if available is not None and not available.available and (kernel_time or figure == "kernel"):
        raise ValueError(f"kernel time was asked for ({'figure kernel' if figure == 'kernel' else 'kernel_time'}) "
                         f"but is {available.describe()}")
    measure_kernels = available is not None and available.available
    if measure_kernels:
        kernel_off = None
        kernel_text = f"{available.describe()}, {kernel_calls} calls per case"
    elif available is None:
        kernel_off, kernel_text = ("off", None), "off (--no-kernel-time)"
    else:
        kernel_off, kernel_text = ("unavailable", available.reason), available.describe()
    key = device_key()
    stored = load_baseline(key) if baseline is True else (baseline or None)
    check_comparable(stored, batch, protocol, inputs)
    if fresh and results is not None:  # only now: every check above refuses before anything is written
        reset(results)
        append_record(environment_record(arm_registry.current_device_name()), results)
    copy = copy or copy_bandwidth()
    log(f"perf: device key {key}, suite {resolved}, {rounds} rounds of {batch} call(s) after {warmup} warm-up "
        f"(protocol {protocol}, inputs {inputs}); "
        f"copy bandwidth {copy.gbps:.1f} GB/s ({copy.method}); "
        f"baseline: {'yes, %d cases' % len(stored['benchmarks']) if stored else 'none'}; kernel time: {kernel_text}")
    run = RunResult(resolved, key, copy, rounds, warmup, batch, protocol, inputs,
                    kernel_calls=kernel_calls if measure_kernels else None)

    def timed(launch, runtime, extra_s=0.0):
        if protocol == "eval":
            rounds_s = time_call(batched(launch, runtime, batch, extra_s), rounds=rounds, warmup=warmup)
        elif runtime != "mlx":
            raise ValueError(f"protocol 'pipelined' times MLX calls only, not runtime {runtime!r}")
        else:
            call = Pipelined(launch, batch)
            rounds_s = time_call(call, rounds=rounds, warmup=warmup)
            call.finish()
        return [t / batch for t in rounds_s]

    for group in suite_groups(resolved, torch=torch, copies=batch if inputs == "distinct" else 1):
        built = []
        for case in group.cases:
            if only is not None and case.id not in only:
                continue
            try:
                call = case.build()
                samples = timed(call, case.runtime)
            except Exception as exc:  # a backend that refuses a shape is reported, not fatal
                run.skipped[case.id] = f"{type(exc).__name__}: {exc}"[:300]
                log(f"  skip {case.id}: {run.skipped[case.id]}")
                continue
            built.append((case, call))
            kernel, kernel_status = None, kernel_off
            if measure_kernels:
                try:
                    kernel = kernel_timing.measure(call, case_id=case.id, runtime=case.runtime, calls=kernel_calls,
                                                   timer=available.timer)
                except Exception as exc:  # the call figure stands; the record says why kernel time does not
                    kernel_status = ("error", f"{type(exc).__name__}: {exc}"[:300])
                    run.kernel_errors[case.id] = kernel_status[1]
                    log(f"  kernel time of {case.id}: {kernel_status[1]}")
            measurement = Measurement(case, tuple(samples), kernel)
            run.measurements.append(measurement)
            verdict = _verdict(run, stored, measurement, kernel_status, figure, alpha, min_effect)
            sets = len(group.inputs())
            record = perf_record(measurement, copy_gbps=copy.gbps, device_key=key, verdict=verdict, batch=batch,
                                 protocol=protocol, inputs=inputs, input_sets=sets,
                                 kernel_status=None if kernel_status is None else kernel_status[0],
                                 kernel_reason=None if kernel_status is None else kernel_status[1])
            run.records.append(record)
            if results is not None:
                append_record(record, results)
            log(f"  {case.id}: {measurement.median_s * 1e3:.4g} ms (IQR {measurement.iqr_s * 1e3:.2g}), "
                f"{measurement.gbps:.1f} GB/s = {record['pct_copy_bw']:.1f}% of copy"
                + (f" ({sets} input sets: the memory budget)" if inputs == "distinct" and sets < batch else "")
                + (f"; kernel {kernel.median_s * 1e3:.4g} ms (IQR {kernel.iqr_s * 1e3:.2g}, {kernel.per_call} per "
                   f"call), {record['kernel_gbps']:.1f} GB/s" if kernel is not None else "")
                + (f"; {verdict.describe()}" if verdict else "")
                + (f"; not judged: {run.unjudged[case.id]}" if case.id in run.unjudged else ""))
        if calibration is not None:
            for case, call in built:
                a1 = next(m for m in run.measurements if m.case.id == case.id)
                a2 = timed(call, case.runtime)
                slow = timed(call, case.runtime, extra_s=SLOWDOWN * a1.median_s * batch)
                run.calibration[case.id] = {"a1": list(a1.samples_s), "a2": a2, "slowed": slow,
                                            "slowdown": SLOWDOWN, "slow_by_s": SLOWDOWN * a1.median_s}
            _write_json(calibration, {"device_key": key, "suite": resolved, "rounds": rounds, "warmup": warmup,
                                      "batch": batch, "inputs": inputs,
                                      "method": f"a1, a2: the same call timed twice; slowed: call + busy wait of "
                                                f"{SLOWDOWN} x median(a1)",
                                      "cases": run.calibration})
        del built
        group.release()
        if save is not None:
            _write_json(save, run.document())
    return run


def _verdict(run: RunResult, stored: dict | None, measurement: Measurement, kernel_status, figure: str | None,
             alpha: float, min_effect: float):
    """The gate's verdict on one measurement against ``stored``, on the figure ``figure_of`` chooses; None,
    with the reason in ``run.unjudged``, when that figure cannot be judged (no kernel samples here or there)."""
    case_id = measurement.case.id
    entry = ((stored or {}).get("benchmarks") or {}).get(case_id)
    if entry is None:
        return None
    chosen = figure_of(stored, case_id, figure)
    if chosen == "kernel":
        if measurement.kernel is None:
            status, reason = kernel_status or ("off", None)
            run.unjudged[case_id] = f"its figure is kernel time, {status} here" + (f" ({reason})" if reason else "")
            return None
        if not has_figure(entry, "kernel"):
            run.unjudged[case_id] = "its figure is kernel time, and the baseline holds no kernel samples of it"
            return None
        return judge(measurement.kernel.samples_s, stored, case_id, figure="kernel", alpha=alpha,
                     min_effect=min_effect)
    return judge(measurement.samples_s, stored, case_id, figure="call", alpha=alpha, min_effect=min_effect)


def _write_json(path: Path, document: dict) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    try:
        temp.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
        os.replace(temp, path)
    except BaseException:  # the path keeps its old document (or none), and no temporary file stays beside it
        temp.unlink(missing_ok=True)
        raise


def _output_problem(path: Path) -> str | None:
    """Why ``path`` cannot be written as a file (a folder, or below something that is not a folder), else None:
    checked before the run, so a bad path is refused before anything is measured or written."""
    path = Path(path)
    if path.is_dir():
        return f"{path} is a folder, not a file"
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        return f"{path}: {parent} is not a folder"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.run", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=SUITES, default="auto")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None, help="calls per timed round")
    parser.add_argument("--protocol", choices=PROTOCOLS, default=None,
                        help="how a round waits: eval (default, the gate's) or pipelined")
    parser.add_argument("--inputs", choices=INPUTS, default=None,
                        help="a round's calls on their own input sets (distinct, default) or all on one (shared)")
    parser.add_argument("--device", choices=arm_registry.DEVICES, default=None)
    parser.add_argument("--results", type=Path, default=None, help="append perf records to this results.jsonl")
    parser.add_argument("--fresh", action="store_true", help="start --results anew with an environment record")
    parser.add_argument("--save", type=Path, default=None, help="write the run as a baseline document")
    parser.add_argument("--calibration", type=Path, default=None, help="write A/A and slowed samples here")
    parser.add_argument("--torch", action="store_true", help="also time torch's SDPA (CUDA) as a reference")
    parser.add_argument("--no-baseline", action="store_true", help="do not compare with the stored baseline")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="judge against this baseline document instead of perf/baselines/<device key>.json")
    parser.add_argument("--gate", action="store_true", help="rerun the baseline's cases only; no baseline: no-op")
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--min-effect", type=float, default=MIN_EFFECT)
    parser.add_argument("--kernel-time", action=argparse.BooleanOptionalAction, default=None,
                        help="record each case's kernel time (CUPTI through torch.profiler); default: where "
                             "available, saying why not elsewhere")
    parser.add_argument("--kernel-calls", type=int, default=None,
                        help=f"traced calls per case for kernel time (default {kernel_timing.KERNEL_CALLS})")
    parser.add_argument("--figure", choices=FIGURES, default=None,
                        help="the figure the gate judges: call or kernel time (default: the baseline's per case)")
    args = parser.parse_args(argv)
    for name, value, low in (("--rounds", args.rounds, 1), ("--batch", args.batch, 1), ("--warmup", args.warmup, 0),
                             ("--kernel-calls", args.kernel_calls, 1)):
        if value is not None and value < low:
            parser.error(f"{name} must be >= {low}, got {value}")
    if not 0 < args.alpha < 1:
        parser.error(f"--alpha must be a significance level in (0, 1), got {args.alpha}")
    if not 0 <= args.min_effect < float("inf"):
        parser.error(f"--min-effect must be a non-negative finite fraction, got {args.min_effect}")
    if args.figure == "kernel" and args.kernel_time is False:
        parser.error("--figure kernel judges kernel time, which --no-kernel-time leaves out")
    if args.gate and args.no_baseline:  # a gate that compares with nothing would judge nothing and pass
        parser.error("--gate judges against the baseline, which --no-baseline leaves out")
    for name, path in (("--results", args.results), ("--save", args.save), ("--calibration", args.calibration)):
        problem = None if path is None else _output_problem(path)
        if problem:
            parser.error(f"{name}: {problem}")
    if args.device is not None:
        arm_registry.use_device(args.device)
    suite, rounds, warmup, batch, only = args.suite, args.rounds, args.warmup, args.batch, None
    kernel_calls = args.kernel_calls
    protocol, inputs = args.protocol, args.inputs
    stored = True  # run_suite: this device key's committed baseline
    if args.baseline is not None:
        try:
            stored = validate_baseline(json.loads(args.baseline.read_text()))
        except (OSError, json.JSONDecodeError, TypeError, ValueError) as exc:
            print(f"perf.run: --baseline {args.baseline}: {exc}", file=sys.stderr)
            return 2
        if stored["device_key"] != device_key():
            print(f"perf.run: --baseline {args.baseline} is of device {stored['device_key']!r}, this device is "
                  f"{device_key()!r}", file=sys.stderr)
            return 2
    if args.gate:
        key = device_key()
        stored = load_baseline(key) if stored is True else stored
        if stored is None:
            print(f"perf: no baseline for device key {key} (perf/baselines/{key}.json): regression gate not applied")
            return 0
        settings = stored.get("settings") or {}
        suite = settings.get("suite", "auto")
        rounds = rounds or settings.get("rounds")
        warmup = warmup if warmup is not None else settings.get("warmup")
        batch = batch or settings.get("batch", 1)
        protocol = protocol or settings.get("protocol", "eval")
        inputs = inputs or settings.get("inputs", "shared")
        kernel_calls = kernel_calls or settings.get("kernel_calls")
        only = set(stored["benchmarks"])
    try:
        run = run_suite(suite, rounds=rounds, warmup=warmup, batch=batch, protocol=protocol or "eval",
                        inputs=inputs or "distinct", torch=args.torch, only=only,
                        baseline=None if args.no_baseline else stored, results=args.results, save=args.save,
                        calibration=args.calibration, alpha=args.alpha, min_effect=args.min_effect,
                        kernel_time=args.kernel_time, kernel_calls=kernel_calls or kernel_timing.KERNEL_CALLS,
                        figure=args.figure, fresh=args.fresh)
    except (TypeError, ValueError) as exc:
        print(f"perf.run: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output that became unwritable during the run: named, not a traceback
        print(f"perf.run: cannot write {exc.filename or 'an output'}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    unjudged = [] if only is None else sorted(only - {m.case.id for m in run.measurements})
    for missing in unjudged:
        print(f"perf: baseline case {missing} did not run here ({run.skipped.get(missing, 'not in the suite')})")
    for case_id, why in sorted(run.unjudged.items()):
        print(f"perf: baseline case {case_id} was not judged: {why}")
    if only is not None:
        unjudged += sorted(run.unjudged)
    print(f"perf: {len(run.measurements)} benchmarks, {len(run.skipped)} skipped, {len(run.regressed)} regressed"
          + (f", {len(run.kernel_errors)} without kernel time (errors above)" if run.kernel_errors else ""))
    if unjudged:  # a gate that judged less than its baseline holds has not passed (a kernel that now raises)
        print(f"perf: the gate did not judge {len(unjudged)} of its baseline's {len(only)} cases", file=sys.stderr)
        return 2
    return 1 if run.regressed else 0


if __name__ == "__main__":
    sys.exit(main())
