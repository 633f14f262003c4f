"""Inline SVG plots for the report (matplotlib, Agg backend, no external assets).

* ``kernel_plot(kernel, records)``: one figure per kernel, one panel per gate
  kind (units differ between gates: ULPs, NMSE, KL, absolute error, element
  counts). x is the number of elements of the gated output (log scale), y the
  measured value; each record's threshold is a grey bar at the same x (per x and
  series, only the smallest and largest values are drawn). Passing
  measurements are blue, failing ones red; the marker says the arm.
  Non-finite measurements are drawn as red triangles above every finite value.
* ``perf_plot(records)``: per benchmark, % of measured copy bandwidth and the
  median's change against the baseline, of the figure the gate judged (call or
  kernel time: the record's ``figure``; red where the harness flagged a
  regression).

Every function returns an ``<svg>`` element as a string, ready to inline: no
XML prolog, no DOCTYPE, no timestamps, element ids unique across the page's figures
(each figure's prefixed by a hash of its name).
"""

from __future__ import annotations

import hashlib
import io
import math
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter  # noqa: E402

from reports.results import judged_median_s, number  # noqa: E402

ARM_MARKERS = {"graph": "o", "metal": "s", "cuda": "D"}
PASS_COLOR, FAIL_COLOR, THRESHOLD_COLOR = "#2563eb", "#dc2626", "#9ca3af"
PLAIN = FuncFormatter(lambda value, _pos: f"{value:g}")
RC = {"svg.fonttype": "none", "font.size": 8, "axes.titlesize": 9, "axes.grid": True, "grid.alpha": 0.3}


def drawn(text) -> str:
    """``text`` as matplotlib should draw it: as written. A "$" would start TeX math (and a name that is not valid
    TeX would stop the report), so it is escaped; everything else is plain text to matplotlib already."""
    return str(text).replace("$", r"\$")


def numel(shape) -> int:
    if not isinstance(shape, (list, tuple)):
        return 1
    return max(1, math.prod(int(d) for d in shape if isinstance(d, (int, float))))


ID_RE = re.compile(r'(?<=\s)id="([^"]+)"')
REFERENCE_RES = (re.compile(r"url\(#([^)]+)\)"), re.compile(r'((?:xlink:)?href)="#([^"]+)"'))


def prefix_ids(svg: str, prefix: str) -> str:
    """``svg`` with every element id, and every reference to one, prefixed: matplotlib numbers its
    ids per figure (``figure_1``, ``axes_1``, ``line2d_1``), and the page inlines many figures, where
    a repeated id is invalid HTML and a ``url(#...)`` could resolve to another figure's clip path."""
    svg = ID_RE.sub(lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = REFERENCE_RES[0].sub(lambda m: f"url(#{prefix}{m.group(1)})", svg)
    return REFERENCE_RES[1].sub(lambda m: f'{m.group(1)}="#{prefix}{m.group(2)}"', svg)


def to_svg(fig, salt: str) -> str:
    """The figure as an inline <svg> whose ids are unique in the page. ``salt`` names the figure (unique per
    page): it prefixes the ids, and it is matplotlib's hash salt, which otherwise draws a random one per
    run, so the same figure gives the same SVG."""
    digest = hashlib.sha1(salt.encode()).hexdigest()
    with matplotlib.rc_context({"svg.hashsalt": digest[:12]}):
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE (it names an external DTD)
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, count=1, flags=re.S)  # RDF boilerplate
    # Shrink with the page, never grow past the drawn size; the viewBox keeps the aspect ratio.
    svg = re.sub(r'<svg([^>]*?) width="([^"]*)" height="[^"]*"',
                 r'<svg\1 class="plot" style="width:100%;max-width:\2"', svg, count=1)
    return prefix_ids(svg, f"g{digest[:8]}-")


def _y_scale(finite: list[float]) -> tuple[str, dict, float]:
    """(scale, its options, where a non-finite measurement is drawn) for these finite values.

    Linear for small counts (ULPs, differing elements); log for positive
    values spanning decades; symlog when zeros (exact results, zero thresholds)
    must stay visible next to them.
    """
    positive = [v for v in finite if v > 0]
    top = max(finite, default=0.0)
    if not positive or all(v.is_integer() and 0 <= v <= 64 for v in finite):
        return "linear", {}, top * 1.25 + 1.0
    if len(positive) == len(finite):
        return "log", {}, top * 10.0
    return "symlog", {"linthresh": min(positive)}, top * 10.0


def _extremes(points) -> list[tuple]:
    """Per x, the smallest and the largest y: all a reader can tell apart at one x, and what
    decides a gate (the largest measurement, the smallest threshold). Hypothesis-driven tests
    gate thousands of examples per shape; each SVG marker costs bytes."""
    low: dict = {}
    high: dict = {}
    for x, y in points:
        low[x] = min(low.get(x, y), y)
        high[x] = max(high.get(x, y), y)
    return list(dict.fromkeys([(x, low[x]) for x in low] + [(x, high[x]) for x in high]))


def kernel_plot(kernel: str, records: list[dict]) -> str:
    """Measured against threshold across shapes, one panel per gate kind."""
    if not records:
        raise ValueError("records must hold at least one gate record")
    gates = sorted({str(r.get("gate")) for r in records})
    columns = min(3, len(gates))
    rows = math.ceil(len(gates) / columns)
    with matplotlib.rc_context(RC):
        # Constrained layout places the outside legend in the one draw savefig makes
        # (tight_layout plus bbox_inches="tight" would draw the figure three times).
        fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 0.5 + 2.3 * rows), squeeze=False,
                                 layout="constrained")
        arms_seen = set()
        for ax, gate in zip(axes.flat, gates):
            subset = [r for r in records if str(r.get("gate")) == gate]
            xs = [numel(r.get("shape")) for r in subset]
            measured = [number(r.get("measured")) for r in subset]
            thresholds = [number(r.get("threshold")) for r in subset]
            finite = [v for v in measured + thresholds if v is not None and math.isfinite(v)]
            scale, options, top = _y_scale(finite)
            bars = _extremes((x, t if t is not None and math.isfinite(t) else top) for x, t in zip(xs, thresholds))
            ax.scatter(*zip(*bars), marker="_", s=120, color=THRESHOLD_COLOR, linewidths=1.5, zorder=2)
            for arm in sorted({str(r.get("arm")) for r in subset}):
                arms_seen.add(arm)
                for passed, color in ((True, PASS_COLOR), (False, FAIL_COLOR)):
                    pts = _extremes((x, m) for x, m, r in zip(xs, measured, subset)
                                  if str(r.get("arm")) == arm and bool(r.get("passed")) == passed
                                  and m is not None and math.isfinite(m))
                    if pts:
                        ax.scatter(*zip(*pts), marker=ARM_MARKERS.get(arm, "o"), s=14, color=color,
                                   alpha=0.75, zorder=3, linewidths=0)
            nonfinite = list(dict.fromkeys(x for x, m in zip(xs, measured) if m is None or not math.isfinite(m)))
            if nonfinite:
                ax.scatter(nonfinite, [top] * len(nonfinite), marker="^", s=30, color=FAIL_COLOR, zorder=4)
            ax.set_xscale("log")
            ax.set_yscale(scale, **options)
            ax.margins(y=0.12)
            if scale == "linear":  # counts: integer ticks from 0, room above the largest
                ax.yaxis.set_major_locator(MaxNLocator(integer=True))
                ax.set_ylim(-0.05 * top, 1.1 * top)
            # Plain tick labels ("0.001", "1e+04"): the default log labels go through
            # mathtext, which is most of the time a figure takes to draw.
            ax.xaxis.set_major_formatter(PLAIN)
            if scale != "linear":
                ax.yaxis.set_major_formatter(PLAIN)
            ax.xaxis.set_minor_formatter(NullFormatter())
            ax.yaxis.set_minor_formatter(NullFormatter())
            failed = sum(not r.get("passed") for r in subset)
            ax.set_title(drawn(f"{gate}: {len(subset)} records" + (f", {failed} failed" if failed else "")))
            ax.set_xlabel("elements in output")
            ax.set_ylabel("measured")
        for ax in list(axes.flat)[len(gates):]:
            ax.set_visible(False)
        handles = [Line2D([], [], marker="_", ls="", color=THRESHOLD_COLOR, markersize=10, label="threshold"),
                   Line2D([], [], marker="o", ls="", color=PASS_COLOR, label="pass"),
                   Line2D([], [], marker="o", ls="", color=FAIL_COLOR, label="fail")]
        handles += [Line2D([], [], marker=ARM_MARKERS.get(a, "o"), ls="", color="#374151",
                           label="no arm" if a == "None" else drawn(f"arm {a}")) for a in sorted(arms_seen)]
        # The kernel's name is the figure's caption in the page, not a title here.
        fig.legend(handles=handles, loc="outside upper center", ncol=min(len(handles), 3 * columns), frameon=False)
        return to_svg(fig, f"kernel:{kernel}")


def perf_label(record: dict) -> str:
    shape = "x".join(str(d) for d in record.get("shape") or [])
    return " ".join(str(p) for p in (record.get("benchmark"), record.get("arm"), shape) if p)


def perf_plot(records: list[dict]) -> str:
    """% of copy bandwidth and change against the baseline, one bar per benchmark."""
    if not records:
        raise ValueError("records must hold at least one perf record")
    labels = [perf_label(r) for r in records]
    pct = [number(r.get("pct_copy_bw")) or 0.0 for r in records]
    changes = []
    for r in records:
        base, median = number(r.get("baseline_median_s")), judged_median_s(r)
        changes.append(100.0 * (median / base - 1.0) if base and median is not None else 0.0)
    colors = [FAIL_COLOR if r.get("regressed") else PASS_COLOR for r in records]
    height = 0.6 + 0.22 * len(records)
    with matplotlib.rc_context(RC):
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, height), sharey=True, layout="constrained")
        ys = range(len(records))
        left.barh(ys, pct, color=PASS_COLOR)
        left.set_yticks(list(ys), [drawn(label) for label in labels])
        left.invert_yaxis()
        left.set_xlabel("% of measured copy bandwidth")
        right.barh(ys, changes, color=colors)
        right.axvline(0, color="#374151", lw=0.8)
        right.set_xlabel("judged median's change vs baseline (%); red: regressed")
        return to_svg(fig, "perf")
