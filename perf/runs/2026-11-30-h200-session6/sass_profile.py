"""Summarize an ncu source page (``ncu -i X.ncu-rep --page source --print-source sass --csv``, the callE*/prof/*.sass.csv.gz
files): executed warp instructions and stall samples by opcode and by stall reason, for the whole first kernel and
for runs of instructions with the same execution count (a loop body executed by the same warps, e.g. the staging and
the products of multi-query's partial). Usage: python sass_profile.py FILE.sass.csv.gz [runs]"""
import collections
import csv
import gzip
import io
import sys

rows = list(csv.reader(io.TextIOWrapper(gzip.open(sys.argv[1]), encoding="utf-8")))
headers = [i for i, r in enumerate(rows) if r and r[0] == "Address"]
hdr = rows[headers[0]]
end = headers[1] - 1 if len(headers) > 1 else len(rows)
data = [r for r in rows[headers[0] + 1:end] if len(r) >= len(hdr)]
src, samples, executed = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)"), hdr.index("Instructions Executed")
stalls = [(j, h[6:]) for j, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]


def opcode(r):
    words = r[src].split()
    word = words[1] if words and words[0].startswith("@") else (words[0] if words else "?")
    return word.split(".")[0]


def summary(part, label):
    ops, why = collections.Counter(), collections.Counter()
    count = sampled = 0
    for r in part:
        n = int(r[executed] or 0)
        ops[opcode(r)] += n
        count += n
        sampled += int(r[samples] or 0)
        for j, name in stalls:
            why[name] += int(r[j] or 0)
    if count:
        print(f"{label}: {count} warp instructions, {sampled} stall samples")
        print("  opcodes:", ", ".join(f"{o} {c / count:.1%}" for o, c in ops.most_common(10)))
        print("  stalls: ", ", ".join(f"{k} {v / max(1, sampled):.0%}" for k, v in why.most_common(6)))


summary(data, "kernel")
if sys.argv[2:] == ["runs"]:
    start = 0
    for k in range(1, len(data) + 1):
        if k == len(data) or data[k][executed] != data[start][executed]:
            if k - start >= 40:
                summary(data[start:k], f"instructions {start}-{k - 1} (each executed {data[start][executed]} times)")
            start = k
