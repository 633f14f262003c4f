"""Markdown tables of a run document (``perf.run --save``): the numbers of perf/RESULTS.md.

    python -m perf.report RUN.json

Per benchmark and shape, every kernel: median ms per call, GB/s (the problem's
compulsory bytes / median), % of the copy bandwidth measured in the same run,
and the time ratio to MLX's SDPA and to torch's SDPA (default dispatch) on the
same shape (``x 2.0`` = twice their time; ``-`` = not measured on that shape).
The MLX reference is ``sdpa[mlx]`` on contiguous bf16 K/V of the same heads, head
dim and length (for ``multi_query``: ``sdpa_causal[mlx]`` with the same L rows;
for ``normalized_argmax``: ``logsumexp_sub_argmax[mlx]``). Where the document holds kernel time
(``perf.kernel_time``: ``kernel_samples_s``), two columns beside the call figure: the median kernel time per
call and its GB/s (``-``: not measured for that case); the ratios stay of call time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from perf.baseline import read_document, validate_baseline

__all__ = ["tables"]


def _median(entry: dict) -> float:
    return statistics.median(entry["samples_s"])


def _kernel_cells(entry: dict) -> str:
    samples = entry.get("kernel_samples_s")
    if not samples:
        return " - | - |"
    t = statistics.median(samples)
    return f" {t * 1e3:.4g} | {entry['bytes'] / t / 1e9:,.0f} |"


def tables(document: dict) -> str:
    entries = {**document["benchmarks"], **(document.get("references") or {})}
    kernel = any(e.get("kernel_samples_s") for e in entries.values())
    copy = (document.get("copy_bandwidth") or {}).get("gbps")  # null in a document: no "% copy" column values
    by_shape = defaultdict(list)
    for case_id, e in entries.items():
        by_shape[(e["benchmark"], tuple(e["shape"]))].append(e)

    def reference(shape, kernel, arm, benchmark=None):
        for e in entries.values():
            if tuple(e["shape"]) == shape and e["kernel"] == kernel and e["arm"] == arm and (
                    benchmark is None or e["benchmark"] == benchmark):
                return _median(e)
        return None

    lines = []
    order = ["paged_decode", "paged_decode_q4", "paged_decode_q8", "kvq4_decode", "dense_decode", "multi_query",
             "normalized_argmax"]
    for benchmark in order:
        keys = sorted((k for k in by_shape if k[0] == benchmark), key=lambda k: k[1])
        if not keys:
            continue
        lines += [f"#### {benchmark}", "",
                  "| shape | kernel[arm] | ms | GB/s | % copy |" + (" kernel ms | kernel GB/s |" if kernel else "")
                  + " x MLX ref | x torch SDPA |",
                  "| --- | --- | ---: | ---: | ---: |" + (" ---: | ---: |" if kernel else "") + " ---: | ---: |"]
        for key in keys:
            shape = key[1]
            if benchmark == "multi_query":
                mlx_ref = reference(shape, "sdpa_causal", "mlx")
            elif benchmark == "normalized_argmax":
                mlx_ref = reference(shape, "logsumexp_sub_argmax", "mlx")
            else:
                mlx_ref = reference(shape, "sdpa", "mlx")
            torch_ref = reference(shape, "sdpa_default", "torch") if benchmark != "normalized_argmax" else None
            for e in sorted(by_shape[key], key=_median):
                t = _median(e)
                gbps = e["bytes"] / t / 1e9
                label = "x".join(map(str, shape))
                ratio = (lambda ref: f"{t / ref:.2f}" if ref else "-")
                share = f"{100 * gbps / copy:.1f}" if copy else "-"
                lines.append(f"| {label} | {e['kernel']}[{e['arm']}] | {t * 1e3:.4g} | {gbps:,.0f} | "
                             f"{share} |{_kernel_cells(e) if kernel else ''} {ratio(mlx_ref)} | {ratio(torch_ref)} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.report", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run document written by python -m perf.run --save")
    args = parser.parse_args(argv)
    try:
        document = validate_baseline(read_document(args.run))
        text = tables(document)  # inside: nothing is printed of a document that cannot be tabled
    except (TypeError, ValueError) as exc:
        print(f"perf.report: {exc}", file=sys.stderr)
        return 2
    settings = document.get("settings") or {}
    copy = (document.get("copy_bandwidth") or {}).get("gbps")
    print(f"device {document['device_key']}; copy bandwidth {f'{copy:,.0f} GB/s' if copy else 'not measured'}; "
          f"{settings.get('rounds')} rounds of {settings.get('batch', 1)} calls after {settings.get('warmup')} "
          f"warm-up rounds (protocol {settings.get('protocol', 'eval')}, input sets "
          f"{settings.get('inputs', 'shared')}); medians per call\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
