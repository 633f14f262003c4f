"""One process's kernel time of the paged kernels (the cuda arm's default: the ring, reads first) beside MLX SDPA on
contiguous K / V at the issue's three D128 target shapes (perf.sweep.sweep, ``rounds`` measurements of each).
    python3 ratio.py CALLS ROUNDS OUT.json"""
import json
import sys

import impl.paged_attention as paged
from perf.sweep import sweep

calls, rounds, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768)]
out = sweep(SHAPES, {"paged": lambda: paged.set_matrix_ring(3)}, calls=calls, rounds=rounds,
            log=lambda line: print(line, flush=True))
with open(out_path, "w") as f:
    json.dump(out, f, indent=1)
