"""Candidate changes to the ring partial at 32/8/D128 against it as kept, in kernel time beside MLX SDPA on
contiguous K / V (perf.sweep.sweep: interleaved rounds, each variant's output against the kept one's bit for bit).
    python3 variants.py CALLS ROUNDS OUT.json [name ...]
    python3 variants.py compile      (no GPU: each variant's 32/8/D128 partial through nvcc, its registers)

* "kept": the ring partial as committed (4 SIMD groups, 512 threadgroups, 3 slots);
* "no L2 policy" (not in the default run: ../matrix-partial-ring/ measured it, 133.7-134.4 against 132.1-133.1 us at
  N128k, the merge 3.9 against 3.2-3.3): the ring's copies without the evict-first cache hint (ring.h's ring_copy16);
* "S in two chains" (not measured: 132 registers under nvcc 13.0 sm_90, `variants.py compile`, past the 128 that 4
  threadgroups per SM allow): the score product's eight m16n8k16 into two accumulators, two dependent chains of four
  added once;
* "SG 8, 256 threadgroups": 8 SIMD groups per threadgroup (96 KB of ring: 2 threadgroups per SM, the same 16
  SIMD groups per SM), half the threadgroups: half the partitions for the merge, half the combines;
* "SG 2, 1024 threadgroups": the other way, 24 KB of ring per threadgroup, 8 per SM;
* "diagnostic: no P.V products" (wrong outputs: one multiply-add per lane and tile in place of each m16n8k8, so the
  V reads stay live), and "diagnostic: no products" (the score products too): how much of the partial's time past
  its read the products hold;
* "merge 16 slices" (paged.set_merge): 16 slices per output row, not 32 (the ring-ceiling record's row of that name
  replayed the 32-slice pair it had traced first: the compiled pairs were not keyed on the merge then).
Neither SIMD-group count changes a step: only how many steps a threadgroup combines and the merge's partitions."""
import dataclasses
import json
import sys

import impl.paged_attention as paged
from impl.paged_attention import launch
from perf.sweep import sweep

KEPT = launch.MATRIX_PARTIAL_RING


def spec(name, source=None, header=None):
    return dataclasses.replace(KEPT, name=KEPT.name + "_" + name, source=source or KEPT.source,
                               header=header or KEPT.header)


def edit(text, old, new):
    assert text.count(old) == 1, old
    return text.replace(old, new)


POLICY = ('  unsigned long long policy;\n'
          '  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));\n')
NO_POLICY = spec("nopolicy", header=edit(
    edit(KEPT.header, POLICY, ""),
    'asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "l"(policy)',
    'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src)'))
body = edit(KEPT.source, "    metal::simdgroup_float8x8 st[TT];\n",
            "    metal::simdgroup_float8x8 st[TT];\n"
            "    metal::simdgroup_float8x8 st2 = metal::make_filled_simdgroup_matrix<float, 8, 8>(0.0f);\n")
body = edit(body, "        simdgroup_multiply_accumulate_k16(st[0], ka[0], kb[0], qt[s], qt[s + 1]);\n",
            "        if (s % 4 == 0) simdgroup_multiply_accumulate_k16(st[0], ka[0], kb[0], qt[s], qt[s + 1]);\n"
            "        else simdgroup_multiply_accumulate_k16(st2, ka[0], kb[0], qt[s], qt[s + 1]);\n")
body = edit(body, "    for (uint h = 0; h < TT; ++h)\n      for (uint e = 0; e < 2; ++e) sst[sg][fc + e][8 * h + fr]",
            "    if (TT == 1)\n"
            "      for (uint e = 0; e < 2; ++e) st[0].thread_elements()[e] += st2.thread_elements()[e];\n"
            "    for (uint h = 0; h < TT; ++h)\n      for (uint e = 0; e < 2; ++e) sst[sg][fc + e][8 * h + fr]")
TWO_CHAINS = spec("twochains", source=body)
# Diagnostic, not a candidate (wrong outputs): the step without its P . V products, so the part of the partial's time
# that is its products' latency shows (the copies, the reads from the ring, the scores and the softmax stay).
PV = ("        metal::simdgroup_multiply_accumulate(o[j], p[0], vt[0], o[j]);\n",
      "        o[j].thread_elements()[0] += float(vt[0].thread_elements()[0]) * float(p[0].thread_elements()[0]);\n")
S = ("        simdgroup_multiply_accumulate_k16(st[0], ka[0], kb[0], qt[s], qt[s + 1]);\n",
     "        st[0].thread_elements()[0] += float(ka[0].thread_elements()[0]) * float(kb[0].thread_elements()[1]);\n")
NO_PV = spec("nopv", source=edit(KEPT.source, *PV))
NO_PRODUCTS = spec("noproducts", source=edit(edit(KEPT.source, *PV), *S))


def use(kernel, simdgroups=4, target=512, slices=32):
    def apply():
        launch.MATRIX_PARTIAL_RING = kernel
        launch.SIMDGROUPS = simdgroups
        launch._partial_shape.cache_clear()  # (keyed on the shapes, not on the spec or SIMDGROUPS)
        paged.set_threadgroup_target(target)
        paged.set_merge(slices)
        paged.set_matrix_ring(3)
    return apply


VARIANTS = {"kept": use(KEPT), "no L2 policy": use(NO_POLICY), "S in two chains": use(TWO_CHAINS),
            "SG 8, 256 threadgroups": use(KEPT, 8, 256), "SG 2, 1024 threadgroups": use(KEPT, 2, 1024),
            "merge 16 slices": use(KEPT, slices=16), "diagnostic: no P.V products": use(NO_PV),
            "diagnostic: no products": use(NO_PRODUCTS)}
MEASURED = ("kept", "SG 8, 256 threadgroups", "SG 2, 1024 threadgroups", "merge 16 slices",
            "diagnostic: no P.V products", "diagnostic: no products")


def compile_each() -> None:
    """Every variant's 32/8/D128 bf16 partial as the cuda arm would launch it, through nvcc (impl.kernels.nvcc):
    registers per thread, and a failure where a body edit does not compile. 4 threadgroups per SM need <= 128."""
    import tempfile
    from pathlib import Path

    from impl.kernels.launches import _paged_pair
    from impl.kernels.nvcc import compile_batches

    batches = {}
    try:
        for index, apply in enumerate(VARIANTS.values()):
            apply()
            batches[f"v{index}"] = _paged_pair("bfloat16", None, 32, 8, 1, 128, 128, 16, 300, arm="cuda")[:1]
    finally:
        VARIANTS["kept"]()
    registers = {}
    with tempfile.TemporaryDirectory() as workdir:
        failures = compile_batches(Path(workdir), batches, registers)
    for name, (launch,) in zip(VARIANTS, batches.values()):
        print(f"{name:32s} {registers.get(launch.cuda_function, '-')} registers, {launch.shared_memory} B ring")
    print("\n".join(failures) or "every variant compiles")


if sys.argv[1:] == ["compile"]:
    compile_each()
    sys.exit(0)
calls, rounds, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
only = sys.argv[4:]
variants = {k: v for k, v in VARIANTS.items() if k in (only or MEASURED) or k == "kept"}
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768)]  # the two lengths of the 32/8 target
out = sweep(SHAPES, variants, calls=calls, rounds=rounds, log=lambda line: print(line, flush=True))
with open(out_path, "w") as f:
    json.dump(out, f, indent=1)
