"""The mutation score of generated mutants, per target, from their records (reports/SCHEMA.md).

Records (the format any generator writes, the kernel bodies' here and a Python mutation tool's):

* one ``mutant`` record per mutant, the runner's fields (``mutants.runner.mutant_record``) plus ``generated``
  (``"body"`` or ``"python"``), ``id`` (stable across unrelated edits), ``operator``, ``file``, ``line``,
  ``target`` (a kernel family for a body; the module's path for Python) and ``run``;
* one ``mutation_run`` record per run (``run_record``), written before its mutants: ``run``, ``generated``,
  ``tool``, ``seed``, ``sample`` (the size asked for, or null for every mutant), ``strata``
  (``{target: {"population", "sampled", "equivalent"}}``), ``device``, ``arms``, ``profile``, ``time``.

Score of a target in a run: killed / (killed + survived), the non-equivalent mutants that ran (equivalents are
never generated; ``error``, ``stale`` and ``left_out`` mutants are counted apart: they neither died nor
survived). When the run was a sample of the target's population (or its run record is missing, so nobody can
tell), the score comes with its 95% Wilson interval: the sample is a simple random sample of the target's
mutants (``sampling``), and Wilson's interval keeps its coverage near 95% at the sizes and the scores near 1
that mutation runs have, where the normal approximation does not.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

__all__ = ["GENERATED", "RUN_KIND", "Z95", "format_table", "interval_text", "run_record", "score_rows", "wilson"]

GENERATED = ("body", "python")
RUN_KIND = "mutation_run"
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
OVERALL = "(all)"  # the target of a run's pooled row


def wilson(killed: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson's score interval for ``killed`` of ``n`` (None when ``n`` is 0)."""
    if not 0 <= killed <= n:
        raise ValueError(f"need 0 <= killed <= n, got {killed} of {n}")
    if n == 0:
        return None
    p, z2 = killed / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (0.0 if killed == 0 else max(0.0, centre - half), 1.0 if killed == n else min(1.0, centre + half))


def run_record(run: str, generated: str, tool: str, strata: Mapping[str, Mapping[str, int]], *, seed: int | None,
               sample: int | None, device: str | None, arms: Iterable[str], profile: str | None) -> dict:
    """The ``mutation_run`` record of one run (module docstring)."""
    if generated not in GENERATED:
        raise ValueError(f"generated must be one of {GENERATED}, got {generated!r}")
    return {"kind": RUN_KIND, "time": time.time(), "run": run, "generated": generated, "tool": tool, "seed": seed,
            "sample": sample, "device": device, "arms": list(arms), "profile": profile,
            "strata": {t: {"population": int(s["population"]), "sampled": int(s["sampled"]),
                           "equivalent": int(s.get("equivalent", 0)),
                           **({"chosen": True} if s.get("chosen") else {})} for t, s in sorted(strata.items())}}


def _row(run, generated, target, records, stratum, tool) -> dict:
    statuses = Counter(r.get("status") for r in records)
    killed, survived = statuses.get("killed", 0), statuses.get("survived", 0)
    ran = killed + survived
    population = stratum.get("population") if stratum else None
    sample_size = stratum.get("sampled") if stratum else None
    sampled = None if stratum is None else sample_size < population
    chosen = bool(stratum and stratum.get("chosen"))  # --ids: a chosen set, not a random sample
    survivors = sorted((r for r in records if r.get("status") == "survived"),
                       key=lambda r: (str(r.get("file")), r.get("line") or 0, str(r.get("id"))))
    return {
        "run": run, "generated": generated, "target": target, "tool": tool,
        "killed": killed, "survived": survived, "ran": ran, "error": statuses.get("error", 0),
        "stale": statuses.get("stale", 0), "left_out": statuses.get("left_out", 0),
        "score": killed / ran if ran else None,
        "interval": list(wilson(killed, ran)) if ran and sampled is not False and not chosen else None,
        "sampled": sampled, "chosen": chosen, "sample": sample_size, "population": population,
        "equivalent": stratum.get("equivalent") if stratum else None,
        "survivors": [{k: r.get(k) for k in ("name", "id", "operator", "file", "line", "idea", "diff")}
                      for r in survivors],
    }


def score_rows(records: Iterable[dict]) -> list[dict]:
    """One row per (run, generated, target) of the generated ``mutant`` records, then a pooled row per run of
    several targets (target ``"(all)"``); each record counts once per run (the last one of an id)."""
    records = list(records)
    runs = {r.get("run"): r for r in records if r.get("kind") == RUN_KIND}
    latest: dict[tuple, dict] = {}
    for r in records:
        if r.get("kind") == "mutant" and r.get("generated") in GENERATED:
            latest[(r.get("run"), r.get("id") or r.get("name"))] = r
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for (run, _), r in latest.items():
        groups[(run, r["generated"], str(r.get("target")))].append(r)
    rows = []
    for run in sorted({key[0] for key in groups}, key=str):
        info = runs.get(run) or {}
        strata = info.get("strata") if isinstance(info.get("strata"), dict) else None
        keys = sorted(k for k in groups if k[0] == run)
        for _, generated, target in keys:
            stratum = strata.get(target) if strata is not None else None  # None: the population is not known
            rows.append(_row(run, generated, target, groups[(run, generated, target)], stratum, info.get("tool")))
        if len(keys) > 1:
            for generated in sorted({k[1] for k in keys}):
                every = [r for k in keys if k[1] == generated for r in groups[k]]
                pooled = None
                if strata is not None:
                    pooled = {f: sum(int(s.get(f, 0)) for s in strata.values()) for f in
                              ("population", "sampled", "equivalent")}
                    pooled["chosen"] = any(s.get("chosen") for s in strata.values())
                row = _row(run, generated, OVERALL, every, pooled, info.get("tool"))
                row["survivors"] = []  # listed under their targets
                rows.append(row)
    return rows


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def interval_text(row: Mapping, *, between: str = " .. ", none: str = "-") -> str:
    """A score row's interval in words: ``low<between>high``, or why there is none (every mutant ran: exact; a
    chosen set; else ``none``). The score table and the HTML report both print it (the report with an en dash)."""
    interval = row.get("interval")
    if interval:
        return f"{_percent(interval[0])}{between}{_percent(interval[1])}"
    if row.get("chosen"):
        return "chosen ids: no interval"
    return "exact: every mutant ran" if row.get("sampled") is False else none


def format_table(rows: Iterable[Mapping]) -> str:
    """The score table, one line per row: target, killed / non-equivalent that ran, score, 95% interval, sample."""
    lines = [f"{'target':28} {'killed/ran':>11} {'score':>7}  {'95% interval':24} {'sample/population':>18}  apart"]
    for row in rows:
        sample = (f"{row['sample']}/{row['population']}" if row.get("population") is not None else "?")
        apart = ", ".join(f"{row[k]} {k.replace('_', ' ')}" for k in ("error", "stale", "left_out") if row.get(k))
        lines.append(f"{str(row['target']):28} {row['killed']:>5}/{row['ran']:<5} {_percent(row['score']):>7}  "
                     f"{interval_text(row):24} {sample:>18}  {apart}")
    return "\n".join(lines)
