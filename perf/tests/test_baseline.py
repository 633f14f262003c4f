"""Baseline storage: device keys, validation, and the atomic update (an interrupted write changes nothing)."""

from __future__ import annotations

import json
import os

import mlx.core as mx
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
], ids=["schema", "key-path", "key-type", "empty", "field", "no-samples", "negative", "copy"])
def test_invalid_documents_are_refused_before_writing(tmp_path, mutate, error, words):
    document = _document()
    mutate(document)
    with pytest.raises(error, match=words):
        store.write_baseline(document, tmp_path)
    assert list(tmp_path.iterdir()) == []


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
