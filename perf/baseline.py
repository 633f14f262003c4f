"""Baselines: per device, the raw timing samples of every benchmark, committed in perf/baselines/.

    python -m perf.baseline key                      # this machine's device key
    python -m perf.baseline show [KEY]               # what a baseline holds
    python -m perf.baseline update [--suite S] [--rounds R] [--key KEY]   # run the suite, store it
    python -m perf.baseline update --from RUN.json [--key KEY] [--gate-floor-ms F]  # store a recorded run

The device key is ``<backend>-<device name>`` of MLX's default device, with
every run of characters other than letters, digits, ``.`` and ``-`` made one
``_``: ``cuda-NVIDIA_H200``, ``metal-Apple_M4_Pro``, ``cpu-AMD_EPYC``
(``mx.device_info(mx.default_device())["device_name"]``; backend ``cpu`` on
the CPU device, else ``metal`` / ``cuda``). The file is
``perf/baselines/<key>.json``::

    {"schema": 1, "device_key": ..., "device": {device_info}, "environment": {mlx, platform, git, date},
     "copy_bandwidth": {gbps, nbytes, median_s, samples_s, method},
     "settings": {suite, rounds, warmup, batch, gate_floor_s (optional)},
     "benchmarks": {case id: {benchmark, kernel, arm, shape, dtype, bytes, flops, median_s, iqr_s, samples_s}}}

A run of ``python -m perf.run --save RUN.json`` writes exactly this document
(for the machine it ran on), so a baseline can be measured on one machine and
stored from another (``update --from``, as the H200 one was).

Updating is explicit (``make perf-baseline`` or ``update``); nothing else writes
a baseline. The write is atomic: the document is validated first, written to a
temporary file in the same directory, flushed and fsynced, then moved over the
old file with ``os.replace`` (atomic on POSIX) and the directory fsynced. An
exception at any point before ``os.replace`` (a failed run, invalid data, a
full disk, an interrupt) removes the temporary file and leaves the old baseline
byte for byte as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

import mlx.core as mx

__all__ = ["BASELINE_DIR", "SCHEMA", "baseline_path", "device_key", "load_baseline", "validate_baseline",
           "write_baseline"]

SCHEMA = 1
BASELINE_DIR = Path(__file__).resolve().parent / "baselines"
_KEY = re.compile(r"^[A-Za-z0-9.\-_]+$")


def device_key(device: mx.Device | None = None) -> str:
    """``<backend>-<device name>`` of ``device`` (default: MLX's default device); module docstring."""
    device = device or mx.default_device()
    if device.type == mx.DeviceType.cpu:
        backend = "cpu"
    else:
        from reports.environment import mlx_backend

        backend = mlx_backend()
    name = str(mx.device_info(device).get("device_name") or "unknown")
    return f"{backend}-{re.sub(r'[^A-Za-z0-9.-]+', '_', name).strip('_') or 'unknown'}"


def _check_key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, got {type(key).__name__}")
    if not _KEY.match(key) or key.startswith("."):
        raise ValueError(f"key must be letters, digits, '.', '-' and '_' (a device key), got {key!r}")
    return key


def baseline_path(key: str, directory: Path | None = None) -> Path:
    return Path(directory or BASELINE_DIR) / f"{_check_key(key)}.json"


def _positive_list(where: str, values) -> None:
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where} must be a non-empty list of seconds")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < float("inf")):
            raise ValueError(f"{where} must hold positive finite seconds, got {v!r}")


def validate_baseline(document) -> dict:
    """``document`` if it is a well-formed baseline, else ValueError / TypeError naming the field."""
    if not isinstance(document, dict):
        raise TypeError(f"a baseline must be a JSON object, got {type(document).__name__}")
    if document.get("schema") != SCHEMA:
        raise ValueError(f"baseline schema must be {SCHEMA}, got {document.get('schema')!r}")
    _check_key(document.get("device_key"))
    benchmarks = document.get("benchmarks")
    if not isinstance(benchmarks, dict) or not benchmarks:
        raise ValueError("baseline 'benchmarks' must be a non-empty object of case id -> entry")
    for case_id, entry in benchmarks.items():
        if not isinstance(entry, dict):
            raise ValueError(f"benchmarks[{case_id!r}] must be an object")
        for name in ("benchmark", "kernel", "arm", "shape", "dtype", "bytes", "flops", "samples_s"):
            if name not in entry:
                raise ValueError(f"benchmarks[{case_id!r}] lacks {name!r}")
        _positive_list(f"benchmarks[{case_id!r}].samples_s", entry["samples_s"])
    copy = document.get("copy_bandwidth")
    if copy is not None:
        if not isinstance(copy, dict) or not isinstance(copy.get("gbps"), (int, float)) or copy["gbps"] <= 0:
            raise ValueError("baseline 'copy_bandwidth' must be null or an object with a positive 'gbps'")
    return document


def load_baseline(key: str, directory: Path | None = None) -> dict | None:
    """The stored baseline of device ``key``, or None when there is none."""
    path = baseline_path(key, directory)
    if not path.exists():
        return None
    with path.open() as handle:
        try:
            document = json.load(handle)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    validate_baseline(document)
    if document["device_key"] != key:
        raise ValueError(f"{path} holds device_key {document['device_key']!r}, not {key!r}")
    return document


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_baseline(document: dict, directory: Path | None = None) -> Path:
    """Atomically store ``document`` as the baseline of its ``device_key`` (module docstring)."""
    validate_baseline(document)
    text = json.dumps(document, indent=1, sort_keys=True) + "\n"
    path = baseline_path(document["device_key"], directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            os.chmod(temp, 0o644)  # mkstemp creates 0600; a baseline is a committed, shared file
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(path.parent)
    return path


def _show(document: dict) -> str:
    lines = [f"{document['device_key']}: {len(document['benchmarks'])} benchmarks, "
             f"copy {document.get('copy_bandwidth', {}).get('gbps', float('nan')):.1f} GB/s, "
             f"{(document.get('environment') or {}).get('date', '?')}"]
    for case_id, entry in sorted(document["benchmarks"].items()):
        samples = entry["samples_s"]
        lines.append(f"  {case_id}: median {statistics.median(samples) * 1e3:.4g} ms, n={len(samples)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.baseline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("key", help="print this machine's device key")
    show = sub.add_parser("show", help="summarize a stored baseline")
    show.add_argument("key", nargs="?")
    update = sub.add_parser("update", help="measure (or read --from) and store the baseline, atomically")
    update.add_argument("--from", dest="source", type=Path, help="a run document written by perf.run --save")
    update.add_argument("--key", help="store under this device key (default: the document's)")
    update.add_argument("--gate-floor-ms", type=float, default=None,
                        help="cases whose median per call is below this are recorded, not gated (perf.regression)")
    update.add_argument("--suite", default="auto", help="suite to run when --from is not given (perf.run)")
    update.add_argument("--rounds", type=int, default=None)
    update.add_argument("--device", choices=("cpu", "gpu"), default=None)
    update.add_argument("--dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command == "key":
        print(device_key())
        return 0
    if args.command == "show":
        document = load_baseline(args.key or device_key())
        print(_show(document) if document else f"no baseline for {args.key or device_key()}")
        return 0
    if args.source is not None:
        try:
            document = json.loads(args.source.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"perf.baseline: cannot read {args.source}: {exc}", file=sys.stderr)
            return 2
    else:
        from perf.run import run_suite

        document = run_suite(args.suite, rounds=args.rounds, device=args.device).document()
    if args.key:
        document["device_key"] = args.key
    if args.gate_floor_ms is not None:
        if not 0 <= args.gate_floor_ms < float("inf"):
            print(f"perf.baseline: --gate-floor-ms must be >= 0, got {args.gate_floor_ms}", file=sys.stderr)
            return 2
        document.setdefault("settings", {})["gate_floor_s"] = args.gate_floor_ms / 1e3
    try:
        path = write_baseline(document, args.dir)
    except (TypeError, ValueError) as exc:
        print(f"perf.baseline: not stored ({exc}); the old baseline is unchanged", file=sys.stderr)
        return 2
    print(f"perf.baseline: wrote {path} ({len(document['benchmarks'])} benchmarks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
