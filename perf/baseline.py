"""Baselines: per device, the raw timing samples of every benchmark, committed in perf/baselines/.

    python -m perf.baseline key                      # this machine's device key
    python -m perf.baseline show [KEY]               # what a baseline holds
    python -m perf.baseline update [--suite S] [--rounds R] [--key KEY]   # run the suite, store it
    python -m perf.baseline update --from RUN.json [--key KEY] [--gate-floor-ms F]  # store a recorded run
    python -m perf.baseline update --from A.json --from B.json --from C.json [--gate-floor-ms F]  # pool runs
    ... [--figure call|kernel] [--kernel-gate-floor-ms F]   # which figure the gate judges; the kernel figure's floor
    ... [--dir DIR]                                  # store under DIR instead of perf/baselines/

The device key is ``<backend>-<device name>`` of MLX's default device, with
every run of characters other than letters, digits, ``.`` and ``-`` made one
``_``: ``cuda-NVIDIA_H200``, ``metal-Apple_M4_Pro``, ``cpu-AMD_EPYC``
(``mx.device_info(mx.default_device())["device_name"]``; backend ``cpu`` on
the CPU device, else ``metal`` / ``cuda``). The file is
``perf/baselines/<key>.json``::

    {"schema": 1, "device_key": ..., "device": {device_info}, "environment": {mlx, platform, git, date},
     "copy_bandwidth": {gbps, nbytes, median_s, samples_s, method},
     "settings": {suite, rounds, warmup, batch, protocol (absent: "eval"), inputs (absent: "shared"),
                  gate_floor_s (optional), kernel_calls, kernel_warmup (where kernel time was measured),
                  figure (optional, absent: "call"), kernel_gate_floor_s (optional)},
     "benchmarks": {case id: {benchmark, kernel, arm, shape, dtype, bytes, flops, median_s, iqr_s, samples_s,
                              process_samples_s (pooled only),
                              kernel_samples_s, kernel_median_s, kernel_iqr_s, kernels_per_call, kernel_names,
                              kernel_timer, kernel_span_median_s (where kernel time was measured),
                              kernel_process_samples_s (pooled only), figure (optional)}},
     "processes": [{source, environment, copy_bandwidth}, ...] (pooled only)}

Two figures per case (``FIGURES``): ``call``, the call-time samples of ``perf.harness`` (``samples_s``), and
``kernel``, the kernel-time samples of ``perf.kernel_time`` (``kernel_samples_s``: one per traced call, the
device time of its kernels), kept per process the same way. The regression gate judges one of them per case:
the entry's ``figure``, else ``settings.figure``, else ``call`` (``figure_of``; ``perf.run --figure``
overrides both). A document without kernel fields (the H200 baseline measured before kernel time was
recorded) holds the call figure only and judges as before. An entry or settings that choose ``kernel`` must
hold kernel samples (validated). Each figure has its own floor (``gate_floor``): ``settings.gate_floor_s`` for
call time, ``settings.kernel_gate_floor_s`` for kernel time (``perf/regression.py``).

A run of ``python -m perf.run --save RUN.json`` writes exactly this document
(for the machine it ran on), so a baseline can be measured on one machine and
stored from another (``update --from``, as the H200 one was).

Pooled baselines. The regression gate must know how far a case's median moves
between processes, which one process cannot show (``perf/regression.py``). So
``update`` with several ``--from`` run documents, each measured by a separate
process (or an earlier pooled baseline, whose processes it keeps), stores per
case ``process_samples_s``: one list of samples per process, in ``--from``
order, kept apart; ``samples_s`` is their concatenation (readers that want
every sample keep working), ``median_s`` the median of the process medians
(the gate's reference), ``iqr_s`` of all samples. ``processes`` records where
each process came from (the file), its environment and its copy bandwidth; the
top-level ``copy_bandwidth`` is that of the median process by GB/s (of an even count, the lower middle one), the
``environment`` the first one's; torch ``references`` and ``skipped`` stay in
the run documents (nothing gates them). The sources must agree, else nothing is
stored and the error names the disagreement: the same device key, settings
(suite, rounds, warm-up, batch, protocol, inputs, floors, kernel calls and warm-up, figure), MLX version
and git commit (where both recorded one), the same cases with the same description (benchmark, kernel,
arm, shape, dtype, bytes, flops) and the same kernels per call (names, counts, timer, figure, where recorded),
kernel samples in every source of a case or in none, and no process twice (identical samples).
An entry without ``process_samples_s`` (a single run's document) is one
process (``baseline_processes``), judged by the single-process rule.

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
import numpy as np

__all__ = ["BASELINE_DIR", "FIGURES", "PARTIAL_KERNEL_TIME", "SCHEMA", "baseline_path", "baseline_processes", "device_key",
           "figure_of", "gate_floor", "has_figure", "lacking_kernel_time", "load_baseline", "pool_documents",
           "read_document", "validate_baseline", "write_baseline"]

SCHEMA = 1
FIGURES = ("call", "kernel")  # what the gate can judge (module docstring)
# Per figure: the entry's samples, its per-process samples (pooled baselines), the settings' floor.
_FIELDS = {"call": ("samples_s", "process_samples_s", "gate_floor_s"),
           "kernel": ("kernel_samples_s", "kernel_process_samples_s", "kernel_gate_floor_s")}
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
    if not _KEY.fullmatch(key) or key.startswith("."):  # fullmatch: "$" would let a trailing newline through
        raise ValueError(f"key must be letters, digits, '.', '-' and '_' (a device key), got {key!r}")
    return key


def baseline_path(key: str, directory: Path | None = None) -> Path:
    """Where ``key``'s baseline lives: ``directory`` (a path; None for ``BASELINE_DIR``)."""
    if directory is None:
        return BASELINE_DIR / f"{_check_key(key)}.json"
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a path or None, got {type(directory).__name__}")
    if not str(directory):  # "" is no folder (read as falsy, it was the committed baselines' folder)
        raise ValueError("directory must be a non-empty path or None, got ''")
    return Path(directory) / f"{_check_key(key)}.json"


def _positive_list(where: str, values) -> None:
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where} must be a non-empty list of seconds")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not _positive_finite(v):
            raise ValueError(f"{where} must hold positive finite seconds, got {v!r}")


def _positive_finite(value) -> bool:
    """A positive number that is finite as a float (a 400-digit int would overflow the gate's arithmetic)."""
    try:
        return 0 < float(value) < float("inf")
    except OverflowError:
        return False


# What a document's settings may hold (absent: the default each reader applies, see _SETTING_DEFAULTS).
_SETTING_CHOICES = {"protocol": ("eval", "pipelined"), "inputs": ("distinct", "shared"), "figure": FIGURES}


def _check_settings(settings) -> None:
    if settings is None:
        return
    if not isinstance(settings, dict):
        raise ValueError(f"baseline 'settings' must be null or an object, got {type(settings).__name__}")
    for name, choices in _SETTING_CHOICES.items():
        if settings.get(name) is not None and settings[name] not in choices:
            raise ValueError(f"settings.{name} must be one of {choices}, got {settings[name]!r}")
    for name in ("rounds", "warmup", "batch", "kernel_calls", "kernel_warmup"):
        value = settings.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"settings.{name} must be a non-negative int, got {value!r}")
    for name in ("gate_floor_s", "kernel_gate_floor_s"):
        floor = settings.get(name)
        if floor is not None and (isinstance(floor, bool) or not isinstance(floor, (int, float))
                                  or not 0 <= floor < float("inf")):
            raise ValueError(f"settings.{name} must be a non-negative finite number of seconds, got {floor!r}")


def _check_figure(name: str, figure) -> str:
    if figure not in FIGURES:
        raise ValueError(f"{name} must be one of {FIGURES}, got {figure!r}")
    return figure


def _check_processes(case_id: str, entry: dict, processes, figure: str = "call") -> None:
    samples_field, process_field, _ = _FIELDS[figure]
    per_process = entry[process_field]
    where = f"benchmarks[{case_id!r}].{process_field}"
    if not isinstance(per_process, list) or not per_process:
        raise ValueError(f"{where} must be a non-empty list of per-process sample lists")
    for i, samples in enumerate(per_process):
        _positive_list(f"{where}[{i}]", samples)
    if [s for samples in per_process for s in samples] != list(entry[samples_field]):
        raise ValueError(f"benchmarks[{case_id!r}].{samples_field} must be the concatenation of its {process_field}")
    if processes is not None and (not isinstance(processes, list) or len(processes) != len(per_process)):
        raise ValueError(f"{where} holds {len(per_process)} processes, the document's 'processes' "
                         f"{len(processes) if isinstance(processes, list) else processes!r}")


def _check_kernel_fields(case_id: str, entry: dict, document: dict) -> None:
    where = f"benchmarks[{case_id!r}]"
    has_kernel = "kernel_samples_s" in entry
    if has_kernel:
        _positive_list(f"{where}.kernel_samples_s", entry["kernel_samples_s"])
        if "kernel_process_samples_s" in entry:
            _check_processes(case_id, entry, document.get("processes"), "kernel")
            if "process_samples_s" in entry and (len(entry["kernel_process_samples_s"])
                                                 != len(entry["process_samples_s"])):
                raise ValueError(f"{where}.kernel_process_samples_s holds {len(entry['kernel_process_samples_s'])} "
                                 f"processes, its process_samples_s {len(entry['process_samples_s'])}")
        per_call = entry.get("kernels_per_call")
        if per_call is not None and (isinstance(per_call, bool) or not isinstance(per_call, int) or per_call < 1):
            raise ValueError(f"{where}.kernels_per_call must be a positive int, got {per_call!r}")
    elif "kernel_process_samples_s" in entry:
        raise ValueError(f"{where} holds kernel_process_samples_s without kernel_samples_s")
    if "figure" in entry:
        _check_figure(f"{where}.figure", entry["figure"])
    chosen = entry.get("figure") or (document.get("settings") or {}).get("figure") or "call"
    if chosen == "kernel" and not has_kernel:
        source = f"{where}.figure" if "figure" in entry else "settings.figure"
        raise ValueError(f"{where}: {source} is 'kernel' but the entry holds no kernel_samples_s")


def has_figure(entry: dict, figure: str) -> bool:
    """Whether a baseline entry holds samples of ``figure`` (``FIGURES``)."""
    _check_figure("figure", figure)
    return isinstance(entry, dict) and _FIELDS[figure][0] in entry


def baseline_processes(entry: dict, figure: str = "call") -> list[list[float]]:
    """The samples of one baseline entry for ``figure`` (``FIGURES``), one list per process:
    ``process_samples_s`` (``kernel_process_samples_s``) of a pooled baseline, else ``[samples_s]``
    (``[kernel_samples_s]``: a baseline measured in one process). ValueError when the entry holds no
    samples of that figure."""
    if not isinstance(entry, dict) or "samples_s" not in entry:
        raise TypeError(f"entry must be a baseline entry (a dict with 'samples_s'), got {type(entry).__name__}")
    samples_field, process_field, _ = _FIELDS[_check_figure("figure", figure)]
    if samples_field not in entry:
        raise ValueError(f"the baseline entry holds no {figure}-time samples ({samples_field})")
    return [list(p) for p in entry.get(process_field) or [entry[samples_field]]]


def figure_of(document: dict | None, case_id: str, override: str | None = None) -> str:
    """The figure the gate judges for ``case_id``: ``override`` (``perf.run --figure``), else the entry's
    ``figure``, else ``settings.figure``, else ``call``."""
    if override is not None:
        return _check_figure("override", override)
    entry = ((document or {}).get("benchmarks") or {}).get(case_id) or {}
    return entry.get("figure") or ((document or {}).get("settings") or {}).get("figure") or "call"


def gate_floor(document: dict | None, figure: str = "call") -> float:
    """The floor of ``figure`` in a baseline's settings (``gate_floor_s`` / ``kernel_gate_floor_s``), 0 absent."""
    return float(((document or {}).get("settings") or {}).get(_FIELDS[_check_figure("figure", figure)][2]) or 0.0)


def validate_baseline(document) -> dict:
    """``document`` if it is a well-formed baseline, else ValueError / TypeError naming the field."""
    if not isinstance(document, dict):
        raise TypeError(f"a baseline must be a JSON object, got {type(document).__name__}")
    if document.get("schema") != SCHEMA:
        raise ValueError(f"baseline schema must be {SCHEMA}, got {document.get('schema')!r}")
    _check_key(document.get("device_key"))
    _check_settings(document.get("settings"))  # before the entries: a kernel figure there is checked against them
    benchmarks = document.get("benchmarks")
    if not isinstance(benchmarks, dict) or not benchmarks:
        raise ValueError("baseline 'benchmarks' must be a non-empty object of case id -> entry")
    for case_id, entry in benchmarks.items():
        _check_entry("benchmarks", case_id, entry)
        if "process_samples_s" in entry:
            _check_processes(case_id, entry, document.get("processes"))
        _check_kernel_fields(case_id, entry, document)
    references = document.get("references")  # a run document's torch references: perf.report reads them as entries
    if references is not None:
        if not isinstance(references, dict):
            raise ValueError(f"baseline 'references' must be null or an object of case id -> entry, got "
                             f"{type(references).__name__}")
        for case_id, entry in references.items():
            _check_entry("references", case_id, entry)
    _check_copy_bandwidth("copy_bandwidth", document.get("copy_bandwidth"))
    _check_environment("environment", document.get("environment"))
    processes = document.get("processes")
    if processes is not None:  # a pooled baseline's sources, each read back when it is pooled again
        if not isinstance(processes, list):
            raise ValueError(f"baseline 'processes' must be null or a list of objects, got {type(processes).__name__}")
        for i, process in enumerate(processes):
            if not isinstance(process, dict):
                raise ValueError(f"processes[{i}] must be an object, got {type(process).__name__}")
            _check_environment(f"processes[{i}].environment", process.get("environment"))
            _check_copy_bandwidth(f"processes[{i}].copy_bandwidth", process.get("copy_bandwidth"))
    return document


# An entry's description and figures as its readers use them (perf.report divides bytes by a median, joins the shape;
# a NaN median would be written as a bare NaN, which is not JSON): the type each must have, null allowed where a
# reader skips it.
_TEXT_FIELDS = ("benchmark", "kernel", "arm", "dtype")
_COUNT_FIELDS = ("bytes", "flops")
_SECONDS_FIELDS = ("median_s", "iqr_s", "kernel_median_s", "kernel_iqr_s", "kernel_span_median_s")


def _check_entry(section: str, case_id, entry) -> None:
    """A ``benchmarks`` or ``references`` entry: its description fields there and of their types, its samples."""
    if not isinstance(case_id, str) or not case_id:  # JSON keys are strings: another key would not load back
        raise ValueError(f"{section} keys must be non-empty case-id strings, got {case_id!r}")
    where = f"{section}[{case_id!r}]"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be an object")
    for name in ("benchmark", "kernel", "arm", "shape", "dtype", "bytes", "flops", "samples_s"):
        if name not in entry:
            raise ValueError(f"{where} lacks {name!r}")
    for name in _TEXT_FIELDS:
        if not isinstance(entry[name], str):
            raise ValueError(f"{where}.{name} must be a string, got {entry[name]!r}")
    shape = entry["shape"]
    if not isinstance(shape, (list, tuple)) or any(isinstance(d, bool) or not isinstance(d, int) or d < 0
                                                   for d in shape):
        raise ValueError(f"{where}.shape must be a list of non-negative ints, got {shape!r}")
    for name in _COUNT_FIELDS:
        value = entry[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _non_negative_finite(value):
            raise ValueError(f"{where}.{name} must be a non-negative finite number, got {value!r}")
    for name in _SECONDS_FIELDS:
        value = entry.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not _non_negative_finite(value)):
            raise ValueError(f"{where}.{name} must be null or a non-negative finite number of seconds, got {value!r}")
    names = entry.get("kernel_names")
    if names is not None and not (isinstance(names, list) and all(
            isinstance(pair, (list, tuple)) and len(pair) == 2 and isinstance(pair[0], str)
            and not isinstance(pair[1], bool) and isinstance(pair[1], int) for pair in names)):
        raise ValueError(f"{where}.kernel_names must be null or a list of [name, count] pairs, got {names!r}")
    if entry.get("kernel_timer") is not None and not isinstance(entry["kernel_timer"], str):
        raise ValueError(f"{where}.kernel_timer must be null or a string, got {entry['kernel_timer']!r}")
    _positive_list(f"{where}.samples_s", entry["samples_s"])
    if entry.get("kernel_samples_s") is not None:  # (a reference's too: perf.report takes their median)
        _positive_list(f"{where}.kernel_samples_s", entry["kernel_samples_s"])


def _non_negative_finite(value) -> bool:
    try:
        return 0 <= float(value) < float("inf")
    except OverflowError:
        return False


def _check_copy_bandwidth(where: str, copy) -> None:
    if copy is not None:
        gbps = copy.get("gbps") if isinstance(copy, dict) else None
        if isinstance(gbps, bool) or not isinstance(gbps, (int, float)) or not _positive_finite(gbps):
            raise ValueError(f"baseline '{where}' must be null or an object with a positive, finite 'gbps'")


def _check_environment(where: str, environment) -> None:
    """An environment (what pooling compares: its mlx version, its git object) is null or an object."""
    if environment is None:
        return
    if not isinstance(environment, dict):
        raise ValueError(f"baseline '{where}' must be null or an object, got {type(environment).__name__}")
    git = environment.get("git")
    if git is not None and not isinstance(git, dict):
        raise ValueError(f"baseline '{where}.git' must be null or an object, got {type(git).__name__}")


def _unique_keys(pairs: list) -> dict:
    """``json`` object hook: a key given twice (two entries of one case id) is an error, not the last one wins."""
    keys = [key for key, _ in pairs]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise ValueError(f"repeated keys in one object: {repeated[:5]}")
    return dict(pairs)


def read_document(path: Path) -> dict:
    """The JSON document at ``path`` (a repeated key is refused); ValueError naming the file otherwise."""
    try:
        return json.loads(Path(path).read_text(), object_pairs_hook=_unique_keys)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None
    except ValueError as exc:  # json.JSONDecodeError is a ValueError
        raise ValueError(f"{path}: not valid JSON ({exc})") from None


def load_baseline(key: str, directory: Path | None = None) -> dict | None:
    """The stored baseline of device ``key``, or None when there is none."""
    path = baseline_path(key, directory)
    if not path.exists():
        return None
    document = read_document(path)
    validate_baseline(document)
    if document["device_key"] != key:
        raise ValueError(f"{path} holds device_key {document['device_key']!r}, not {key!r}")
    return document


_DESCRIPTION = ("benchmark", "kernel", "arm", "shape", "dtype", "bytes", "flops")
_SETTINGS = ("suite", "rounds", "warmup", "batch", "protocol", "inputs", "gate_floor_s", "kernel_calls",
             "kernel_warmup", "figure", "kernel_gate_floor_s")
# Kernel-time fields of an entry that every source must agree on (the samples are pooled per process).
_KERNEL_DESCRIPTION = ("kernels_per_call", "kernel_names", "kernel_timer", "figure")
# A document without these settings was measured with their defaults (perf.run's docstring): pooling compares the
# effective values, so a run without them is not pooled with a pipelined or distinct-input one.
_SETTING_DEFAULTS = {"protocol": "eval", "inputs": "shared"}


def _first_difference(values: dict[str, object]) -> tuple[str, object, str, object] | None:
    """(source, value, other source, other value) of the first two sources that disagree, ignoring None."""
    known = [(source, value) for source, value in values.items() if value is not None]
    for source, value in known[1:]:
        if value != known[0][1]:
            return known[0][0], known[0][1], source, value
    return None


def pool_documents(documents, sources=None, *, partial_kernel_time: str = "refuse") -> dict:
    """One baseline from ``documents`` (run documents of ``perf.run --save``, or baselines), each a separate
    process (or, for a pooled baseline, several), their samples kept apart per process (module docstring).
    ``sources``: a name per document for the messages (default ``documents[i]``). ValueError / TypeError
    naming the disagreement when they cannot be pooled. ``partial_kernel_time``: a case whose kernel time some
    documents hold and others lack is refused (``"refuse"``), or pooled without kernel time (``"leave_out"``:
    never a subset's figure; ``lacking_kernel_time`` names such cases), unless its gate judges kernel time."""
    if partial_kernel_time not in PARTIAL_KERNEL_TIME:
        raise ValueError(f"partial_kernel_time must be one of {PARTIAL_KERNEL_TIME}, got {partial_kernel_time!r}")
    if isinstance(documents, dict) or not isinstance(documents, (list, tuple)) or not documents:
        raise TypeError(f"documents must be a non-empty list of baseline documents, got {type(documents).__name__}")
    if isinstance(sources, (str, bytes)):  # a string would name each document by one of its characters
        raise TypeError(f"sources must be a sequence of names (one per document), got {type(sources).__name__}")
    sources = [f"documents[{i}]" for i in range(len(documents))] if sources is None else [str(s) for s in sources]
    if len(sources) != len(documents):
        raise ValueError(f"sources must name every document: {len(sources)} names for {len(documents)} documents")
    for source, document in zip(sources, documents):
        try:
            validate_baseline(document)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{source}: {exc}") from exc

    def agree(what: str, values: dict[str, object]) -> None:
        difference = _first_difference(values)
        if difference is not None:
            a, va, b, vb = difference
            raise ValueError(f"cannot pool: {what} differs: {a} has {va!r}, {b} has {vb!r}")

    agree("device_key", {s: d["device_key"] for s, d in zip(sources, documents)})
    settings = {}
    for name in _SETTINGS:
        values = {s: (d.get("settings") or {}).get(name) for s, d in zip(sources, documents)}
        agree(f"settings.{name}", {s: _SETTING_DEFAULTS.get(name) if v is None else v for s, v in values.items()})
        known = [v for v in values.values() if v is not None]  # stored as the documents give it
        if known:
            settings[name] = known[0]
    agree("the MLX version (environment.mlx)", {s: (d.get("environment") or {}).get("mlx")
                                                 for s, d in zip(sources, documents)})
    agree("the git commit (environment.git.commit)",
          {s: ((d.get("environment") or {}).get("git") or {}).get("commit") for s, d in zip(sources, documents)})
    cases = set(documents[0]["benchmarks"])
    for source, document in zip(sources[1:], documents[1:]):
        if set(document["benchmarks"]) != cases:
            missing, extra = sorted(cases - set(document["benchmarks"])), sorted(set(document["benchmarks"]) - cases)
            raise ValueError(f"cannot pool: {source} does not hold the cases of {sources[0]} (an interrupted run?): "
                             f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
                             f"extra {extra[:5]}{' ...' if len(extra) > 5 else ''}")

    processes = []
    for source, document in zip(sources, documents):
        if document.get("processes"):
            processes += [{**p, "source": p.get("source") or source} for p in document["processes"]]
        else:
            processes.append({"source": source, "environment": document.get("environment"),
                              "copy_bandwidth": document.get("copy_bandwidth")})
    benchmarks = {}
    for case_id in sorted(cases):
        entries = [d["benchmarks"][case_id] for d in documents]
        for name in _DESCRIPTION:
            agree(f"{case_id} {name}", {s: e[name] for s, e in zip(sources, entries)})
        per_process = [p for e in entries for p in baseline_processes(e)]
        if len(per_process) != len(processes):
            raise ValueError(f"cannot pool: {case_id} holds {len(per_process)} processes, the documents "
                             f"{len(processes)}")
        seen = {}
        for i, samples in enumerate(per_process):
            first = seen.setdefault(tuple(samples), i)
            if first != i:
                raise ValueError(f"cannot pool: {case_id}: processes {first + 1} ({processes[first]['source']}) and "
                                 f"{i + 1} ({processes[i]['source']}) hold identical samples: the same run twice")
        pooled = [t for samples in per_process for t in samples]
        q1, q3 = np.percentile(pooled, [25, 75])
        benchmarks[case_id] = {**{name: entries[0][name] for name in _DESCRIPTION},
                               "median_s": float(np.median([np.median(p) for p in per_process])),
                               "iqr_s": float(q3 - q1), "samples_s": pooled, "process_samples_s": per_process}
        benchmarks[case_id].update(_pool_kernel(case_id, dict(zip(sources, entries)), len(processes), agree,
                                                partial_kernel_time))
    copies = sorted((p["copy_bandwidth"] for p in processes if p.get("copy_bandwidth")), key=lambda c: c["gbps"])
    document = {"schema": SCHEMA, "device_key": documents[0]["device_key"], "device": documents[0].get("device"),
                "environment": documents[0].get("environment"),
                "copy_bandwidth": copies[(len(copies) - 1) // 2] if copies else None,
                "settings": settings, "benchmarks": benchmarks, "processes": processes}
    return validate_baseline(document)


PARTIAL_KERNEL_TIME = ("refuse", "leave_out")


def lacking_kernel_time(documents) -> list[str]:
    """The cases whose kernel time some of ``documents`` hold and others lack (what ``"leave_out"`` pools
    without kernel time), in the first document's order."""
    cases = [dict(d.get("benchmarks") or {}) for d in documents]
    shared = [c for c in cases[0] if all(c in other for other in cases[1:])] if cases else []
    return [c for c in shared if len({has_figure(other[c], "kernel") for other in cases}) == 2]


def _comparable(name: str, value):
    """``value`` of kernel field ``name`` as pooling compares it: ``kernel_names`` as a multiset (sorted), since a
    call of several streams starts the same kernels in another order from one process to the next (MLX's gather +
    dequantize + SDPA control on the H200: ``copy_g_nd`` before or after ``set_mm_device_pointers_nd``), the same
    work that ``perf.kernel_time`` already accepts between the calls of one process."""
    if name == "kernel_names" and isinstance(value, list):
        return sorted((str(n), int(c)) for n, c in value)
    return value


def _pool_kernel(case_id: str, entries: dict[str, dict], n_processes: int, agree,
                 partial_kernel_time: str = "refuse") -> dict:
    """The pooled kernel-time fields of one case from its entry in each source (``entries``: source -> entry):
    none when no source measured kernel time, else every source must have (or, with ``"leave_out"``, none
    when some lack it and the case's gate judges call time)."""
    for name in _KERNEL_DESCRIPTION:
        agree(f"{case_id} {name}", {s: _comparable(name, e.get(name)) for s, e in entries.items()})
    known = {name: next((e[name] for e in entries.values() if e.get(name) is not None), None)
             for name in _KERNEL_DESCRIPTION}
    measured = [s for s, e in entries.items() if has_figure(e, "kernel")]
    if not measured:
        return {"figure": known["figure"]} if known["figure"] is not None else {}
    if len(measured) != len(entries):
        lacking = [s for s in entries if s not in measured]
        if partial_kernel_time == "leave_out" and known["figure"] != "kernel":
            return {"figure": known["figure"]} if known["figure"] is not None else {}
        raise ValueError(f"cannot pool: {case_id} holds kernel-time samples in {measured[0]} but not in "
                         f"{lacking[0]} (measure kernel time in every process, or in none)")
    per_process = [p for e in entries.values() for p in baseline_processes(e, "kernel")]
    if len(per_process) != n_processes:
        raise ValueError(f"cannot pool: {case_id} holds kernel samples of {len(per_process)} processes, the "
                         f"documents {n_processes}")
    pooled = [t for samples in per_process for t in samples]
    q1, q3 = np.percentile(pooled, [25, 75])
    spans = [e.get("kernel_span_median_s") for e in entries.values()]
    return {**{name: value for name, value in known.items() if value is not None},
            "kernel_median_s": float(np.median([np.median(p) for p in per_process])), "kernel_iqr_s": float(q3 - q1),
            "kernel_samples_s": pooled, "kernel_process_samples_s": per_process,
            "kernel_span_median_s": float(np.median(spans)) if all(s is not None for s in spans) else None}


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
    try:  # allow_nan=False: a NaN in a field nothing checks would be written as a bare NaN, which is not JSON
        text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
    except ValueError as exc:
        raise ValueError(f"the document holds a number JSON cannot (NaN or infinity): {exc}") from None
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
    processes = document.get("processes") or [None]
    lines = [f"{document['device_key']}: {len(document['benchmarks'])} benchmarks, "
             f"{len(processes)} process{'es' if len(processes) > 1 else ''}, "
             f"copy {(document.get('copy_bandwidth') or {}).get('gbps', float('nan')):.1f} GB/s, "
             f"{(document.get('environment') or {}).get('date', '?')}"]
    for case_id, entry in sorted(document["benchmarks"].items()):
        medians = [statistics.median(p) for p in baseline_processes(entry)]
        spread = f", process spread {max(medians) / min(medians) - 1:.1%}" if len(medians) > 1 else ""
        kernel = ""
        if has_figure(entry, "kernel"):
            kernel_medians = [statistics.median(p) for p in baseline_processes(entry, "kernel")]
            kernel = (f"; kernel {statistics.median(kernel_medians) * 1e3:.4g} ms, "
                      f"n={len(entry['kernel_samples_s'])}")
        lines.append(f"  {case_id}: median {statistics.median(medians) * 1e3:.4g} ms, "
                     f"n={len(entry['samples_s'])}{spread}{kernel}; gate judges {figure_of(document, case_id)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.baseline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("key", help="print this machine's device key")
    show = sub.add_parser("show", help="summarize a stored baseline")
    show.add_argument("key", nargs="?")
    show.add_argument("--dir", type=Path, default=None, help="the baselines' folder (default perf/baselines)")
    update = sub.add_parser("update", help="measure (or read --from) and store the baseline, atomically")
    update.add_argument("--from", dest="sources", type=Path, action="append", default=[],
                        help="a run document written by perf.run --save; given several times (each a separate "
                             "process), the runs are pooled, each process's samples kept apart")
    update.add_argument("--partial-kernel-time", choices=("refuse", "leave-out"), default="refuse",
                        help="a case whose kernel time some --from documents lack: refuse to pool (default), or "
                             "pool it without kernel time, naming it (not for a case whose gate judges kernel time)")
    update.add_argument("--key", help="store under this device key (default: the document's)")
    update.add_argument("--gate-floor-ms", type=float, default=None,
                        help="cases whose median per call is below this are recorded, not gated (perf.regression)")
    update.add_argument("--kernel-gate-floor-ms", type=float, default=None,
                        help="the same floor for the kernel figure (perf.regression)")
    update.add_argument("--figure", choices=FIGURES, default=None,
                        help="the figure the gate judges for every case without its own (settings.figure)")
    update.add_argument("--suite", default="auto", help="suite to run when --from is not given (perf.run)")
    update.add_argument("--rounds", type=int, default=None)
    update.add_argument("--device", choices=("cpu", "gpu"), default=None)
    update.add_argument("--dir", type=Path, default=None,
                        help="store in this folder instead of perf/baselines (e.g. a trial baseline)")
    args = parser.parse_args(argv)
    if args.command == "key":
        print(device_key())
        return 0
    if args.command == "show":
        try:
            document = load_baseline(args.key or device_key(), args.dir)
        except (OSError, TypeError, ValueError) as exc:
            print(f"perf.baseline: {exc}", file=sys.stderr)
            return 2
        print(_show(document) if document else f"no baseline for {args.key or device_key()}")
        return 0
    for flag, value in (("--gate-floor-ms", args.gate_floor_ms), ("--kernel-gate-floor-ms", args.kernel_gate_floor_ms)):
        if value is not None and not 0 <= value < float("inf"):
            print(f"perf.baseline: {flag} must be >= 0, got {value}", file=sys.stderr)
            return 2
    from perf.run import SUITES  # (perf.run imports this module)

    # Checked before the suite runs: a bad value found after it ran would cost the whole run, then a traceback.
    if args.suite not in SUITES:
        parser.error(f"--suite must be one of {', '.join(SUITES)}, got {args.suite!r}")
    if args.rounds is not None and args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.sources:
        documents = []
        for source in args.sources:
            try:
                documents.append(read_document(source))
            except ValueError as exc:
                print(f"perf.baseline: {exc}; the old baseline is unchanged", file=sys.stderr)
                return 2
        if len(documents) == 1:
            document = documents[0]
        else:
            try:
                document = pool_documents(documents, [str(s) for s in args.sources],
                                          partial_kernel_time=args.partial_kernel_time.replace("-", "_"))
            except (TypeError, ValueError) as exc:
                print(f"perf.baseline: not stored ({exc}); the old baseline is unchanged", file=sys.stderr)
                return 2
            if args.partial_kernel_time == "leave-out":
                for case_id in lacking_kernel_time(documents):
                    print(f"perf.baseline: {case_id}: kernel time left out (some processes lack it)")
    else:
        from perf.run import run_suite

        try:
            document = run_suite(args.suite, rounds=args.rounds, device=args.device).document()
        except (TypeError, ValueError) as exc:
            print(f"perf.baseline: not stored ({exc}); the old baseline is unchanged", file=sys.stderr)
            return 2
    if not isinstance(document, dict):
        print(f"perf.baseline: not stored ({args.sources[0]} is not a JSON object); the old baseline is unchanged",
              file=sys.stderr)
        return 2
    if args.key:
        document["device_key"] = args.key
    chosen = {"gate_floor_s": None if args.gate_floor_ms is None else args.gate_floor_ms / 1e3,
              "kernel_gate_floor_s": None if args.kernel_gate_floor_ms is None else args.kernel_gate_floor_ms / 1e3,
              "figure": args.figure}
    if any(value is not None for value in chosen.values()):
        if document.get("settings") is None:
            document["settings"] = {}
        if not isinstance(document["settings"], dict):
            print(f"perf.baseline: not stored (the document's 'settings' is a {type(document['settings']).__name__}, "
                  "not an object); the old baseline is unchanged", file=sys.stderr)
            return 2
        document["settings"].update({name: value for name, value in chosen.items() if value is not None})
    try:
        path = write_baseline(document, args.dir)
    except (OSError, TypeError, ValueError) as exc:
        print(f"perf.baseline: not stored ({exc}); the old baseline is unchanged", file=sys.stderr)
        return 2
    pooled = len(document.get("processes") or [None])
    print(f"perf.baseline: wrote {path} ({len(document['benchmarks'])} benchmarks"
          f"{f', {pooled} processes pooled' if pooled > 1 else ''})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
