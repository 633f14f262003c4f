"""Baseline storage: device keys, validation, and the atomic update (an interrupted write changes nothing)."""

from __future__ import annotations

import json
import os
import re

import mlx.core as mx
import numpy as np
import pytest

from perf import baseline as store


def _document(key: str = "cpu-Test_CPU", median: float = 1e-3) -> dict:
    return {
        "schema": store.SCHEMA, "device_key": key, "device": {"device_name": "Test CPU"},
        "environment": {"mlx": mx.__version__}, "copy_bandwidth": {"gbps": 10.0},
        "settings": {"suite": "cpu", "rounds": 5, "warmup": 1, "batch": 1},
        "benchmarks": {"b/k[graph]/1x2/bfloat16": {
            "benchmark": "b", "kernel": "k", "arm": "graph", "shape": [1, 2], "dtype": "bfloat16",
            "bytes": 100, "flops": 10, "median_s": median, "iqr_s": 0.0, "samples_s": [median] * 5}},
    }


def test_device_key_names_backend_and_device(monkeypatch):
    key = store.device_key(mx.Device(mx.cpu))
    assert key.startswith("cpu-") and store.baseline_path(key).name == f"{key}.json", key
    monkeypatch.setattr(store.mx, "device_info", lambda device: {"device_name": "NVIDIA H200 / SXM (141GB)"})
    assert store.device_key(mx.Device(mx.cpu)) == "cpu-NVIDIA_H200_SXM_141GB"
    monkeypatch.setattr(store.mx, "device_info", lambda device: {})
    assert store.device_key(mx.Device(mx.cpu)) == "cpu-unknown"


def test_roundtrip(tmp_path):
    path = store.write_baseline(_document(), tmp_path)
    assert path == tmp_path / "cpu-Test_CPU.json"
    assert store.load_baseline("cpu-Test_CPU", tmp_path) == _document()
    assert store.load_baseline("cpu-Other", tmp_path) is None  # no baseline: the gate does not apply


def test_interrupted_write_leaves_the_old_baseline_intact(tmp_path, monkeypatch):
    path = store.write_baseline(_document(median=1e-3), tmp_path)
    before = path.read_bytes()

    real_fsync = os.fsync
    calls = []

    def failing_fsync(fd):  # the new bytes are written to the temp file, then the "power fails"
        calls.append(fd)
        raise KeyboardInterrupt("simulated interruption mid-write")

    monkeypatch.setattr(store.os, "fsync", failing_fsync)
    with pytest.raises(KeyboardInterrupt):
        store.write_baseline(_document(median=5e-3), tmp_path)
    monkeypatch.setattr(store.os, "fsync", real_fsync)
    assert calls, "the simulated failure must have happened inside the write"
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu-Test_CPU.json"], "the temp file must be removed"


def test_failure_while_writing_the_text_leaves_it_intact(tmp_path, monkeypatch):
    path = store.write_baseline(_document(median=1e-3), tmp_path)
    before = path.read_bytes()
    real_fdopen = os.fdopen

    class Torn:
        """A file that writes half the text, then fails (a full disk)."""

        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, text):
            self.handle.write(text[: len(text) // 2])
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, "fdopen", lambda fd, mode: Torn(real_fdopen(fd, mode)))
    with pytest.raises(OSError):
        store.write_baseline(_document(median=5e-3), tmp_path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["cpu-Test_CPU.json"]


def test_failed_update_command_leaves_the_baseline_exactly_as_it_was(tmp_path, capsys):
    path = store.write_baseline(_document(), tmp_path)
    before = path.read_bytes()
    bad = _document()
    bad["benchmarks"]["b/k[graph]/1x2/bfloat16"]["samples_s"] = [1e-3, float("nan")]
    source = tmp_path / "run.json"
    source.write_text(json.dumps(bad))
    assert store.main(["update", "--from", str(source), "--dir", str(tmp_path)]) == 2
    assert "unchanged" in capsys.readouterr().err
    assert path.read_bytes() == before
    assert store.main(["update", "--from", str(tmp_path / "missing.json"), "--dir", str(tmp_path)]) == 2
    assert path.read_bytes() == before


def test_update_command_stores_a_run(tmp_path):
    source = tmp_path / "run.json"
    source.write_text(json.dumps(_document(key="cuda-Some_GPU", median=2e-3)))
    assert store.main(["update", "--from", str(source), "--dir", str(tmp_path)]) == 0
    assert store.load_baseline("cuda-Some_GPU", tmp_path)["benchmarks"]["b/k[graph]/1x2/bfloat16"]["median_s"] == 2e-3


@pytest.mark.parametrize("mutate, error, words", [
    (lambda d: d.update(schema=99), ValueError, "schema"),
    (lambda d: d.update(device_key="../evil"), ValueError, "key"),
    (lambda d: d.update(device_key=3), TypeError, "key"),
    (lambda d: d.update(benchmarks={}), ValueError, "benchmarks"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].pop("bytes"), ValueError, "bytes"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(samples_s=[]), ValueError, "samples_s"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(samples_s=[-1.0]), ValueError, "samples_s"),
    (lambda d: d.update(copy_bandwidth={"gbps": 0}), ValueError, "copy_bandwidth"),
    (lambda d: d.update(copy_bandwidth={"gbps": float("nan")}), ValueError, "copy_bandwidth"),
    (lambda d: d.update(copy_bandwidth={"gbps": float("inf")}), ValueError, "copy_bandwidth"),
    (lambda d: d.update(device_key="cpu-Test\n"), ValueError, "key"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(samples_s=[10**400]), ValueError, "samples_s"),
    (lambda d: d.update(settings=[]), ValueError, "settings"),
    (lambda d: d["settings"].update(gate_floor_s=-1.0), ValueError, "gate_floor_s"),
    (lambda d: d["settings"].update(gate_floor_s=float("nan")), ValueError, "gate_floor_s"),
    (lambda d: d["settings"].update(gate_floor_s="abc"), ValueError, "gate_floor_s"),
    (lambda d: d["settings"].update(gate_floor_s=True), ValueError, "gate_floor_s"),
    (lambda d: d["settings"].update(protocol="async"), ValueError, "protocol"),
    (lambda d: d["settings"].update(rounds=2.5), ValueError, "rounds"),
    # a key JSON cannot hold as itself: NaN twice wrote a file json loads refuse (a repeated key)
    (lambda d: d.update(benchmarks={float("nan"): d["benchmarks"]["b/k[graph]/1x2/bfloat16"]}), ValueError,
     "benchmarks keys"),
    (lambda d: d.update(benchmarks={"": d["benchmarks"]["b/k[graph]/1x2/bfloat16"]}), ValueError, "benchmarks keys"),
    # what pooling reads back from a source: it raised AttributeError / KeyError there, uncaught by the CLI
    (lambda d: d.update(environment="linux"), ValueError, "'environment' must be"),
    (lambda d: d.update(environment={"git": "abc123"}), ValueError, r"'environment\.git' must be"),
    (lambda d: d.update(processes=["p0"]), ValueError, r"processes\[0\] must be"),
    (lambda d: d.update(processes=[{"copy_bandwidth": {"nbytes": 1}}]), ValueError, r"processes\[0\]\.copy_bandwidth"),
    (lambda d: d.update(processes="p0"), ValueError, "'processes' must be"),
    # fields perf.report and pooling compute with: refused by name, not a KeyError / TypeError in a reader
    (lambda d: d.update(references={"x": {}}), ValueError, r"references\['x'\] lacks 'benchmark'"),
    (lambda d: d.update(references="torch"), ValueError, "'references' must be"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(shape=5), ValueError, r"\.shape must be"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(bytes="lots"), ValueError, r"\.bytes must be"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(kernel=3), ValueError, r"\.kernel must be"),
    # unchecked, a NaN median was written to the baseline as a bare NaN: not JSON
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(median_s=float("nan")), ValueError,
     r"\.median_s must be"),
], ids=["schema", "key-path", "key-type", "empty", "field", "no-samples", "negative", "copy", "copy-nan", "copy-inf",
        "key-newline", "huge-int", "settings-type", "floor-negative", "floor-nan", "floor-str", "floor-bool",
        "protocol", "rounds", "case-id-nan", "case-id-empty", "environment-str", "git-str", "process-str",
        "process-copy", "processes-str", "reference-empty", "references-str", "shape-int", "bytes-str",
        "kernel-int", "median-nan"])
def test_invalid_documents_are_refused_before_writing(tmp_path, mutate, error, words):
    document = _document()
    mutate(document)
    with pytest.raises(error, match=words):
        store.write_baseline(document, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("directory, error", [("", ValueError), (3, TypeError)])
def test_a_directory_that_names_no_folder_is_refused(monkeypatch, tmp_path, directory, error):
    """"" read as falsy was the committed baselines' folder: a write meant for elsewhere replaced them."""
    monkeypatch.setattr(store, "BASELINE_DIR", tmp_path)
    with pytest.raises(error, match="directory"):
        store.write_baseline(_document(), directory)
    assert list(tmp_path.iterdir()) == []


def test_a_repeated_case_id_in_a_source_is_refused(tmp_path, capsys):
    path = store.write_baseline(_document(), tmp_path)
    before = path.read_bytes()
    document = _document()
    entry = json.dumps(document["benchmarks"][CASE])
    document["benchmarks"] = "BENCHMARKS"
    source = tmp_path / "dup.json"  # the same case id twice: json.loads alone would keep the last one
    source.write_text(json.dumps(document).replace('"BENCHMARKS"', f'{{"{CASE}": {entry}, "{CASE}": {entry}}}'))
    assert store.main(["update", "--from", str(source), "--dir", str(tmp_path)]) == 2
    assert "repeated keys" in capsys.readouterr().err and path.read_bytes() == before


@pytest.mark.parametrize("settings", [None, []], ids=["null", "list"])
def test_a_floor_on_a_document_without_settings(tmp_path, capsys, settings):
    document = _document()
    document["settings"] = settings
    source = tmp_path / "run.json"
    source.write_text(json.dumps(document))
    status = store.main(["update", "--from", str(source), "--dir", str(tmp_path / "b"), "--gate-floor-ms", "0.25"])
    if settings is None:  # no settings: the floor is the only one
        assert status == 0
        assert store.load_baseline("cpu-Test_CPU", tmp_path / "b")["settings"] == {"gate_floor_s": 0.00025}
    else:
        assert status == 2 and "settings" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_a_write_that_cannot_happen_is_an_error_not_a_traceback(tmp_path, capsys):
    source = tmp_path / "run.json"
    source.write_text(json.dumps(_document()))
    (tmp_path / "b" / "cpu-Test_CPU.json").mkdir(parents=True)  # a folder where the file would go
    assert store.main(["update", "--from", str(source), "--dir", str(tmp_path / "b")]) == 2
    assert "unchanged" in capsys.readouterr().err
    assert store.main(["show", "bad/key"]) == 2
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cpu-Corrupt.json").write_text("{")
    assert store.main(["show", "cpu-Corrupt", "--dir", str(tmp_path / "c")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_load_refuses_a_file_under_the_wrong_key_or_corrupt(tmp_path):
    store.write_baseline(_document(), tmp_path)
    os.replace(tmp_path / "cpu-Test_CPU.json", tmp_path / "cpu-Other.json")
    with pytest.raises(ValueError, match="cpu-Test_CPU"):
        store.load_baseline("cpu-Other", tmp_path)
    (tmp_path / "cpu-Broken.json").write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        store.load_baseline("cpu-Broken", tmp_path)


def test_committed_baselines_are_valid():
    paths = sorted(store.BASELINE_DIR.glob("*.json"))
    for path in paths:
        document = store.load_baseline(path.stem)
        assert document["device_key"] == path.stem
        assert all(len(e["samples_s"]) >= 5 for e in document["benchmarks"].values()), path
    assert all(not p.name.startswith(".") for p in store.BASELINE_DIR.iterdir()), "a stray temp file"


# --- pooled baselines: several processes, each kept apart ---------------------------------------

CASE = "b/k[graph]/1x2/bfloat16"


def _run(median: float, *, key: str = "cpu-Test_CPU", gbps: float = 10.0, rounds: int = 5, seed: int = 0) -> dict:
    """A run document of one process: five distinct samples around ``median``."""
    document = _document(key, median)
    samples = [median * (1 + 0.001 * ((seed + i) % 5 - 2)) for i in range(5)]
    document["benchmarks"][CASE].update(samples_s=samples, median_s=sorted(samples)[2])
    document["copy_bandwidth"] = {"gbps": gbps}
    document["settings"]["rounds"] = rounds
    return document


def _write_runs(tmp_path, *documents) -> list[str]:
    paths = []
    for i, document in enumerate(documents):
        path = tmp_path / f"p{i + 1}.json"
        path.write_text(json.dumps(document))
        paths += ["--from", str(path)]
    return paths


def test_update_pools_several_processes_each_kept_apart(tmp_path, capsys):
    runs = [_run(1e-3, gbps=10.0, seed=0), _run(1.2e-3, gbps=30.0, seed=1), _run(1.1e-3, gbps=20.0, seed=2)]
    assert store.main(["update", *_write_runs(tmp_path, *runs), "--gate-floor-ms", "0.25",
                       "--dir", str(tmp_path / "b")]) == 0
    assert "3 processes pooled" in capsys.readouterr().out
    document = store.load_baseline("cpu-Test_CPU", tmp_path / "b")
    entry = document["benchmarks"][CASE]
    per_process = [r["benchmarks"][CASE]["samples_s"] for r in runs]
    assert entry["process_samples_s"] == per_process and store.baseline_processes(entry) == per_process
    assert entry["samples_s"] == [s for p in per_process for s in p]
    assert entry["median_s"] == pytest.approx(1.1e-3)  # the median of the process medians
    assert [p["source"] for p in document["processes"]] == [str(tmp_path / f"p{i}.json") for i in (1, 2, 3)]
    assert document["copy_bandwidth"]["gbps"] == 20.0  # the median process's
    assert document["settings"] == {"suite": "cpu", "rounds": 5, "warmup": 1, "batch": 1, "gate_floor_s": 0.00025}
    assert "3 processes" in store._show(document) and "process spread 20.0%" in store._show(document)


def test_the_pooled_median_is_the_median_of_process_medians_not_of_all_samples():
    """Processes with skewed samples (each: three fast rounds, two slow ones): the gate's reference is the middle
    process's median, 1.12 ms, where the median of all fifteen samples is 1.21 ms. And with an even count of
    processes the copy bandwidth stored is the lower median process's (of 10 and 30 GB/s, 10)."""
    runs = []
    for i, base in enumerate((1.00e-3, 1.10e-3, 1.20e-3)):
        run = _run(base, gbps=10.0 * (i + 1), seed=i)
        run["benchmarks"][CASE]["samples_s"] = [base, base + 1e-5, base + 2e-5, 1.5e-3 + 2e-5 * i, 1.51e-3 + 2e-5 * i]
        runs.append(run)
    entry = store.pool_documents(runs, ["p1", "p2", "p3"])["benchmarks"][CASE]
    assert entry["median_s"] == pytest.approx(1.12e-3) and float(np.median(entry["samples_s"])) == pytest.approx(1.21e-3)
    assert store.pool_documents(runs[:2], ["p1", "p2"])["copy_bandwidth"]["gbps"] == 10.0


def test_a_pooled_baseline_takes_another_process(tmp_path):
    pooled = store.pool_documents([_run(1e-3, seed=0), _run(1.1e-3, seed=1)], ["p1", "p2"])
    grown = store.pool_documents([pooled, _run(1.05e-3, seed=2)], ["baseline", "p3"])
    assert len(store.baseline_processes(grown["benchmarks"][CASE])) == 3
    assert [p["source"] for p in grown["processes"]] == ["p1", "p2", "p3"]


def test_an_old_single_process_entry_is_one_process():
    entry = _document()["benchmarks"][CASE]
    assert store.baseline_processes(entry) == [entry["samples_s"]]
    with pytest.raises(TypeError, match="entry"):
        store.baseline_processes([1e-3])


def _mismatch(name):
    """Three runs, the third spoiled by ``name``."""
    first, second, third = _run(1e-3, seed=0), _run(1.2e-3, seed=1), _run(1.1e-3, seed=2)
    if name == "device":
        third = _run(1.1e-3, key="cuda-Other_GPU", seed=2)
    elif name == "settings":
        third = _run(1.1e-3, rounds=7, seed=2)
    elif name == "protocol":
        third["settings"]["protocol"] = "pipelined"
        for run in (first, second):
            run["settings"]["protocol"] = "eval"
    elif name == "inputs":  # a run of the old protocol (one input set per round) among runs of the new one
        for run in (first, second):
            run["settings"]["inputs"] = "distinct"
        third["settings"]["inputs"] = "shared"
    elif name == "absent-protocol":  # absent means eval: not pooled with a pipelined run
        for run in (first, second):
            run["settings"].pop("protocol", None)
        third["settings"]["protocol"] = "pipelined"
    elif name == "absent-inputs":  # absent means shared
        for run in (first, second):
            run["settings"].pop("inputs", None)
        third["settings"]["inputs"] = "distinct"
    elif name == "cases":
        third["benchmarks"]["b/k[graph]/9x9/bfloat16"] = third["benchmarks"].pop(CASE)
    elif name == "description":
        third["benchmarks"][CASE]["bytes"] = 999
    elif name == "twice":
        third = _run(1e-3, seed=0)
    elif name == "mlx":
        third["environment"]["mlx"] = "0.0.1"
    elif name == "invalid":
        third["benchmarks"][CASE]["samples_s"] = [1e-3, float("nan")]
    return [first, second, third]


@pytest.mark.parametrize("name, words", [
    ("device", "device_key differs: .*p1.json has 'cpu-Test_CPU', .*p3.json has 'cuda-Other_GPU'"),
    ("settings", "settings.rounds differs: .*p1.json has 5, .*p3.json has 7"),
    ("protocol", "settings.protocol differs: .*p1.json has 'eval', .*p3.json has 'pipelined'"),
    ("inputs", "settings.inputs differs: .*p1.json has 'distinct', .*p3.json has 'shared'"),
    ("absent-protocol", "settings.protocol differs: .*p1.json has 'eval', .*p3.json has 'pipelined'"),
    ("absent-inputs", "settings.inputs differs: .*p1.json has 'shared', .*p3.json has 'distinct'"),
    ("cases", "p3.json does not hold the cases of .*p1.json .*missing"),
    ("description", "bytes differs"),
    ("twice", "processes 1 .*p1.json.* and 3 .*p3.json.* hold identical samples"),
    ("mlx", "MLX version"),
    ("invalid", "p3.json: .*samples_s"),
])
def test_pooling_mismatched_runs_is_refused_and_the_baseline_untouched(tmp_path, capsys, name, words):
    path = store.write_baseline(_document(), tmp_path)
    before = path.read_bytes()
    assert store.main(["update", *_write_runs(tmp_path, *_mismatch(name)), "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unchanged" in err
    assert re.search(words, err), err
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu-Test_CPU.json", "p1.json", "p2.json", "p3.json"]


def test_pool_documents_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="documents"):
        store.pool_documents(_run(1e-3))
    with pytest.raises(TypeError, match="documents"):
        store.pool_documents([])
    with pytest.raises(ValueError, match="sources"):
        store.pool_documents([_run(1e-3), _run(1.1e-3, seed=1)], ["only one"])
    with pytest.raises(TypeError, match="sources"):  # "ab" named the documents 'a' and 'b'
        store.pool_documents([_run(1e-3), _run(1.1e-3, seed=1)], "ab")


@pytest.mark.parametrize("mutate, words", [
    (lambda e, d: e.update(process_samples_s=[]), "process_samples_s"),
    (lambda e, d: e.update(process_samples_s=[e["samples_s"][:2], [1.0]]), "concatenation"),
    (lambda e, d: e["process_samples_s"][1].__setitem__(0, -1.0), r"process_samples_s\[1\]"),
    (lambda e, d: d["processes"].pop(), "processes"),
], ids=["empty", "concatenation", "negative", "count"])
def test_invalid_pooled_documents_are_refused(tmp_path, mutate, words):
    document = store.pool_documents([_run(1e-3, seed=0), _run(1.1e-3, seed=1)])
    mutate(document["benchmarks"][CASE], document)
    with pytest.raises(ValueError, match=words):
        store.write_baseline(document, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d.update(references={"x": {}}), r"references['x'] lacks 'benchmark'"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(shape=5), "].shape must be"),
    (lambda d: d["benchmarks"]["b/k[graph]/1x2/bfloat16"].update(bytes="lots"), "].bytes must be"),
], ids=["reference-empty", "shape-int", "bytes-str"])
def test_documents_perf_report_cannot_table_are_refused_by_field(tmp_path, capsys, mutate, words):
    from perf import report

    document = _document()
    mutate(document)
    source = tmp_path / "run.json"
    source.write_text(json.dumps(document))
    assert report.main([str(source)]) == 2
    captured = capsys.readouterr()
    assert words in captured.err and captured.out == ""
    # update --from refuses the same document (it stored it before), writing nothing
    assert store.main(["update", "--from", str(source), "--dir", str(tmp_path / "b")]) == 2
    assert words in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_update_never_writes_a_bare_nan(tmp_path, capsys):
    document = _document()
    document["benchmarks"]["b/k[graph]/1x2/bfloat16"]["kernel_span_median_s"] = float("nan")
    source = tmp_path / "run.json"
    source.write_text(json.dumps(document))  # Python writes (and reads) the bare NaN
    assert store.main(["update", "--from", str(source), "--dir", str(tmp_path / "b")]) == 2
    assert "kernel_span_median_s must be" in capsys.readouterr().err and not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match="NaN or infinity"):  # a field nothing validates: still no NaN in a file
        store.write_baseline(_document() | {"device": {"memory": float("nan")}}, tmp_path / "b")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("argv, words", [(["--suite", "nope"], "--suite must be one of"),
                                         (["--rounds", "0"], "--rounds must be >= 1")])
def test_update_refuses_bad_run_options_before_running(tmp_path, monkeypatch, capsys, argv, words):
    from perf import run as perf_run

    monkeypatch.setattr(perf_run, "run_suite", lambda *a, **k: pytest.fail("the suite ran"))
    with pytest.raises(SystemExit) as exit_:
        store.main(["update", *argv, "--dir", str(tmp_path)])
    assert exit_.value.code == 2 and words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_update_names_a_run_that_refuses_its_arguments(tmp_path, monkeypatch, capsys):
    from perf import run as perf_run

    def refuses(*args, **kwargs):
        raise ValueError("kernel time was asked for but is unavailable")

    monkeypatch.setattr(perf_run, "run_suite", refuses)
    assert store.main(["update", "--dir", str(tmp_path)]) == 2
    assert "not stored (kernel time was asked for" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
