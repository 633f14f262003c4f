"""Session 7: summary of call F2's CUPTI timeline (trace_f2.py): per workload, the median over its rounds 1-5 of
where a round of 8 calls went, us per call: build (the launches' Python, before mx.eval), dispatch (mx.eval's start
to the first kernel), GPU span (first kernel start to last kernel end; the 8 calls' kernels overlap), tail (last
kernel end to the round's end: the host sync and MLX's completion work), and the kernels' own mean durations.
The profiler slows the host side (its runtime-API records), not the kernels.

    python perf/runs/2026-11-30-h200-session7/trace_summary.py perf/runs/2026-11-30-h200-session7/callF2/trace.json.gz
"""
import collections
import gzip
import json
import statistics
import sys


def main(path):
    events = json.load(gzip.open(path))["traceEvents"]
    marks = [e for e in events if e.get("cat") == "user_annotation"]
    rounds = sorted((e for e in marks if e["name"].startswith("round ")), key=lambda e: e["ts"])
    evals = [e for e in marks if e["name"] == "mx.eval"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    rows = collections.defaultdict(list)
    for r in rounds:
        name, index = r["name"][6:].rsplit(" ", 1)
        if index == "0":
            continue  # the first profiled round of each workload
        start, end = r["ts"], r["ts"] + r["dur"]
        ev = next(e for e in evals if start <= e["ts"] <= end)
        ks = [k for k in kernels if start <= k["ts"] <= end + 50]
        first, last = ks[0]["ts"], max(k["ts"] + k["dur"] for k in ks)
        durations = collections.defaultdict(list)
        for k in ks:
            durations[k["name"].split("custom_kernel_")[-1].split("_")[0:3][-1] if "custom_kernel" in k["name"]
                      else k["name"].split("(")[0].split("<")[0].split("::")[-1][:24]].append(k["dur"])
        rows[name].append((ev["ts"] - start, first - ev["ts"], last - first, end - last, r["dur"],
                           {n: statistics.mean(d) for n, d in durations.items()}))
    print(f"{'workload (8 calls per round)':42s} {'round':>7s} {'build':>7s} {'dispatch':>8s} {'GPU span':>8s} "
          f"{'tail':>6s}   (us per call)  kernels: mean us each")
    for name, values in rows.items():
        med = [statistics.median(v[i] for v in values) / 8 for i in (4, 0, 1, 2, 3)]
        kern = ", ".join(f"{n} {d:.0f}" for n, d in values[-1][5].items())
        print(f"{name:42s} {med[0]:7.1f} {med[1]:7.1f} {med[2]:8.1f} {med[3]:8.1f} {med[4]:6.1f}   {kern}")


if __name__ == "__main__":
    main(sys.argv[1])
