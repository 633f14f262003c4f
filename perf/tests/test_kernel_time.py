"""Kernel time: summing a trace's device events, the per-call traces, availability, and perf.run's kernel figure
(records, run documents, baselines and the gate judging it), all on the CPU with stand-in traces."""

from __future__ import annotations

import json
import re
import sys
from types import SimpleNamespace

import mlx.core as mx
import pytest

from perf import baseline as store
from perf import kernel_time as kt
from perf import run as perf_run
from perf.bandwidth import CopyBandwidth
from perf.harness import Case, Measurement, perf_record
from perf.regression import compare_pooled, judge
from perf.report import tables
from perf.shapes import CPU_ARGMAX
from reports.recorder import read_records

COPY = CopyBandwidth(gbps=10.0, nbytes=1 << 20, median_s=2e-4, samples_s=(2e-4,) * 3)
CASE_ID = f"normalized_argmax/normalized_argmax[graph]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
CUDA = SimpleNamespace(name="CUDA")  # torch's DeviceType.CUDA as the summing reads it: by name
CPU = SimpleNamespace(name="CPU")


def event(name, us, *, device=CUDA, activity="kernel", start=0.0, **fields):
    """A stand-in of torch's FunctionEvent with the fields torch 2.13 gives a device event."""
    return SimpleNamespace(name=name, device_type=device, activity_type=activity, device_time_total=us,
                           self_device_time_total=us, is_user_annotation=activity == "gpu_user_annotation",
                           time_range=SimpleNamespace(start=start, end=start + us), **fields)


def a_call(partial_us=60.0, merge_us=9.0):
    """One traced call as the profiler lists it: the host-side launch, the two kernels, an annotation over them."""
    return [event("cudaGraphLaunch", 5.0, device=CPU, activity="cuda_runtime"),
            event("paged_partial", partial_us, start=10.0),
            event("paged_merge", merge_us, start=10.0 + partial_us),
            event("step", partial_us + merge_us, activity="gpu_user_annotation", start=10.0)]


class FakeTrace:
    """A trace factory: each trace is one call, its events from ``calls`` in turn; ``log`` says when it opened and
    closed, between the launch and evaluation steps ``measure`` logs (the test patches those in)."""

    def __init__(self, calls, log=None):
        self.calls, self.log, self.opened = list(calls), log if log is not None else [], 0

    def __call__(self):
        trace = self

        class Context:
            def __enter__(self):
                trace.log.append("enter")
                return self

            def __exit__(self, *exc):
                trace.log.append("exit")

            def events(self):
                return trace.calls[(trace.opened - 1) % len(trace.calls)]

        self.opened += 1
        return Context()


# --- summing a trace ----------------------------------------------------------------------------


def test_a_calls_kernels_are_summed_and_nothing_else():
    events = kt.device_events(a_call() + [event("Memset (Device)", 2.0, activity="gpu_memset", start=90.0),
                                          event("Memcpy HtoD (Pinned -> Device)", 1.0, activity="gpu_memcpy",
                                                start=95.0),
                                          event("overhead", 3.0, activity="overhead")])
    assert [(e.name, e.activity) for e in events] == [
        ("paged_partial", "kernel"), ("paged_merge", "kernel"), ("Memset (Device)", "memset"),
        ("Memcpy HtoD (Pinned -> Device)", "memcpy")]  # no host event, annotation or overhead record
    assert sum(e.seconds for e in events) == pytest.approx(72e-6)


def test_torch_function_events_are_read_by_their_own_fields():
    # torch's own FunctionEvent (this venv's torch), built as torch's profiler builds a device event.
    torch = pytest.importorskip("torch")
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    def device(name, start, end, activity):
        return FunctionEvent(id=1, name=name, thread=0, start_us=start, end_us=end, use_device="cuda",
                             device_type=DeviceType.CUDA, activity_type=activity)

    host = FunctionEvent(id=2, name="cudaLaunchKernel", thread=0, start_us=0.0, end_us=4.0, use_device="cuda",
                         activity_type="cuda_runtime")
    events = kt.device_events([host, device("k1", 10.0, 70.5, "kernel"), device("k2", 71.0, 80.0, "kernel"),
                               device("range", 10.0, 80.0, "gpu_user_annotation")])
    assert [e.name for e in events] == ["k1", "k2"], torch.__version__
    assert [e.seconds for e in events] == pytest.approx([60.5e-6, 9e-6])
    # a profiler not told its device reports device_time_total 0 for its device events: their time range counts
    untold = FunctionEvent(id=3, name="k3", thread=0, start_us=5.0, end_us=12.0, device_type=DeviceType.CUDA,
                           activity_type="kernel")
    assert untold.device_time_total == 0
    assert [e.seconds for e in kt.device_events([untold])] == pytest.approx([7e-6])


def test_events_without_activity_type_are_told_apart_by_name_and_annotation():
    # torch before activity_type on its events: kineto's names for copies and fills, is_user_annotation for spans;
    # torch before device_time_total: cuda_time_total.
    old = [SimpleNamespace(name="kern", device_type=CUDA, cuda_time_total=5.0, is_user_annotation=False),
           SimpleNamespace(name="Memset (Device)", device_type=CUDA, device_time_total=1.0, is_user_annotation=False),
           SimpleNamespace(name="Memcpy DtoD (Device -> Device)", device_type=CUDA, device_time_total=2.0),
           SimpleNamespace(name="my range", device_type=CUDA, device_time_total=9.0, is_user_annotation=True)]
    kept = kt.device_events(old)
    assert [e.activity for e in kept] == ["kernel", "memset", "memcpy"]
    assert [e.seconds for e in kept] == pytest.approx([5e-6, 1e-6, 2e-6])
    with pytest.raises(TypeError, match="carries no device time"):
        kt.device_events([SimpleNamespace(name="bare", device_type=CUDA)])
    with pytest.raises(TypeError, match="events must be an iterable"):
        kt.device_events(None)


def test_calls_give_one_sample_each_with_their_kernels_and_span():
    result = kt.summarize_calls([a_call(60.0), a_call(62.0), a_call(58.0)], case_id="c", timer="t")
    assert result.samples_s == pytest.approx((69e-6, 71e-6, 67e-6))
    assert result.kernels == (("paged_partial", 1), ("paged_merge", 1)) and result.per_call == 2
    assert result.median_s == pytest.approx(69e-6) and result.span_median_s == pytest.approx(69e-6)
    fields = result.as_dict()
    assert fields["kernels_per_call"] == 2 and fields["kernel_names"] == [["paged_partial", 1], ["paged_merge", 1]]
    assert fields["kernel_samples_s"] == pytest.approx([69e-6, 71e-6, 67e-6]) and fields["kernel_timer"] == "t"
    # each kernel's share per call: the partial and the merge apart (what a launch-parameter sweep reads)
    assert [name for name, _ in result.by_kernel_s] == ["paged_partial", "paged_merge"]
    assert dict(result.by_kernel_s)["paged_partial"] == pytest.approx((60e-6, 62e-6, 58e-6))
    assert result.kernel_medians_s() == pytest.approx({"paged_partial": 60e-6, "paged_merge": 9e-6})


def test_overlapping_kernels_sum_above_their_span():
    side_by_side = [event("sdpa", 10.0, start=0.0), event("sdpa", 10.0, start=2.0)]
    result = kt.summarize_calls([side_by_side, side_by_side], case_id="c", timer="t")
    assert result.median_s == pytest.approx(20e-6) and result.span_median_s == pytest.approx(12e-6)
    assert result.kernels == (("sdpa", 2),) and result.kernel_medians_s() == pytest.approx({"sdpa": 20e-6})


def test_the_same_kernels_in_another_order_are_the_same_call():
    swapped = [event("paged_merge", 9.0, start=0.0), event("paged_partial", 60.0, start=9.0)]
    result = kt.summarize_calls([a_call(), swapped, a_call()], case_id="c", timer="t")
    assert result.kernels == (("paged_partial", 1), ("paged_merge", 1)), "the first call's order names them"
    assert result.samples_s == pytest.approx((69e-6, 69e-6, 69e-6))


def test_a_call_that_launched_other_kernels_is_an_error_naming_the_case():
    extra = a_call() + [event("paged_merge", 9.0, start=80.0)]
    with pytest.raises(kt.KernelTimeError, match=r"paged/x: call 2 of 3 launched 3 kernels, call 1 2; "
                                                  r"beyond call 1's: \[\('paged_merge', 1\)\]"):
        kt.summarize_calls([a_call(), extra, a_call()], case_id="paged/x", timer="t")
    other = [event("paged_partial", 60.0), event("another_merge", 9.0, start=60.0)]
    with pytest.raises(kt.KernelTimeError, match=r"paged/x: call 2 of 2 .*missing: \[\('paged_merge', 1\)\]"):
        kt.summarize_calls([a_call(), other], case_id="paged/x", timer="t")
    with pytest.raises(kt.KernelTimeError, match="paged/x: call 1 of 1 recorded no device work"):
        kt.summarize_calls([[event("cudaGraphLaunch", 5.0, device=CPU, activity="cuda_runtime")]],
                           case_id="paged/x", timer="t")


@pytest.mark.parametrize("kwargs, error, words", [
    ({"launch": 3}, TypeError, "launch must be callable"),
    ({"calls": 0}, ValueError, "calls must be >= 1"),
    ({"warmup": -1}, ValueError, "warmup must be >= 0"),
    ({"runtime": "cuda"}, ValueError, "runtime must be one of"),
    ({"case_id": ""}, TypeError, "case_id must be a non-empty str"),
    ({"trace": "profile"}, TypeError, "trace must be a callable"),
])
def test_measure_refuses_bad_arguments_by_name(kwargs, error, words):
    arguments = {"launch": lambda: mx.array(1.0), "case_id": "c", **kwargs}
    with pytest.raises(error, match=words):
        kt.measure(**arguments)


def test_each_call_is_launched_and_evaluated_inside_its_own_trace(monkeypatch):
    # Warm-up calls and the wait for earlier work stay outside every trace; each traced call is launched,
    # evaluated and waited for between the trace's start and end.
    log = []
    real_eval = mx.eval
    monkeypatch.setattr(kt, "synchronizer", lambda runtime: lambda outs: (log.append("eval"), real_eval(outs)))
    monkeypatch.setattr(kt, "_drain", lambda runtime: lambda: log.append("sync"))

    def launch():
        log.append("launch")
        return mx.ones((4,)) * 2

    trace = FakeTrace([a_call()], log)
    result = kt.measure(launch, case_id="c", calls=2, warmup=1, trace=trace, timer="fake")
    assert log == ["launch", "eval", "sync"] + ["enter", "launch", "eval", "sync", "exit"] * 2
    assert len(result.samples_s) == 2 and result.timer == "fake" and trace.opened == 2


# --- availability --------------------------------------------------------------------------------


def test_availability_names_what_is_missing(monkeypatch):
    from impl import arms
    from reports import environment

    monkeypatch.setattr(environment, "mlx_backend", lambda: "metal")
    assert "backend here is 'metal', not 'cuda'" in kt.availability().reason
    monkeypatch.setattr(environment, "mlx_backend", lambda: "cuda")
    monkeypatch.setattr(arms, "current_device_name", lambda: "cpu")
    assert "default device is the CPU" in kt.availability().reason
    monkeypatch.setattr(arms, "current_device_name", lambda: "gpu")
    torch = pytest.importorskip("torch")
    from torch import profiler

    monkeypatch.setattr(profiler, "supported_activities", lambda: {profiler.ProfilerActivity.CPU})
    assert f"torch {torch.__version__} cannot profile CUDA" in kt.availability().reason
    monkeypatch.setattr(profiler, "supported_activities",
                        lambda: {profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.CUDA})
    ready = kt.availability()
    assert ready.available and ready.timer == f"cupti/torch.profiler {torch.__version__}" and ready.reason == ""
    monkeypatch.setitem(sys.modules, "torch", None)  # torch not importable
    missing = kt.availability()
    assert not missing.available and missing.reason.startswith("torch is not importable")
    assert missing.describe().startswith("unavailable: torch is not importable")


@pytest.mark.skipif(kt.availability().available, reason="kernel time is available here: the CUDA path runs")
def test_the_smoke_check_says_why_it_cannot_run(capsys):
    assert kt.main(["--smoke"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perf.kernel_time: unavailable: ") and kt.availability().reason in err


# --- perf.run's kernel figure --------------------------------------------------------------------


def _available(monkeypatch, durations_us):
    """Kernel time available, each traced call one kernel of the next duration in ``durations_us``."""
    monkeypatch.setattr(kt, "availability", lambda: kt.Availability(True, "", "fake-cupti"))
    monkeypatch.setattr(kt, "cupti_trace", FakeTrace([[event("argmax_kernel", us)] for us in durations_us]))


def _run(**kwargs):
    return perf_run.run_suite("cpu", rounds=5, warmup=1, only={CASE_ID}, copy=COPY, log=lambda *_: None,
                              kernel_calls=6, **kwargs)


def test_runs_record_kernel_time_beside_call_time(monkeypatch, tmp_path):
    _available(monkeypatch, [10.0, 11.0, 12.0])
    run = _run(baseline=False, results=tmp_path / "r.jsonl", save=tmp_path / "run.json")
    (record,) = run.records
    assert record["kernel_status"] == "measured" and record["kernel_reason"] is None
    assert record["kernel_median_s"] == pytest.approx(11e-6) and record["kernel_calls"] == 6
    assert record["kernels_per_call"] == 1 and record["kernel_names"] == [["argmax_kernel", 1]]
    assert record["kernel_timer"] == "fake-cupti"
    assert record["kernel_gbps"] == pytest.approx(record["bytes"] / 11e-6 / 1e9)
    assert record["kernel_pct_copy_bw"] == pytest.approx(10 * record["kernel_gbps"])
    assert record["median_s"] > 0 and record["figure"] is None  # call time as before; no baseline, no verdict
    assert list(read_records(tmp_path / "r.jsonl"))[0]["kernel_median_s"] == record["kernel_median_s"]
    document = store.validate_baseline(json.loads((tmp_path / "run.json").read_text()))
    entry = document["benchmarks"][CASE_ID]
    assert len(entry["kernel_samples_s"]) == 6 and entry["kernel_timer"] == "fake-cupti"
    assert document["settings"]["kernel_calls"] == 6 and document["settings"]["kernel_warmup"] == kt.KERNEL_WARMUP


def test_without_cuda_every_record_says_kernel_time_is_unavailable(capsys):
    # This machine (MLX on the CPU): the run says why at its start, and each record carries it.
    logged = []
    run = perf_run.run_suite("cpu", rounds=5, warmup=1, only={CASE_ID}, copy=COPY, baseline=False,
                             log=logged.append)
    reason = kt.availability().reason
    assert not kt.availability().available and f"kernel time: unavailable: {reason}" in logged[0]
    assert run.records[0]["kernel_status"] == "unavailable" and run.records[0]["kernel_reason"] == reason
    assert run.records[0]["kernel_median_s"] is None and run.kernel_calls is None
    off = perf_run.run_suite("cpu", rounds=5, warmup=1, only={CASE_ID}, copy=COPY, baseline=False, kernel_time=False,
                             log=lambda *_: None)
    assert off.records[0]["kernel_status"] == "off" and off.records[0]["kernel_reason"] is None
    with pytest.raises(ValueError, match=f"kernel time was asked for .* but is unavailable: {reason[:20]}"):
        perf_run.run_suite("cpu", only={CASE_ID}, copy=COPY, baseline=False, kernel_time=True, log=lambda *_: None)
    assert perf_run.main(["--suite", "cpu", "--kernel-time", "--no-baseline"]) == 2
    assert "kernel time was asked for" in capsys.readouterr().err


def test_a_case_whose_calls_differ_keeps_its_call_figure_and_says_why(monkeypatch):
    monkeypatch.setattr(kt, "availability", lambda: kt.Availability(True, "", "fake-cupti"))
    monkeypatch.setattr(kt, "cupti_trace", FakeTrace([[event("k", 5.0)], [event("k", 5.0), event("k", 5.0)]]))
    run = _run(baseline=False)
    (record,) = run.records
    assert record["kernel_status"] == "error" and record["median_s"] > 0
    assert f"KernelTimeError: {CASE_ID}: call 2 of 6 launched 2 kernels, call 1 1" in record["kernel_reason"]
    assert run.kernel_errors == {CASE_ID: record["kernel_reason"]}


def _strip_kernel_time(entry: dict) -> None:
    """``entry`` as a run without kernel time writes it."""
    for name in kt.KernelTime((1.0,), (("k", 1),), "t").as_dict():
        entry.pop(name, None)
    entry.pop("kernel_process_samples_s", None)


def _kernel_baseline(monkeypatch, tmp_path, durations_us, name="base.json", **settings):
    _available(monkeypatch, durations_us)
    _run(baseline=False, save=tmp_path / name)
    document = json.loads((tmp_path / name).read_text())
    document["settings"].update(settings)
    (tmp_path / name).write_text(json.dumps(document))
    return document


def test_the_gate_judges_the_kernel_figure_when_asked(monkeypatch, tmp_path, capsys):
    baseline = _kernel_baseline(monkeypatch, tmp_path, [10.0, 10.5, 11.0], figure="kernel")
    assert store.figure_of(baseline, CASE_ID) == "kernel"
    # the same kernel time: not a regression, and the record says the kernel figure was judged
    _available(monkeypatch, [10.2, 10.7, 10.9])
    results = tmp_path / "gate.jsonl"
    assert perf_run.main(["--gate", "--baseline", str(tmp_path / "base.json"), "--results", str(results)]) == 0
    (same,) = [r for r in read_records(results) if r["kind"] == "perf"]
    assert same["figure"] == "kernel" and same["regressed"] is False and same["gated"] is True
    assert same["baseline_median_s"] == pytest.approx(10.5e-6)
    # the kernel slowed by 50%: regressed on the kernel figure, whatever the call figure did
    _available(monkeypatch, [15.0, 15.75, 16.5])
    slowed = tmp_path / "slowed.jsonl"
    assert perf_run.main(["--gate", "--baseline", str(tmp_path / "base.json"), "--results", str(slowed)]) == 1
    (record,) = [r for r in read_records(slowed) if r["kind"] == "perf"]
    assert record["figure"] == "kernel" and record["regressed"] is True
    assert record["effect"] == pytest.approx(0.5) and record["p_value"] < 0.01
    # --figure call overrides the baseline's choice: the call figure is judged (and the CPU is not slower)
    assert perf_run.main(["--gate", "--baseline", str(tmp_path / "base.json"), "--figure", "call",
                          "--results", str(tmp_path / "call.jsonl"), "--min-effect", "5"]) == 0
    (call,) = [r for r in read_records(tmp_path / "call.jsonl") if r["kind"] == "perf"]
    assert call["figure"] == "call"
    assert call["baseline_median_s"] == pytest.approx(baseline["benchmarks"][CASE_ID]["median_s"])
    capsys.readouterr()


def test_a_kernel_figure_the_run_cannot_measure_is_not_judged(monkeypatch, tmp_path, capsys):
    _kernel_baseline(monkeypatch, tmp_path, [10.0, 10.5, 11.0], figure="kernel")
    monkeypatch.setattr(kt, "availability", lambda: kt.Availability(False, "no CUDA here", None))
    assert perf_run.main(["--gate", "--baseline", str(tmp_path / "base.json")]) == 2
    captured = capsys.readouterr()
    assert f"baseline case {CASE_ID} was not judged: its figure is kernel time, unavailable here (no CUDA here)" \
        in captured.out
    assert "did not judge 1 of its baseline's 1 cases" in captured.err
    # a call-time baseline judged on --figure kernel: it holds no kernel samples to judge against
    call_only = json.loads((tmp_path / "base.json").read_text())
    for entry in call_only["benchmarks"].values():
        _strip_kernel_time(entry)
    del call_only["settings"]["figure"]
    (tmp_path / "call.json").write_text(json.dumps(call_only))
    _available(monkeypatch, [10.0])
    assert perf_run.main(["--gate", "--baseline", str(tmp_path / "call.json"), "--figure", "kernel"]) == 2
    assert "the baseline holds no kernel samples of it" in capsys.readouterr().out


def test_kernel_samples_pool_per_process_and_judge_by_the_same_rule(monkeypatch, tmp_path):
    first = _kernel_baseline(monkeypatch, tmp_path, [10.0, 10.5, 11.0], "a.json")
    second = _kernel_baseline(monkeypatch, tmp_path, [11.0, 11.5, 12.0], "b.json")
    pooled = store.pool_documents([first, second], ["a.json", "b.json"])
    entry = pooled["benchmarks"][CASE_ID]
    assert entry["kernel_process_samples_s"] == [first["benchmarks"][CASE_ID]["kernel_samples_s"],
                                                 second["benchmarks"][CASE_ID]["kernel_samples_s"]]
    assert entry["kernel_samples_s"] == [t for p in entry["kernel_process_samples_s"] for t in p]
    assert entry["kernel_median_s"] == pytest.approx(11e-6)  # the median of the process medians 10.5 and 11.5
    assert store.baseline_processes(entry, "kernel") == entry["kernel_process_samples_s"]
    assert store.load_baseline(store.device_key(), tmp_path) is None
    store.write_baseline(pooled, tmp_path)
    assert store.load_baseline(store.device_key(), tmp_path) == pooled  # round trip
    # judge on the kernel figure: compare_pooled on the kernel processes, the kernel floor
    current = [12.7e-6] * 6
    verdict = judge(current, {**pooled, "settings": {**pooled["settings"], "kernel_gate_floor_s": 1e-3}}, CASE_ID,
                    figure="kernel")
    reference = compare_pooled(current, entry["kernel_process_samples_s"], floor_s=1e-3)
    assert verdict.figure == "kernel" and not verdict.gated and verdict.p_value == reference.p_value
    assert judge(current, pooled, CASE_ID, figure="kernel").regressed  # 12.7 > 1.1 x the slowest process's 11.5
    assert verdict.describe().startswith("kernel time not gated")
    # a process without kernel time cannot be pooled with one that has it
    bare = json.loads(json.dumps(second))
    _strip_kernel_time(bare["benchmarks"][CASE_ID])
    with pytest.raises(ValueError, match=re.escape(f"cannot pool: {CASE_ID} holds kernel-time samples in a.json "
                                                   "but not in b.json")):
        store.pool_documents([first, bare], ["a.json", "b.json"])
    # ... unless asked to leave the case's kernel time out: then call time alone is pooled, never a subset's figure
    assert store.lacking_kernel_time([first, bare]) == [CASE_ID]
    left = store.pool_documents([first, bare], ["a.json", "b.json"], partial_kernel_time="leave_out")
    assert not store.has_figure(left["benchmarks"][CASE_ID], "kernel")
    assert left["benchmarks"][CASE_ID]["process_samples_s"] == pooled["benchmarks"][CASE_ID]["process_samples_s"]
    with pytest.raises(ValueError, match="partial_kernel_time must be one of"):
        store.pool_documents([first, bare], ["a.json", "b.json"], partial_kernel_time="drop")
    judged = json.loads(json.dumps(first))
    judged["benchmarks"][CASE_ID]["figure"] = "kernel"
    with pytest.raises(ValueError, match="cannot pool"):  # its gate judges kernel time: still refused
        store.pool_documents([judged, bare], ["a.json", "b.json"], partial_kernel_time="leave_out")


def test_processes_that_start_the_same_kernels_in_another_order_pool(monkeypatch, tmp_path):
    """The kernels of a call are a multiset: two processes that recorded them in another start order (a call of
    several streams) pool, keeping the first document's order; another kernel, or another count, is refused."""
    first = _kernel_baseline(monkeypatch, tmp_path, [10.0, 10.5, 11.0], "a.json")
    second = _kernel_baseline(monkeypatch, tmp_path, [11.0, 11.5, 12.0], "b.json")
    names = [["partial_kernel", 1], ["merge_kernel", 1]]  # a call of two kernels, as paged decode's
    for document in (first, second):
        document["benchmarks"][CASE_ID].update(kernel_names=names, kernels_per_call=2)
    second["benchmarks"][CASE_ID]["kernel_names"] = names[::-1]
    pooled = store.pool_documents([first, second], ["a.json", "b.json"])
    assert pooled["benchmarks"][CASE_ID]["kernel_names"] == names
    for changed in ([names[0], [names[1][0], names[1][1] + 1]], [names[0], ["another_kernel", names[1][1]]]):
        other = json.loads(json.dumps(second))
        other["benchmarks"][CASE_ID]["kernel_names"] = changed
        with pytest.raises(ValueError, match=re.escape(f"cannot pool: {CASE_ID} kernel_names differs")):
            store.pool_documents([first, other], ["a.json", "b.json"])


def test_baselines_refuse_a_kernel_figure_they_cannot_judge(monkeypatch, tmp_path):
    document = _kernel_baseline(monkeypatch, tmp_path, [10.0, 11.0])
    entry = document["benchmarks"][CASE_ID]
    store.validate_baseline(document)
    bad = json.loads(json.dumps(document))
    bad["benchmarks"][CASE_ID]["kernel_samples_s"][0] = -1.0
    with pytest.raises(ValueError, match=r"kernel_samples_s must hold positive finite seconds"):
        store.validate_baseline(bad)
    bad = json.loads(json.dumps(document))
    bad["benchmarks"][CASE_ID]["kernel_process_samples_s"] = [entry["kernel_samples_s"][:1]]
    with pytest.raises(ValueError, match="kernel_samples_s must be the concatenation of its kernel_process_samples_s"):
        store.validate_baseline(bad)
    bare = json.loads(json.dumps(document))
    _strip_kernel_time(bare["benchmarks"][CASE_ID])
    with pytest.raises(ValueError, match="settings.figure is 'kernel' but the entry holds no kernel_samples_s"):
        store.validate_baseline({**bare, "settings": {**bare["settings"], "figure": "kernel"}})
    bare["benchmarks"][CASE_ID]["figure"] = "kernel"
    with pytest.raises(ValueError, match=r"\.figure is 'kernel' but the entry holds no kernel_samples_s"):
        store.validate_baseline(bare)
    bare["benchmarks"][CASE_ID]["figure"] = "device"
    with pytest.raises(ValueError, match=r"\.figure must be one of \('call', 'kernel'\)"):
        store.validate_baseline(bare)
    with pytest.raises(ValueError, match="settings.kernel_gate_floor_s must be a non-negative"):
        store.validate_baseline({**document, "settings": {**document["settings"], "kernel_gate_floor_s": -1}})
    with pytest.raises(ValueError, match="figure must be one of"):
        store.baseline_processes(entry, "device")


def test_the_committed_baseline_judges_call_time_and_kernel_time_where_it_holds_them():
    # perf/baselines/cuda-NVIDIA_H200.json: call time gated by default; kernel samples pooled per process, in every
    # case (records/h200-perf/reads-first/: all three processes measured every case's kernel time).
    document = store.load_baseline("cuda-NVIDIA_H200")
    with_kernel = sorted(c for c, e in document["benchmarks"].items() if store.has_figure(e, "kernel"))
    assert with_kernel == sorted(document["benchmarks"])
    assert store.gate_floor(document, "call") == pytest.approx(2.5e-4) and store.gate_floor(document, "kernel") == 0
    case_id = with_kernel[0]
    entry = document["benchmarks"][case_id]
    assert store.figure_of(document, case_id) == "call"
    samples = store.baseline_processes(entry)[0]
    verdict = judge(samples, document, case_id)
    assert verdict.figure == "call" and verdict.n_processes == len(store.baseline_processes(entry)) == 3
    assert verdict == compare_pooled(samples, store.baseline_processes(entry), floor_s=2.5e-4)
    kernel_samples = store.baseline_processes(entry, "kernel")[0]
    kernel = judge(kernel_samples, document, case_id, figure="kernel")
    assert kernel.figure == "kernel"
    reference = compare_pooled(kernel_samples, store.baseline_processes(entry, "kernel"), floor_s=0.0)
    assert (kernel.p_value, kernel.regressed, kernel.gated) == (reference.p_value, reference.regressed, reference.gated)
    # an entry pooled on call time alone (``--partial-kernel-time leave-out``) cannot be judged on kernel time
    bare = dict(entry)
    for field in [f for f in bare if f.startswith("kernel")]:
        del bare[field]
    pooled_on_call_time = {**document, "benchmarks": {**document["benchmarks"], case_id: bare}}
    with pytest.raises(ValueError, match=re.escape(f"{case_id}: the baseline entry holds no kernel-time samples")):
        judge(store.baseline_processes(bare)[0], pooled_on_call_time, case_id, figure="kernel")


def test_perf_records_carry_kernel_fields_only_when_measured():
    case = Case("b", "k", "cuda", (1, 2), "bfloat16", bytes=10**6, flops=10**6, build=lambda: None)
    kernel = kt.KernelTime((5e-4, 5e-4, 6e-4), (("k", 1),), "fake")
    plain = perf_record(Measurement(case, (1e-3,) * 3), copy_gbps=10.0, device_key="cuda-X")
    assert plain["kernel_status"] is None and plain["kernel_median_s"] is None and plain["figure"] is None
    measured = perf_record(Measurement(case, (1e-3,) * 3, kernel), copy_gbps=10.0, device_key="cuda-X")
    assert measured["kernel_status"] == "measured" and measured["kernel_gbps"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="'measured' exactly when measurement.kernel is given"):
        perf_record(Measurement(case, (1e-3,) * 3), copy_gbps=10.0, device_key="cuda-X", kernel_status="measured")
    with pytest.raises(ValueError, match="needs its kernel_reason"):
        perf_record(Measurement(case, (1e-3,) * 3), copy_gbps=10.0, device_key="cuda-X", kernel_status="error")
    with pytest.raises(ValueError, match="kernel_status must be None or one of"):
        perf_record(Measurement(case, (1e-3,) * 3), copy_gbps=10.0, device_key="cuda-X", kernel_status="skipped")


def test_the_report_tables_show_kernel_time_where_recorded(monkeypatch, tmp_path):
    document = _kernel_baseline(monkeypatch, tmp_path, [10.0, 11.0])
    text = tables(document)
    assert "| kernel ms | kernel GB/s |" in text
    row = next(line for line in text.splitlines() if "normalized_argmax[graph]" in line)
    nbytes = document["benchmarks"][CASE_ID]["bytes"]
    assert f"| {10.5e-6 * 1e3:.4g} | {nbytes / 10.5e-6 / 1e9:,.0f} |" in row
    for entry in document["benchmarks"].values():
        entry.pop("kernel_samples_s")
    assert "kernel ms" not in tables(document)  # a document without kernel time: the tables as before


def test_baseline_update_stores_the_figure_and_the_kernel_floor(monkeypatch, tmp_path, capsys):
    _kernel_baseline(monkeypatch, tmp_path, [10.0, 11.0], "run.json")
    stored = tmp_path / "stored"
    assert store.main(["update", "--from", str(tmp_path / "run.json"), "--figure", "kernel",
                       "--kernel-gate-floor-ms", "0.01", "--dir", str(stored)]) == 0
    document = store.load_baseline(store.device_key(), stored)
    assert document["settings"]["figure"] == "kernel"
    assert store.gate_floor(document, "kernel") == pytest.approx(1e-5) and store.gate_floor(document, "call") == 0
    assert store.main(["show", "--dir", str(stored)]) == 0
    assert "; kernel 0.0105 ms, n=6; gate judges kernel" in capsys.readouterr().out
    bare = json.loads((tmp_path / "run.json").read_text())
    _strip_kernel_time(bare["benchmarks"][CASE_ID])
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    assert store.main(["update", "--from", str(tmp_path / "bare.json"), "--figure", "kernel", "--dir",
                       str(stored)]) == 2
    assert "holds no kernel_samples_s); the old baseline is unchanged" in capsys.readouterr().err
    assert store.load_baseline(store.device_key(), stored) == document
    assert store.main(["update", "--from", str(tmp_path / "run.json"), "--kernel-gate-floor-ms", "-1"]) == 2
    assert "--kernel-gate-floor-ms must be >= 0" in capsys.readouterr().err


def test_run_refuses_a_kernel_figure_without_kernel_time(capsys):
    with pytest.raises(SystemExit) as exit_:
        perf_run.main(["--figure", "kernel", "--no-kernel-time", "--no-baseline"])
    assert exit_.value.code == 2 and "which --no-kernel-time leaves out" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        perf_run.main(["--kernel-calls", "0", "--no-baseline"])
    assert "--kernel-calls must be >= 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="figure must be None or one of"):
        perf_run.run_suite("cpu", figure="device", baseline=False, copy=COPY, log=lambda *_: None)


def test_the_smoke_check_prints_each_case_and_names_the_ones_that_fail(monkeypatch, tmp_path, capsys):
    # The H200 check's loop on a small shape with a stand-in trace: MLX's SDPA over contiguous K/V is measured;
    # the cuda arm, which this machine cannot run, fails by name while the other case still runs.
    from impl import arms

    real = arms.discover_arms
    monkeypatch.setattr(arms, "discover_arms", lambda device=None: {
        **real(device), "cuda": arms.ArmStatus("cuda", True, "stand-in")})
    monkeypatch.setattr(kt, "SMOKE_SHAPES", ((4, 2, 1, 128, 256),))
    _available(monkeypatch, [30.0, 31.0, 29.0])
    assert kt.main(["--smoke", "--calls", "3", "--json", str(tmp_path / "smoke.json")]) == 1
    out = capsys.readouterr().out
    sdpa = "paged_decode/sdpa[mlx]/4x2x1x128x256/bfloat16"
    paged = "paged_decode/paged_attention[cuda]/4x2x1x128x256/bfloat16"
    assert f"{sdpa}: kernel 30.0 us median" in out and "1 per call (argmax_kernel x1)" in out
    assert "3 calls on 3 input sets" in out and f"{paged}: " in out
    assert "1 cases measured, 1 failed" in out
    saved = json.loads((tmp_path / "smoke.json").read_text())
    assert saved["cases"][sdpa]["kernel_median_s"] == pytest.approx(30e-6) and "error" in saved["cases"][paged]
