"""The ring fetch as the cuda arm's default, in kernel time: the partial with its first steps' copies asked for before q
is staged (partial_matrix.metal as it stands) against the same partial staging q first (the order before), and
against the register fetch, beside MLX SDPA on contiguous K / V; every output compared bit for bit with the first's.
    python3 sweep.py CALLS ROUNDS OUT.json"""
import dataclasses
import json
import sys

import impl.paged_attention as paged
from impl.paged_attention import launch
from perf.sweep import sweep

calls, rounds, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768), (32, 8, 1, 128, 4096),
          (16, 8, 1, 64, 32768)]

# The order before: the first step's block-table read (the ring: its prologue) after q's staging, at the loop's top.
PROLOGUE = launch.REGISTER_BLOCKS["prologue"]
NOTE = launch.MATRIX_PARTIAL_SOURCE[launch.MATRIX_PARTIAL_SOURCE.index("  // The first step's block-table entries"):
                                    launch.MATRIX_PARTIAL_SOURCE.index(PROLOGUE)]
LOOP = "  for (uint t0 = first + sg * TB; t0 < stop; t0 += SG * TB) {\n"
before = launch.MATRIX_PARTIAL_SOURCE.replace(NOTE + PROLOGUE, "").replace(LOOP, PROLOGUE + LOOP)
assert before.count(PROLOGUE) == 1 and before != launch.MATRIX_PARTIAL_SOURCE
for name, block in launch.REGISTER_BLOCKS.items():
    before = before.replace(block, launch.RING_PIECES[name])
NOW = launch.MATRIX_PARTIAL_RING
Q_FIRST = dataclasses.replace(NOW, name=NOW.name + "_q_first", source=before)


def use(spec, slots):
    def apply():
        launch.MATRIX_PARTIAL_RING = spec
        launch._partial_shape.cache_clear()
        paged.set_matrix_ring(slots)
    return apply


out = sweep(SHAPES, {"ring3": use(NOW, 3), "ring3/q-first": use(Q_FIRST, 3), "registers": use(NOW, 0)},
            calls=calls, rounds=rounds, log=lambda line: print(line, flush=True))
with open(out_path, "w") as f:
    json.dump(out, f, indent=1)
