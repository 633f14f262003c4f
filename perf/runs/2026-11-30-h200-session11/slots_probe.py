"""Session 11, call S9: would the multi-query partial at 32/8/L8/D128 run faster with more K / V in flight? The ring
partial keeps one 16 KiB block copied ahead per threadgroup; its half buffers take the rest of the shared memory. This
variant (bfloat16 only, a probe: textual edits of the ring body) drops the half buffers: the tiles read K and V straight
from RING ring slots in T (rows KS apart, so ldmatrix stays free of bank conflicts), multiply in T (bfloat16 tensor-core
products) and round P to T; the stagers only copy, RING - 2 blocks ahead of the one the tiles compute next. Not this
kernel's precision contract (it rounds Q, K, V and P to half): the probe prints each kernel's error against a float32
SDPA on the same inputs beside the timing, interleaved against the committed ring (perf.interleaved; us per call).
"""
import dataclasses
import math
import sys

import mlx.core as mx

import impl.multi_query as mq
from perf.cases import multi_query_group
from perf.interleaved import in_turn, interleaved, ratios, table
from perf.shapes import DecodeShape
from probe_s11 import control

COPIES = 8
EDITS = [  # (old, new, occurrences)
    ("  half* const kt = (half*)kv_memory;\n  half* const vt = kt + STAGES * BK * KS;\n"
     "  T* const raw = (T*)(vt + STAGES * BK * KS);\n",
     "  T* const raw = (T*)kv_memory;  // RING slots: one block of K then V as T, rows KS apart\n"
     "  half* const kt = (half*)kv_memory;  // (the register stagers' path: not taken by the probe's views)\n"
     "  half* const vt = kt + STAGES * BK * KS;\n", 1),
    ("metal::simdgroup_half8x8", "metal::simdgroup_matrix<T, 8, 8>", 7),
    ("half(T(float(qp", "T(T(float(qp", 2),
    (") : half(0.0f);", ") : T(0.0f);", 2),
    ("p[t][c].thread_elements()[e] = half(w);", "p[t][c].thread_elements()[e] = T(w);", 2),
    ("const THREADGROUP_MEM half* kc = kt + (step % (uint)STAGES) * (uint)(BK * KS);",
     "const T* kc = raw + (step % (uint)RING) * (uint)(2 * BK * KS);", 2),
    ("const THREADGROUP_MEM half* vc = vt + (step % (uint)STAGES) * (uint)(BK * KS);",
     "const T* vc = kc + (uint)(BK * KS);", 2),
    ("const THREADGROUP_MEM half* at = kc +", "const T* at = kc +", 2),
    ("const THREADGROUP_MEM half* at = vc +", "const T* at = vc +", 2),
    ("(uint)(2 * BK * D)", "(uint)(2 * BK * KS)", 2),
    ("async_copy16(slot + j * (uint)D + e,", "async_copy16(slot + j * (uint)KS + e,", 1),
    ("async_copy16(slot + ((uint)BK + j) * (uint)D + e,", "async_copy16(slot + ((uint)BK + j) * (uint)KS + e,", 1),
    ("for (uint b = 0; b + 1u < (uint)RING; ++b) {", "for (uint b = 0; b + 2u < (uint)RING; ++b) {", 1),
    ("          if (it + (uint)RING - 1u < blocks) issue(it + (uint)RING - 1u);\n"
     "          async_copy_commit();\n"
     "          async_copy_wait<RING - 1>();  // block it's copies have landed\n"
     "          convert(it);\n",
     "          if (it + (uint)RING - 2u < blocks) issue(it + (uint)RING - 2u);\n"
     "          async_copy_commit();\n"
     "          async_copy_wait<RING - 2>();  // block it's copies have landed\n", 1),
]


def slots_spec():
    source = mq._assembled(ring=True)
    for old, new, count in EDITS:
        assert source.count(old) == count, (old, source.count(old))
        source = source.replace(old, new)
    return dataclasses.replace(mq.PARTIAL_RING, name="multi_query_partial_ring_slots", source=source)


SLOTS = slots_spec()


def compiled(scale, splits, ring):
    """ring 0: the committed ring partial; else the probe's with ``ring`` slots."""
    def call(q, k, v):
        d = q.shape[3]
        launch = mq.partial_launch(q, k, v, mx.array([scale], dtype=q.dtype), splits, 2, ring or mq.RING_SLOTS)
        if ring:
            launch = dataclasses.replace(launch, spec=SLOTS,
                                         shared_memory=ring * 2 * mq.block_keys(d) * (d + mq.ROW_PAD) * q.dtype.size)
        opart, mpart, lpart = launch.run("cuda")
        return mq.merge_launch(opart, mpart, lpart, q.dtype, q.shape[1], q.shape[2]).run("cuda")[0]
    return mx.compile(call)


def main(blocks=5, rounds=20):
    print(mx.default_device(), mx.__version__, flush=True)
    for shape in (DecodeShape(32, 8, 8, 128, 32768), DecodeShape(16, 8, 8, 256, 32768), DecodeShape(64, 8, 8, 128, 32768)):
        group = multi_query_group(shape, ["cuda"], copies=COPIES)
        sets = group.inputs()
        scale = 1 / math.sqrt(shape.head_dim)
        splits = mq.default_splits(shape.length, shape.hkv)
        x = sets[0]
        ref = mx.fast.scaled_dot_product_attention(*(a.astype(mx.float32) for a in (x["q"], x["k"], x["v"])),
                                                   scale=scale, mask="causal")
        print(f"\n## multi-query {shape} (splits {splits}); error against a float32 SDPA, max |.| / max |ref|:", flush=True)
        calls = {}
        for ring in (0, 3, 4, 5):
            name = "ring (committed)" if not ring else f"slots {ring}"
            f = compiled(scale, splits, ring)
            out = f(mx.contiguous(x["q"]), x["k"], x["v"]).astype(mx.float32)
            err = (mx.max(mx.abs(out - ref)) / mx.max(mx.abs(ref))).item()
            rms = (mx.sqrt(mx.mean((out - ref) ** 2)) / mx.sqrt(mx.mean(ref ** 2))).item()
            print(f"  {name}: max {err:.3g}, rms {rms:.3g}", flush=True)
            calls[name] = in_turn(sets, lambda x, f=f: f(mx.contiguous(x["q"]), x["k"], x["v"]))
        calls["sdpa_rows (control)"] = control(group, "sdpa_rows")
        results = interleaved(calls, blocks=blocks, rounds=rounds)
        print(table(results))
        print(ratios(results, "sdpa_rows (control)"))
        group.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
