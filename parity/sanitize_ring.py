"""The ring fetch's calls for compute-sanitizer (``test_paged_attention.py::test_ring_under_compute_sanitizer`` runs
this module under racecheck and memcheck; CUDA only).

    compute-sanitizer --tool racecheck python -m parity.sanitize_ring

Why a sanitizer and not only the gates: the ring's hazards are orderings. A copy still in flight when its slot or the
combine's buffer is reused, or a lane reading a piece another lane copied with no barrier between, gives wrong
outputs only when the copy lands late, which the gates see only by timing; racecheck sees the missing ordering and
memcheck an access past a buffer on every run.

The calls: 32/8/D128 and 16/4/D64, bfloat16, blocks of 16 (a step's 8 rows in one block), 8 and 4 tokens (a table
entry per row), a length of 1064 (a whole number of 8-token steps, so some SIMD group's step starts exactly at each
partition's end, and a last partition shorter than the others), the ring's default slots against register loads, bit
for bit, in the suite's poisoned pool (a NaN output is a row read from past the live ones). Exit status 1 if an
output differs or holds a NaN."""

from __future__ import annotations

import sys

import mlx.core as mx
import numpy as np

import impl.paged_attention as paged
from properties import strategies as sts

CALLS = ((32, 8, 128, 16), (16, 4, 64, 4), (32, 8, 128, 8))  # Hq, Hkv, D, block size
LENGTH = 1064


def main() -> int:
    previous = paged.MATRIX_RING
    ring = previous or 3  # the default's slots, or 3 where the default is register loads
    differ = []
    for hq, hk, d, bs in CALLS:
        # The suite's pool (sts.build_paged_case): unused blocks and slots NaN, block 0 the NaN sentinel that the
        # zero-padded table and the extra entries name, so a row read from past the live ones poisons the output.
        case = sts.build_paged_case(np.random.default_rng(0), dtype="bfloat16", hq=hq, hkv=hk, n=1, dk=d, dv=d,
                                    block_size=bs, length=LENGTH, sentinel=True, extra_table=1)
        outs = []
        for slots in (0, ring):
            paged.set_matrix_ring(slots)
            y = paged.paged_attention(case.q_mx, case.storage, case.table, case.length, scale=case.scale, arm="cuda")
            outs.append(np.array(y.astype(mx.float32)))
        same = bool(np.array_equal(*outs, equal_nan=True)) and not np.isnan(outs[1]).any()
        print(f"{hq}/{hk}/D{d} blocks of {bs}: ring {ring} bit-identical to register loads, no NaN: {same}",
              flush=True)
        if not same:
            differ.append((hq, hk, d, bs))
    paged.set_matrix_ring(previous)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
