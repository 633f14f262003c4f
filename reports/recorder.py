"""Append-only record of every gate call: ``reports/out/results.jsonl``.

One JSON object per line. Lines are written with a single ``write`` on a file
opened with O_APPEND, so pytest-xdist workers can share the file without
interleaving. The HTML report and ``reports.summary`` read it back.

A record written while Hypothesis runs a test example gets ``example``:
``"final"`` in the execution Hypothesis reports (the minimal falsifying example,
an explicit ``@example``, a ``@reproduce_failure`` replay), else ``"search"``
(generation, shrinking): a falsified property's shrink steps can be told apart.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator

SCHEMA_VERSION = 1
RESULTS_ENV = "MLXGATE_RESULTS"
DEFAULT_RESULTS = Path(__file__).resolve().parent / "out" / "results.jsonl"


def results_path() -> Path:
    return Path(os.environ.get(RESULTS_ENV, DEFAULT_RESULTS))


def _jsonable(value: Any) -> Any:
    """Floats that JSON cannot hold (nan, inf) become strings; tuples become lists."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return repr(float(value))  # "nan", "inf", "-inf" (a NumPy float's repr is "np.float64(nan)")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "tolist") and getattr(value, "ndim", 0):  # an array (NumPy or MLX): its values as a list
        return _jsonable(value.tolist())
    if hasattr(value, "item") and callable(value.item):  # a NumPy scalar or 0-d array
        return _jsonable(value.item())
    return value


def hypothesis_example() -> str | None:
    """``"final"`` or ``"search"`` inside a Hypothesis test example (see above); None outside one."""
    control = sys.modules.get("hypothesis.control")  # not imported: no Hypothesis test is running
    if control is None or not control.currently_in_test_context():
        return None
    return "final" if control.current_build_context().is_final else "search"


def append_record(record: dict[str, Any], path: Path | None = None) -> None:
    path = Path(path) if path is not None else results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    example = hypothesis_example()
    record = record if example is None or "example" in record else {**record, "example": example}
    line = json.dumps({"schema": SCHEMA_VERSION, **_jsonable(record)}, sort_keys=True) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_records(path: Path | None = None) -> Iterator[dict[str, Any]]:
    path = Path(path) if path is not None else results_path()
    if not path.exists():
        return
    with path.open("rb") as handle:
        for number, line in _lines(handle, path):
            if line.strip():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not a JSON record ({exc})") from exc
                from reports.results import check_record  # (results imports this module)

                check_record(record, f"{path}:{number}")
                yield record


def _lines(handle, path: Path):
    """(line number, line) of ``handle`` (a binary file); a byte that is not UTF-8 is an error naming the file and
    line. Each line is decoded by itself: a text-mode file decodes blocks of many lines ahead of the one read, so
    the line it failed on was not the line the bad byte is in."""
    for number, raw in enumerate(handle, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}:{number}: not UTF-8 text ({exc})") from None
        yield number, line


def reset(path: Path | None = None) -> None:
    path = Path(path) if path is not None else results_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
