"""The ring fetch as the cuda arm's default against the register fetch, in kernel time, beside MLX SDPA on contiguous
K / V (perf.sweep.sweep: each variant's output bit for bit against the ring's, interleaved rounds).
    python3 sweep.py CALLS ROUNDS OUT.json"""
import json
import sys

import impl.paged_attention as paged
from perf.sweep import sweep

calls, rounds, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768), (32, 8, 1, 128, 4096),
          (16, 8, 1, 64, 32768)]
out = sweep(SHAPES, {"ring3": lambda: paged.set_matrix_ring(3), "registers": lambda: paged.set_matrix_ring(0)},
            calls=calls, rounds=rounds, log=lambda line: print(line, flush=True))
with open(out_path, "w") as f:
    json.dump(out, f, indent=1)
