import json
from perf.regression import judge
base = json.load(open('perf/baselines/cuda-NVIDIA_H200.json'))
for i in (2, 3):
    run = json.load(open(f'perf/runs/2026-11-30-h200-session8/callG9/pooled/p{i}.json'))['benchmarks']
    flagged, gated = [], 0
    for k, v in run.items():
        verdict = judge(v['samples_s'], base, k)
        if verdict is None: continue
        gated += 1
        if getattr(verdict, 'regressed', False): flagged.append((k, str(verdict)[:200]))
    print(f"p{i}: {gated} judged, {len(flagged)} regressed")
    for f in flagged: print("  ", f)
