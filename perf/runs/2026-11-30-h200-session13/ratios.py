"""Session 13: issue 10's ratios per process of a pool folder (p1-p3.json) and in the gate's 4th process
(gate.jsonl), median per process; the pool's figure is the median of the three process medians, as RESULTS reports
it. Usage: python ratios.py <pooled folder>."""
import json
import statistics
import sys
from pathlib import Path

D = Path(sys.argv[1])
TARGETS = [  # (label, kernel id, control id, bytes for TB/s or None)
    ("paged bf16 16/8/D256/N128k vs MLX SDPA", "paged_decode/paged_attention[cuda]/16x8x1x256x131072",
     "paged_decode/sdpa[mlx]/16x8x1x256x131072", 2 * 8 * 131072 * 256 * 2),
    ("paged bf16 32/8/D128/N32k vs MLX SDPA", "paged_decode/paged_attention[cuda]/32x8x1x128x32768",
     "paged_decode/sdpa[mlx]/32x8x1x128x32768", 2 * 8 * 32768 * 128 * 2),
    ("KV4 32/8/D128/N32k", "paged_decode_q4/paged_attention[cuda]/32x8x1x128x32768",
     "paged_decode_q4/gather_dequantize_sdpa[mlx]/32x8x1x128x32768", None),
    ("KV8 32/8/D128/N32k", "paged_decode_q8/paged_attention[cuda]/32x8x1x128x32768",
     "paged_decode_q8/gather_dequantize_sdpa[mlx]/32x8x1x128x32768", None),
    ("KV4 16/8/D256/N128k", "paged_decode_q4/paged_attention[cuda]/16x8x1x256x131072",
     "paged_decode_q4/gather_dequantize_sdpa[mlx]/16x8x1x256x131072", None),
    ("KV8 16/8/D256/N128k", "paged_decode_q8/paged_attention[cuda]/16x8x1x256x131072",
     "paged_decode_q8/gather_dequantize_sdpa[mlx]/16x8x1x256x131072", None),
    ("kvq4 16/8/N128k", "kvq4_decode/kvq4_decode[cuda]/16x8x1x256x131072",
     "kvq4_decode/dequantize_sdpa[mlx]/16x8x1x256x131072", None),
    ("kvq4 32/8/N32k", "kvq4_decode/kvq4_decode[cuda]/32x8x1x256x32768",
     "kvq4_decode/dequantize_sdpa[mlx]/32x8x1x256x32768", None),
    ("kvq4 8/1/N32k", "kvq4_decode/kvq4_decode[cuda]/8x1x1x256x32768", "kvq4_decode/dequantize_sdpa[mlx]/8x1x1x256x32768",
     None),
    ("multi-query 32/8/L8/D128/N32k", "multi_query/multi_query_causal[cuda]/32x8x8x128x32768",
     "multi_query/sdpa_rows[mlx]/32x8x8x128x32768", None),
    ("multi-query 16/8/L8/D256/N32k", "multi_query/multi_query_causal[cuda]/16x8x8x256x32768",
     "multi_query/sdpa_rows[mlx]/16x8x8x256x32768", None),
    ("normalized argmax 64 x 151936", "normalized_argmax/normalized_argmax[cuda]/64x151936",
     "normalized_argmax/logsumexp_sub_argmax[mlx]/64x151936", None),
]


def medians(doc):
    return {name.rsplit("/", 1)[0]: statistics.median(b["samples_s"] if "samples_s" in b else b["samples"]) * 1e3
            for name, b in doc["benchmarks"].items()}


procs = [medians(json.loads((D / f"p{i}.json").read_text())) for i in (1, 2, 3)]
for label, kernel, control, nbytes in TARGETS:
    k = statistics.median(p[kernel] for p in procs)
    c = statistics.median(p[control] for p in procs)
    per = " / ".join(f"{p[control] / p[kernel]:.2f}" for p in procs)
    tb = f", {nbytes / (k * 1e-3) / 1e12:.2f} TB/s" if nbytes else ""
    print(f"{label:40s} {k:.4f} ms{tb} vs {c:.4f} ms: {c / k:.2f}x (per process {per})")

gate = {}
for line in (D / "gate.jsonl").read_text().splitlines():
    record = json.loads(line)
    if "case" in record and "median_s" in record:
        gate[record["case"].rsplit("/", 1)[0]] = record["median_s"] * 1e3
print("\n4th process (the gate's run against the pool):")
for label, kernel, control, nbytes in TARGETS:
    if kernel in gate and control in gate:
        print(f"{label:40s} {gate[kernel]:.4f} ms vs {gate[control]:.4f} ms: {gate[control] / gate[kernel]:.2f}x")
