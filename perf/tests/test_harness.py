"""The timing harness, the cases' accounting, the copy bandwidth, perf records and the gate's plumbing."""

from __future__ import annotations

import json
import time

import mlx.core as mx
import numpy as np
import pytest

from perf import baseline as store
from perf import cases as perf_cases
from perf import run as perf_run
from perf.bandwidth import CopyBandwidth, copy_bandwidth
from perf.cases import argmax_group, kvq4_group, multi_query_group, paged_group
from perf.harness import Case, Measurement, Pipelined, batched, perf_record, summarize, taking_turns, time_call
from perf.regression import compare, compare_pooled
from perf.shapes import CPU_ARGMAX, ArgmaxShape, DecodeShape
from reports.recorder import read_records
from reports.results import build_results

SCHEMA_PERF_FIELDS = ("benchmark", "kernel", "arm", "shape", "median_s", "iqr_s", "bytes", "flops", "gbps",
                      "pct_copy_bw", "baseline_median_s", "p_value", "effect", "regressed")
COPY = CopyBandwidth(gbps=10.0, nbytes=1 << 20, median_s=2e-4, samples_s=(2e-4,) * 3)


def test_time_call_warms_up_then_times_each_round():
    calls = []
    samples = time_call(lambda: calls.append(time.sleep(1e-3)), rounds=4, warmup=2)
    assert len(calls) == 6 and len(samples) == 4
    assert all(1e-3 <= s < 1.0 for s in samples)


@pytest.mark.parametrize("kwargs, error", [({"rounds": 0}, ValueError), ({"rounds": 2.0}, TypeError),
                                           ({"rounds": 2, "warmup": -1}, ValueError)])
def test_time_call_bad_input(kwargs, error):
    with pytest.raises(error, match="rounds|warmup"):
        time_call(lambda: None, **kwargs)
    with pytest.raises(TypeError, match="call"):
        time_call(None, rounds=1)


def test_summarize():
    assert summarize([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, 2.0)
    with pytest.raises(ValueError, match="samples"):
        summarize([])
    with pytest.raises(ValueError, match="positive"):
        summarize([1.0, 0.0])


def test_batched_launches_then_waits_once():
    launched = []
    x = mx.ones((4,))
    call = batched(lambda: launched.append(1) or x + 1, "mlx", 3)
    call()
    assert launched == [1, 1, 1]
    start = time.perf_counter()
    batched(lambda: x + 1, "mlx", 1, extra_s=0.02)()
    assert time.perf_counter() - start >= 0.02  # the calibration's slowed variant waits after the sync
    with pytest.raises(ValueError, match="runtime"):
        batched(lambda: x, "jax", 1)
    with pytest.raises(ValueError, match="batch"):
        batched(lambda: x, "mlx", 0)


def test_pipelined_submits_a_round_and_waits_for_the_previous_one(monkeypatch):
    """Protocol pipelined: round r submits its calls (async_eval) and then waits for round r - 1's only;
    finish() waits for the last. The waits are observed through stand-ins for MLX's two calls."""
    events = []
    x = mx.ones((4,))
    monkeypatch.setattr(mx, "async_eval", lambda outs: events.append(("submit", len(outs))))
    monkeypatch.setattr(mx, "eval", lambda outs: events.append(("wait", len(outs))))
    call = Pipelined(lambda: x + 1, 3)
    call()
    call()
    assert events == [("submit", 3), ("submit", 3), ("wait", 3)]
    call.finish()
    call.finish()  # nothing left to wait for
    assert events[-1] == ("wait", 3) and len(events) == 4
    with pytest.raises(ValueError, match="batch"):
        Pipelined(lambda: x, 0)


@pytest.mark.parametrize("make", [lambda launch, batch=2: batched(launch, "mlx", batch),
                                  lambda launch, batch=2: Pipelined(launch, batch)], ids=["batched", "Pipelined"])
def test_bad_rounds_are_refused_when_built(make):
    """Refused where the round is built, naming the argument, not at the first timed call."""
    x = mx.ones((4,))
    for launch in (None, x, "launch"):
        with pytest.raises(TypeError, match="^launch must be callable"):
            make(launch)
    for batch, error in ((True, TypeError), (2.0, TypeError), (-1, ValueError)):
        with pytest.raises(error, match="^batch must"):
            make(lambda: x, batch)
    make(lambda: x, np.int64(1))()  # a NumPy integer is an int


@pytest.mark.parametrize("runtime", [None, "MLX", ["mlx"]])
def test_batched_refuses_an_unknown_runtime(runtime):
    with pytest.raises(ValueError, match="^runtime must"):
        batched(lambda: None, runtime, 1)


@pytest.mark.parametrize("extra_s, error", [("0.1", TypeError), (True, TypeError), (None, TypeError),
                                            (-0.01, ValueError), (float("nan"), ValueError),
                                            (float("inf"), ValueError), (10**400, ValueError)])
def test_batched_refuses_bad_extra_seconds(extra_s, error):
    """NaN or a negative extra_s used to wait nothing, infinity forever; a str failed at the first timed round."""
    with pytest.raises(error, match="^extra_s must"):
        batched(lambda: None, "mlx", 1, extra_s=extra_s)


def test_batched_takes_numpy_counts_and_seconds():
    launched = []
    batched(lambda: launched.append(1), "mlx", np.int64(2), extra_s=np.float64(0.0))()
    assert launched == [1, 1]


def test_pipelined_run_records_its_protocol_and_refuses_an_eval_baseline(tmp_path):
    case_id = f"normalized_argmax/logsumexp_sub_argmax[mlx]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
    run = perf_run.run_suite("cpu", rounds=3, warmup=1, only={case_id}, baseline=False, copy=COPY,
                             protocol="pipelined", save=tmp_path / "run.json", log=lambda *_: None)
    document = json.loads((tmp_path / "run.json").read_text())
    assert document["settings"]["protocol"] == "pipelined" and len(run.measurements[0].samples_s) == 3
    eval_baseline = _one_case_baseline(case_id, 1e-3)  # settings without a protocol: measured with eval
    for kwargs, words in (({"protocol": "pipelined"}, "protocol='eval'.*protocol='pipelined'"),
                          ({"batch": 4}, "batch=1.*batch=4")):
        with pytest.raises(ValueError, match=words):
            perf_run.run_suite("cpu", rounds=3, warmup=1, only={case_id}, baseline=eval_baseline, copy=COPY,
                               log=lambda *_: None, **kwargs)
    with pytest.raises(ValueError, match="protocol must be one of"):
        perf_run.run_suite("cpu", protocol="async", baseline=False, copy=COPY, log=lambda *_: None)
    with pytest.raises(ValueError, match="calibration"):
        perf_run.run_suite("cpu", protocol="pipelined", baseline=False, copy=COPY, calibration=tmp_path / "c.json",
                           log=lambda *_: None)


def test_decode_bytes_and_flops_are_the_compulsory_traffic():
    s = DecodeShape(32, 8, 1, 128, 1024)
    group = paged_group(s, ["graph"])
    kv = 2 * 8 * 1024 * 128 * 2  # K and V, bf16
    q_out = 2 * 32 * 128 * 2
    table = 4 * 1024 // 16
    assert {c.bytes for c in group.cases} == {kv + q_out + table}, "one scale for every kernel of a benchmark"
    assert {c.flops for c in group.cases} == {4 * 32 * 1024 * 128}
    q4 = paged_group(s, ["graph"], bits=4)
    row = 128 // 2 + 2 * (128 // 64) * 2  # codes + a bf16 scale and bias per 64-group
    assert q4.cases[0].bytes == 2 * 8 * 1024 * row + q_out + table
    assert {c.kernel for c in q4.cases} == {"paged_attention", "gather_dequantize_sdpa"}
    argmax = argmax_group(ArgmaxShape(8, 32000), ["graph"])
    assert argmax.cases[0].bytes == 8 * 32000 * 2 + 8 * 4 and argmax.cases[0].flops == 5 * 8 * 32000


def test_a_rounds_calls_take_the_input_sets_in_turn():
    """copies=3: three input sets drawn with seeds 0, 1, 2; a case's launch takes them in turn, so the calls of
    a round read different data (perf.cases: calls on one set share the GPU's cache)."""
    group = argmax_group(ArgmaxShape(4, 1000), ["graph"], copies=3)
    sets = group.inputs()
    assert len(sets) == 3
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not mx.array_equal(sets[a]["logits"], sets[b]["logits"]).item()
    assert mx.array_equal(sets[0]["logits"], argmax_group(ArgmaxShape(4, 1000), ["graph"]).inputs()[0]["logits"]).item()
    for case in group.cases:
        launch = case.build()
        outs = [launch() for _ in range(4)]
        scores = [o[1] if isinstance(o, tuple) else o for o in outs]
        assert not mx.array_equal(scores[0], scores[1]).item() and not mx.array_equal(scores[1], scores[2]).item()
        assert mx.array_equal(scores[0], scores[3]).item(), "the fourth call is back on the first set"
    group.release()
    assert group.inputs() is not sets, "release drops the sets; the next use builds them again"


def test_taking_turns_cycles_and_refuses_an_empty_or_uncallable_list():
    seen = []
    launch = taking_turns([lambda i=i: seen.append(i) for i in range(3)])
    for _ in range(7):
        launch()
    assert seen == [0, 1, 2, 0, 1, 2, 0]
    only = lambda: 1  # noqa: E731
    assert taking_turns([only]) is only
    for bad in ([], [only, 3]):
        with pytest.raises(ValueError, match="launches"):
            taking_turns(bad)


def test_input_sets_stop_at_the_memory_budget(monkeypatch):
    one = argmax_group(ArgmaxShape(4, 1000), ["graph"]).inputs()[0]["logits"].nbytes
    monkeypatch.setattr(perf_cases, "input_budget_bytes", lambda: int(2.5 * one))
    assert len(argmax_group(ArgmaxShape(4, 1000), ["graph"], copies=8).inputs()) == 2
    monkeypatch.setattr(perf_cases, "input_budget_bytes", lambda: one // 2)
    assert len(argmax_group(ArgmaxShape(4, 1000), ["graph"], copies=8).inputs()) == 1, "at least one set"
    monkeypatch.setattr(perf_cases, "input_budget_bytes", lambda: None)  # unknown (a CPU): every set
    assert len(argmax_group(ArgmaxShape(4, 1000), ["graph"], copies=8).inputs()) == 8
    with pytest.raises(ValueError, match="copies"):
        argmax_group(ArgmaxShape(4, 1000), ["graph"], copies=0)
    with pytest.raises(TypeError, match="copies"):
        paged_group(DecodeShape(8, 1, 1, 64, 64), ["graph"], copies=True)


def test_paged_sets_are_whole_caches():
    """Each set of a paged group is its own K/V, pool and block table (a different shuffle per seed)."""
    a, b = paged_group(DecodeShape(8, 1, 1, 64, 256), ["graph"], copies=2).inputs()
    assert not mx.array_equal(a["k"], b["k"]).item() and not mx.array_equal(a["storage"].keys, b["storage"].keys).item()
    assert list(a["table"].host) != list(b["table"].host)


@pytest.mark.parametrize("info, budget", [({"total_memory": 150754820096, "device_name": "NVIDIA H200"}, 37688705024),
                                          ({"memory_size": 17179869184, "device_name": "Apple M2"}, 4294967296),
                                          ({"architecture": "x86_64", "device_name": "AMD EPYC"}, None)],
                         ids=["cuda", "metal", "cpu"])
def test_the_input_budget_is_a_quarter_of_the_device_memory(monkeypatch, info, budget):
    monkeypatch.setattr(mx, "device_info", lambda device=None: info)
    assert perf_cases.input_budget_bytes() == budget


def test_a_set_is_sized_by_every_array_it_holds():
    """The budget counts a set's pool planes and table too (objects' attributes are walked), not only q, K, V."""
    s = DecodeShape(8, 2, 1, 128, 256)
    (x,) = paged_group(s, ["graph"], bits=4).inputs()
    storage = x["storage"]
    planes = [storage.keys, storage.values, storage.key_scales, storage.key_biases, storage.value_scales,
              storage.value_biases]
    dense = x["q"].nbytes + x["k"].nbytes + x["v"].nbytes
    table = x["table"].device.nbytes + x["table"].padded.nbytes
    assert perf_cases._nbytes(x) == dense + sum(p.nbytes for p in planes) + table


def test_a_baseline_of_other_input_sets_is_refused(tmp_path):
    case_id = f"normalized_argmax/logsumexp_sub_argmax[mlx]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
    shared = _one_case_baseline(case_id, 1e-3)
    shared["settings"]["batch"] = 2  # a document without `inputs` was measured on one set
    with pytest.raises(ValueError, match="inputs='shared'.*inputs='distinct'"):
        perf_run.run_suite("cpu", rounds=2, warmup=0, batch=2, only={case_id}, baseline=shared, copy=COPY,
                           log=lambda *_: None)
    run = perf_run.run_suite("cpu", rounds=5, warmup=0, batch=2, inputs="shared", only={case_id}, baseline=shared,
                             copy=COPY, save=tmp_path / "run.json", log=lambda *_: None)
    assert json.loads((tmp_path / "run.json").read_text())["settings"]["inputs"] == "shared" and run.measurements
    assert run.records[0]["inputs"] == "shared"
    distinct = perf_run.run_suite("cpu", rounds=2, warmup=0, batch=2, only={case_id}, baseline=False, copy=COPY,
                                  save=tmp_path / "d.json", log=lambda *_: None)
    assert json.loads((tmp_path / "d.json").read_text())["settings"]["inputs"] == "distinct" and distinct.measurements
    assert distinct.records[0]["inputs"] == "distinct" and distinct.records[0]["input_sets"] == 2
    with pytest.raises(ValueError, match="inputs must be one of"):
        perf_run.run_suite("cpu", inputs="same", baseline=False, copy=COPY, log=lambda *_: None)


def test_case_ids_are_unique_across_a_suite():
    ids = [c.id for g in perf_run.suite_groups("h200", torch=True) for c in g.cases]
    assert len(ids) == len(set(ids)) and len(ids) >= 60
    cpu = [c.id for g in perf_run.suite_groups("cpu") for c in g.cases]
    assert all("[graph]" in i or "[mlx]" in i for i in cpu)


@pytest.mark.parametrize("make, error", [
    (lambda: paged_group(DecodeShape(8, 1, 1, 128, 1000), ["graph"]), "whole number"),
    (lambda: paged_group(DecodeShape(8, 1, 1, 128, 1024), ["graph"], bits=3), "bits"),
    (lambda: kvq4_group(DecodeShape(8, 2, 1, 128, 1024), ["graph"]), "head_dim 256"),
    (lambda: multi_query_group(DecodeShape(8, 2, 9, 128, 1024), ["graph"]), "rows"),
    (lambda: argmax_group(DecodeShape(8, 2, 1, 128, 1024), ["graph"]), "ArgmaxShape"),
    (lambda: argmax_group(ArgmaxShape(1, 10), "graph"), "arms"),
], ids=["blocks", "bits", "kvq4-dim", "rows", "shape-type", "arms-str"])
def test_bad_groups_name_the_argument(make, error):
    with pytest.raises((TypeError, ValueError), match=error):
        make()


def test_torch_reference_is_skipped_with_a_reason_without_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch has CUDA here: the reference runs instead of being skipped")
    group = paged_group(DecodeShape(8, 1, 1, 64, 64), ["graph"], torch_backends=("default",))
    torch_case = next(c for c in group.cases if c.arm == "torch")
    with pytest.raises(RuntimeError, match="no CUDA"):
        torch_case.build()


def test_copy_bandwidth_counts_read_and_write():
    bw = copy_bandwidth(1 << 20, rounds=3, warmup=1)
    assert bw.gbps == pytest.approx(2 * (1 << 20) / bw.median_s / 1e9)
    assert len(bw.samples_s) == 3 and "read + write" in bw.method
    with pytest.raises(ValueError, match="nbytes"):
        copy_bandwidth(1000)


def test_perf_record_follows_the_schema():
    case = Case("b", "k", "graph", (1, 2), "bfloat16", bytes=10**6, flops=10**6, build=lambda: None)
    m = Measurement(case, (1e-3, 1.1e-3, 0.9e-3, 1e-3, 1.2e-3))
    plain = perf_record(m, copy_gbps=COPY.gbps, device_key="cpu-X")
    assert all(f in plain for f in SCHEMA_PERF_FIELDS)
    assert plain["kind"] == "perf" and plain["gbps"] == pytest.approx(1.0) and plain["pct_copy_bw"] == pytest.approx(10)
    assert plain["regressed"] is False and plain["p_value"] is None and plain["baseline_median_s"] is None
    assert plain["effect_threshold"] is None and plain["process_spread"] is None and plain["baseline_processes"] is None
    assert plain["protocol"] == "eval" and plain["batch"] is None
    piped = perf_record(m, copy_gbps=COPY.gbps, device_key="cpu-X", batch=8, protocol="pipelined")
    assert piped["protocol"] == "pipelined" and piped["batch"] == 8
    with pytest.raises(ValueError, match="protocol must be one of"):
        perf_record(m, copy_gbps=COPY.gbps, device_key="cpu-X", protocol="async")
    verdict = compare(m.samples_s, [s / 2 for s in m.samples_s])
    judged = perf_record(m, copy_gbps=COPY.gbps, device_key="cpu-X", verdict=verdict)
    assert judged["regressed"] is True and judged["effect_kind"] == "median_slowdown"
    assert judged["effect"] == pytest.approx(1.0) and judged["baseline_median_s"] == pytest.approx(5e-4)
    # one baseline process: the threshold is min_effect and there is no spread (perf/regression.py)
    assert judged["effect_threshold"] == pytest.approx(0.1) and judged["process_spread"] == 0
    assert judged["baseline_processes"] == 1
    # two processes at half and 0.55x: reference 0.525 ms, threshold 1.1 x 0.55 / 0.525 - 1, spread 10%
    pooled = compare_pooled(m.samples_s, [[s / 2 for s in m.samples_s], [s * 0.55 for s in m.samples_s]])
    record = perf_record(m, copy_gbps=COPY.gbps, device_key="cpu-X", verdict=pooled)
    assert record["baseline_processes"] == 2 and record["process_spread"] == pytest.approx(0.1)
    assert record["effect_threshold"] == pytest.approx(1.1 * 0.55 / 0.525 - 1)
    assert record["baseline_median_s"] == pytest.approx(5.25e-4)
    # the report's verdict: a regressed benchmark fails the run (reports/results.py)
    assert build_results([plain])["verdict"] == "PASS"
    assert build_results([plain, judged])["verdict"] == "FAIL"


def _one_case_baseline(case_id: str, median: float) -> dict:
    group = next(g for g in perf_run.suite_groups("cpu") if any(c.id == case_id for c in g.cases))
    case = next(c for c in group.cases if c.id == case_id)
    return {"schema": store.SCHEMA, "device_key": store.device_key(), "copy_bandwidth": COPY.as_dict(),
            "settings": {"suite": "cpu", "rounds": 5, "warmup": 1, "batch": 1},
            "benchmarks": {case_id: Measurement(case, (median,) * 5).as_dict()}}


def test_gate_flags_a_case_slower_than_its_baseline(tmp_path, monkeypatch, capsys):
    case_id = f"normalized_argmax/normalized_argmax[graph]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
    monkeypatch.setattr(store, "BASELINE_DIR", tmp_path / "baselines")
    monkeypatch.setattr(perf_run, "copy_bandwidth", lambda: COPY)
    results = tmp_path / "out" / "results.jsonl"
    assert perf_run.main(["--gate", "--results", str(results), "--fresh"]) == 0  # no baseline: no-op
    assert "regression gate not applied" in capsys.readouterr().out
    store.write_baseline(_one_case_baseline(case_id, 1e-7))  # 100 ns: anything real is far slower
    assert perf_run.main(["--gate", "--results", str(results), "--fresh"]) == 1
    records = list(read_records(results))
    assert [r["kind"] for r in records] == ["environment", "perf"]
    perf = records[1]
    assert perf["case"] == case_id and perf["regressed"] is True and perf["p_value"] < 0.01
    assert build_results(records)["verdict"] == "FAIL"


def test_save_writes_a_baseline_document(tmp_path, monkeypatch):
    case_id = f"normalized_argmax/logsumexp_sub_argmax[mlx]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
    run = perf_run.run_suite("cpu", rounds=5, warmup=1, only={case_id}, baseline=False, copy=COPY,
                             save=tmp_path / "run.json", calibration=tmp_path / "cal.json", log=lambda *_: None)
    document = json.loads((tmp_path / "run.json").read_text())
    assert store.validate_baseline(document) and list(document["benchmarks"]) == [case_id]
    assert document["settings"] == {"suite": "cpu", "rounds": 5, "warmup": 1, "batch": 1, "protocol": "eval",
                                    "inputs": "shared"}  # one call per round: one input set
    calibration = json.loads((tmp_path / "cal.json").read_text())["cases"][case_id]
    assert len(calibration["a1"]) == len(calibration["a2"]) == len(calibration["slowed"]) == 5
    assert run.records[0]["regressed"] is False


def test_gate_against_a_pooled_baseline_file(tmp_path, monkeypatch, capsys):
    # --baseline FILE: a trial baseline (here pooled from two processes) instead of perf/baselines/<key>.json,
    # which stays absent; the records carry the pooled rule's threshold, spread and process count.
    case_id = f"normalized_argmax/normalized_argmax[graph]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
    monkeypatch.setattr(store, "BASELINE_DIR", tmp_path / "baselines")
    monkeypatch.setattr(perf_run, "copy_bandwidth", lambda: COPY)
    first, second = _one_case_baseline(case_id, 1e-7), _one_case_baseline(case_id, 1.1e-7)
    pooled = tmp_path / "pooled.json"
    pooled.write_text(json.dumps(store.pool_documents([first, second])))
    results = tmp_path / "out" / "results.jsonl"
    assert perf_run.main(["--gate", "--baseline", str(pooled), "--results", str(results), "--fresh"]) == 1
    perf = [r for r in read_records(results) if r["kind"] == "perf"]
    assert [r["case"] for r in perf] == [case_id] and perf[0]["regressed"] is True
    assert perf[0]["baseline_processes"] == 2 and perf[0]["process_spread"] == pytest.approx(0.1)
    assert perf[0]["effect_threshold"] == pytest.approx(1.1 * 1.1e-7 / 1.05e-7 - 1)
    assert not (tmp_path / "baselines").exists()
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**first, "device_key": "cuda-Other_GPU"}))
    assert perf_run.main(["--gate", "--baseline", str(other)]) == 2
    assert "cuda-Other_GPU" in capsys.readouterr().err
    assert perf_run.main(["--gate", "--baseline", str(tmp_path / "missing.json")]) == 2


def test_a_baseline_case_the_gate_cannot_judge_fails_it(tmp_path, monkeypatch, capsys):
    # A kernel that now raises (or a case the suite lost) is not "0 regressed": the gate exits 2, which fails
    # make gate, and says which case it could not judge.
    case_id = f"normalized_argmax/normalized_argmax[graph]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
    monkeypatch.setattr(perf_run, "copy_bandwidth", lambda: COPY)
    baseline = _one_case_baseline(case_id, 1.0)  # 1 s: nothing real is slower
    lost = {**baseline, "benchmarks": {"gone/kernel[graph]/1x2/bfloat16": baseline["benchmarks"][case_id]}}
    for document, reason in ((lost, "not in the suite"), (baseline, "RuntimeError: the kernel broke")):
        path = tmp_path / "baseline.json"
        path.write_text(json.dumps(document))
        if document is baseline:
            def broken(*args, **kwargs):
                raise RuntimeError("the kernel broke")

            monkeypatch.setattr(perf_cases, "normalized_argmax", broken)
        assert perf_run.main(["--gate", "--baseline", str(path), "--results", str(tmp_path / "r.jsonl")]) == 2
        captured = capsys.readouterr()
        assert reason in captured.out and "did not judge 1 of its baseline's 1 cases" in captured.err


@pytest.mark.parametrize("argv, words", [
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--batch", "0"], "--batch must be >= 1"),
    (["--warmup", "-1"], "--warmup must be >= 0"),
    (["--alpha", "5"], "--alpha must be"),
    (["--min-effect", "-1"], "--min-effect must be"),
])
def test_run_refuses_out_of_range_options(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_:
        perf_run.main([*argv, "--no-baseline"])
    assert exit_.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["--protocol", "pipelined", "--calibration", "CAL", "--no-baseline"], "calibration samples are taken"),
    (["--baseline", "BASE", "--batch", "2"], "per-call times are not comparable"),
])
def test_a_refused_fresh_run_leaves_the_results_file_as_it_was(tmp_path, monkeypatch, capsys, argv, words):
    # --fresh starts the file anew only once run_suite has accepted its arguments: a refused run keeps the records.
    case_id = f"normalized_argmax/normalized_argmax[graph]/{'x'.join(map(str, CPU_ARGMAX[1]))}/bfloat16"
    monkeypatch.setattr(perf_run, "copy_bandwidth", lambda: pytest.fail("a refused run measured something"))
    (tmp_path / "base.json").write_text(json.dumps(_one_case_baseline(case_id, 1.0)))  # batch 1
    results = tmp_path / "r.jsonl"
    results.write_text('{"kind": "environment", "schema": 1}\n')
    argv = [{"CAL": str(tmp_path / "c.json"), "BASE": str(tmp_path / "base.json")}.get(a, a) for a in argv]
    assert perf_run.main(["--suite", "cpu", "--results", str(results), "--fresh", *argv]) == 2
    assert words in capsys.readouterr().err
    assert results.read_text() == '{"kind": "environment", "schema": 1}\n'
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize("option", ["--results", "--save", "--calibration"])
def test_an_output_path_that_cannot_be_a_file_is_refused_up_front(tmp_path, monkeypatch, capsys, option):
    monkeypatch.setattr(perf_run, "copy_bandwidth", lambda: pytest.fail("a refused run measured something"))
    (tmp_path / "a_file").write_text("x")
    for path, words in ((tmp_path, "is a folder, not a file"), (tmp_path / "a_file" / "out.json", "is not a folder")):
        with pytest.raises(SystemExit) as exit_:
            perf_run.main(["--suite", "cpu", "--no-baseline", option, str(path)])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"{option}: {path}" in err and words in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # no temporary file left behind


def test_a_failed_json_write_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "adir"
    target.mkdir()
    with pytest.raises(OSError):
        perf_run._write_json(target, {"a": 1})  # os.replace onto a folder fails
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"] and not any(target.iterdir())


def test_gate_without_a_baseline_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        perf_run.main(["--gate", "--no-baseline"])
    assert exit_.value.code == 2
    assert "--gate judges against the baseline, which --no-baseline" in capsys.readouterr().err
