"""Candidate changes to the ring partial at 32/8/D128 against it as kept, in kernel time beside MLX SDPA on
contiguous K / V (perf.sweep.sweep: interleaved rounds, each variant's output against the kept one's bit for bit).
    python3 variants.py CALLS ROUNDS OUT.json [name ...]
    python3 variants.py compile [name ...]     (no GPU: each variant's 32/8/D128 partial through nvcc, its registers)
    python3 variants.py scoreboards DIR name ...   (nvcc and cuobjdump: each variant's SASS with its scoreboards)
    python3 variants.py sanitize name   (parity.sanitize_ring's calls with the named variant as the ring, for
                                         compute-sanitizer; exit status 1 where it differs from register loads)

* "kept": the ring partial as committed (4 SIMD groups, 512 threadgroups, 3 slots, its reads ahead of its copies);
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
* "q first", "scale staged", "q first, scale staged": the two waits ncu's samples of the kept partial showed (q's
  staging behind the prologue's copies; the score's multiply by the scale, whose load shares a scoreboard with the
  loop's block-table read), each taken away (the comments below say how); `scoreboards` lists the SASS with them.
* "copies before reads": the ring before its reads went ahead of its copies (`bulk` measured the reads ahead, as
  "reads before copies", and they are kept: the comment below).
* "score direct, 384 threadgroups" (beside "kept, 384 threadgroups"), "diagnostic: no score round trip": S = Q . K^T,
  no threadgroup round trip per step, and what that round trip costs at most (the comment below).
* "bulk copies": a step's rows by bulk copies and an mbarrier per slot (bulk/; the comment below, and `compile`
  checks its reads' bank spread: bulk_banks).
Neither SIMD-group count changes a step: only how many steps a threadgroup combines and the merge's partitions."""
import dataclasses
import json
import sys
from pathlib import Path

import impl.paged_attention as paged
from impl.paged_attention import launch
from perf.sweep import sweep

KEPT = launch.MATRIX_PARTIAL_RING
KEPT_SHARED = launch.ring_shared_bytes


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
ISSUE = "    issue(t0 + (RING - 1) * (SG * TB));\n"  # the ring's copies for a later step (ring_issue.metal)


def without_round_trip(text):
    """The step's scores read from S^T's accumulator as they stand: no stores to sst, no sst."""
    text = edit(text, "    for (uint h = 0; h < TT; ++h)\n      for (uint e = 0; e < 2; ++e) sst[sg][fc + e][8 * h + fr] = "
                "st[h].thread_elements()[e];\n", "")
    text = edit(text, "const float v = sst[sg][fr][8 * h + fc + e] * scale;",
                "const float v = st[h].thread_elements()[e] * scale;")
    return edit(text, "  threadgroup float sst[SG][8][TB + 4];\n", "")


# "score direct" (CUDA-only, TT 1): S = Q . K^T in place of S^T = K . Q^T, so each lane's accumulator pair is already
# its row's scores (row fr, tokens fc, fc + 1) and the step's S^T -> S round trip through threadgroup memory (two
# stores, two loads and two SIMD-group barriers per lane and step, in the memory-instruction pipe that holds the
# partial) goes. q is loaded plain (the A fragment as it stands); K's words are marked as held in transposed storage,
# which on the tensor-core path is the B fragment of K^T with no movmatrix (metal_simdgroup.cuh). Metal's layout has
# no such free transpose, hence CUDA-only here. The ring's slot reuse still waits for the top-of-step barrier.
# 142 registers against 125 (nvcc 13 sm_90, `compile`; the operand swap alone, K through movmatrix, 143): q as the
# m16n8k16's A operand is held as eight 4-register quads with their zero rows, where as B it is sixteen single words.
# So 3 threadgroups per SM: measured at 384 threadgroups (about one wave of 396), where the first form of the ring,
# also past 128 registers, had its best partial (../matrix-partial-ring/). "diagnostic: no score round trip" (wrong
# outputs: S^T's accumulator read as if it were S, 124 registers) bounds what the round trip costs at 4 per SM.
# Measured on an H100 (../../h100-cuda/ring-gap/score-direct/): the round trip costs 0.7-2.3 us at N128k, nothing at
# N32k, and score direct lands with the kept ring; not adopted.
NO_ROUND_TRIP = spec("noroundtrip", source=without_round_trip(KEPT.source))
body = edit(KEPT.source, "metal::simdgroup_load(qt[s], qsh, DK, ulong2(8 * s, 0), true);",
            "metal::simdgroup_load(qt[s], qsh, DK, ulong2(8 * s, 0), false);")
body = edit(body, "        kb[h].thread_elements()[1] = word_hi<InT>(kw[h][s + 1]);\n      }\n",
            "        kb[h].thread_elements()[1] = word_hi<InT>(kw[h][s + 1]);\n"
            "        ka[h].transposed = kb[h].transposed = true;\n      }\n")
body = edit(body, "        simdgroup_multiply_accumulate_k16(st[0], ka[0], kb[0], qt[s], qt[s + 1]);\n",
            "        simdgroup_multiply_accumulate_k16(st[0], qt[s], qt[s + 1], ka[0], kb[0]);\n")
# With S in the lanes that use it, the two SIMD-group barriers around the sst exchange go too.
body = edit(without_round_trip(body), ISSUE + "    simdgroup_barrier(mem_flags::mem_threadgroup);\n", ISSUE)
body = edit(body, "    simdgroup_barrier(mem_flags::mem_threadgroup);  // the next step's writes wait for every lane's reads\n", "")
S_DIRECT = spec("sdirect", source=body)

# "q first": q's loads issued ahead of the ring's first copies (into registers, staged after them): the ncu samples
# of the kept partial (README) hold its warps at q's staging behind the prologue's copies, 3.8% of them.
Q_INDEX = "    const uint i = x / DK, s = (x % DK) / 8, c = x % 8, r = chunk * R + i;\n"
Q_DIMS = "    const uint d = (c / 2) * (2 * SK) + 2 * s + c % 2;\n"  # q's dim in the matrix partial's dims layout
Q_STAGE = ("  threadgroup InT qsh[8 * DK];\n"
           "  for (uint x = thread_index_in_threadgroup; x < 8 * DK; x += SG * 32) {\n"
           + Q_INDEX + Q_DIMS +
           "    qsh[x] = (i < R && r < ROWS) ? InT(q[((hk * G + r / N) * N + r % N) * DK + d]) : InT(0.0f);\n"
           "  }\n")
Q_LOADS = ("  constexpr uint QN = (8 * DK + SG * 32 - 1) / (SG * 32);\n"
           "  InT qv[QN];\n"
           "  for (uint n = 0; n < QN; ++n) {\n"
           "    const uint x = thread_index_in_threadgroup + n * SG * 32;\n"
           + Q_INDEX + Q_DIMS +
           "    qv[n] = (x < 8 * DK && i < R && r < ROWS) ? InT(q[((hk * G + r / N) * N + r % N) * DK + d])"
           " : InT(0.0f);\n"
           "  }\n")
Q_STORES = ("  threadgroup InT qsh[8 * DK];\n"
            "  for (uint n = 0; n < QN; ++n)\n"
            "    if (thread_index_in_threadgroup + n * SG * 32 < 8 * DK)"
            " qsh[thread_index_in_threadgroup + n * SG * 32] = qv[n];\n")
RING_START = "  // The ring (CUDA"
Q_FIRST_BODY = edit(edit(KEPT.source, RING_START, Q_LOADS + RING_START), Q_STAGE, Q_STORES)
Q_FIRST = spec("qfirst", source=Q_FIRST_BODY)
# "scale staged": the scale through threadgroup memory before q's barrier, so the loop's first use of it waits on
# nothing: in the kept partial its load (issued after the prologue's copies) shares a scoreboard with the loop's
# block-table reads, and the score's multiply waits on that read every step (17% of the ncu samples).
SCALE = ("  const float scale = geometry[0];\n",
         "  threadgroup float scale_sh[1];\n"
         "  if (thread_index_in_threadgroup == 0) scale_sh[0] = geometry[0];\n")
SCALE_USE = ("  threadgroup_barrier(mem_flags::mem_threadgroup);\n  metal::simdgroup_matrix<InT, 8, 8> qt[SK];\n",
             "  threadgroup_barrier(mem_flags::mem_threadgroup);\n  const float scale = scale_sh[0];\n"
             "  metal::simdgroup_matrix<InT, 8, 8> qt[SK];\n")
SCALE_STAGED = spec("scalesh", source=edit(edit(KEPT.source, *SCALE), *SCALE_USE))
BOTH = spec("qfirstscalesh", source=edit(edit(Q_FIRST_BODY, *SCALE), *SCALE_USE))

# "copies before reads": the ring as it was before its reads went ahead of its copies (ring_issue.metal, kept since
# the `bulk` call measured it: README): each step issues its copies for step + RING - 1 at its top, then waits for at
# most RING - 1 groups pending; a warp's ring reads then queue behind its own 8 copy instructions in the memory pipe.
COPIES_FIRST = spec("copiesfirst", source=launch._ring_source(dict(
    launch.RING_PIECES, issue="", fetch=ISSUE + edit(launch.RING_PIECES["fetch"], "async_copy_wait<RING - 2>();",
                                                     "async_copy_wait<RING - 1>();"))))

# "bulk copies": each step's 8 K and 8 V rows by 16 bulk copies (cp.async.bulk + an mbarrier per slot, sm_90), one
# row each, where the kept ring issues 8 cp.async of 16 bytes per lane: fewer instructions in the memory pipe that
# holds the partial (README). bulk/ holds its pieces (the prologue's comment says how its reads stay conflict-free);
# rows land 16 bytes further apart, so the ring takes 6% more shared memory (bulk_shared_bytes: 4 threadgroups still
# fit an SM at D128), and the dims' layout rotates each segment's words (q's staging and the output's write below).
BULK_DIR = Path(__file__).with_name("bulk")
BULK_PIECES = {name: (BULK_DIR / f"ring_{name}.metal").read_text() for name in ("prologue", "fetch", "osh")}
BULK_PIECES["issue"] = ""  # (its fetch issues at the step's top, before its wait: the order it was measured in)
BULK_BODY = edit(launch._ring_source(BULK_PIECES), Q_DIMS,
                 "    const uint d = (c / 2) * (2 * SK) + 2 * ((s + turn_of(c / 2)) % SK) + c % 2;\n")
BULK_BODY = edit(BULK_BODY, "osh[(sg * R + fr) * DV + seg * 2 * SV + 2 * j + e]",
                 "osh[(sg * R + fr) * DV + seg * 2 * SV + 2 * ((j + turn_of(seg)) % SV) + e]")
BULK = spec("bulk", source=BULK_BODY, header=KEPT.header + (BULK_DIR / "ring_bulk.h").read_text())


def bulk_shared_bytes(head_dim: int, ring: int) -> int:
    """The bulk ring's dynamic shared memory: rows 16 bytes further apart, then each slot's 8-byte mbarrier past
    the whole ring (ring_prologue.metal's ``bars``: outside the memory the combine's buffer reuses)."""
    return launch.SIMDGROUPS * ring * (2 * 8 * (head_dim * 2 + 16) + 8)


def bulk_banks() -> dict:
    """Per head dim: the most 16-byte loads of one quarter-warp's ring read that meet in one bank group but not at
    one address (1: conflict-free), and whether each lane's words are its segment's dims under the rotation that
    q's staging and the output take (lane (fr, seg) = (lane / 4, lane % 4): the CUDA fragment layout)."""
    found = {}
    for dk in (64, 128, 256):
        rc, seg_pieces = dk // 8, dk // 32
        pitch, worst, words_ok = rc + 1, 1, True
        turn = [8 * ((s * seg_pieces) // 8) for s in range(4)]
        for quarter in range(4):
            for j in range(seg_pieces):
                banks = {}
                for lane in range(8 * quarter, 8 * quarter + 8):
                    fr, s = lane // 4, lane % 4
                    piece = s * seg_pieces + (j + turn[s] // 4) % seg_pieces
                    at = fr * pitch + piece
                    banks.setdefault(at % 8, set()).add(at)
                    # slot j's word w is the segment's memory word 4 ((j + g) % SEG) + w, which must be dim word
                    # (4 j + w + turn) % SK: the permutation q's staging and the output's write use
                    words_ok &= all(4 * ((j + turn[s] // 4) % seg_pieces) + w == (4 * j + w + turn[s]) % (dk // 8)
                                    for w in range(4))
                worst = max(worst, max(len(a) for a in banks.values()))
        found[dk] = (worst, words_ok)
    return found


def use(kernel, simdgroups=4, target=512, slices=32, shared=None):
    def apply():
        launch.MATRIX_PARTIAL_RING = kernel
        launch.ring_shared_bytes = shared or KEPT_SHARED
        launch.SIMDGROUPS = simdgroups
        launch._partial_shape.cache_clear()  # (keyed on the shapes, not on the spec or SIMDGROUPS)
        paged.set_threadgroup_target(target)
        paged.set_merge(slices)
        paged.set_matrix_ring(3)
    return apply


VARIANTS = {"kept": use(KEPT), "no L2 policy": use(NO_POLICY), "S in two chains": use(TWO_CHAINS),
            "SG 8, 256 threadgroups": use(KEPT, 8, 256), "SG 2, 1024 threadgroups": use(KEPT, 2, 1024),
            "merge 16 slices": use(KEPT, slices=16), "diagnostic: no P.V products": use(NO_PV),
            "diagnostic: no products": use(NO_PRODUCTS), "q first": use(Q_FIRST), "scale staged": use(SCALE_STAGED),
            "q first, scale staged": use(BOTH), "copies before reads": use(COPIES_FIRST),
            "bulk copies": use(BULK, shared=bulk_shared_bytes), "score direct, 384 threadgroups": use(S_DIRECT, target=384),
            "kept, 384 threadgroups": use(KEPT, target=384), "diagnostic: no score round trip": use(NO_ROUND_TRIP)}
MEASURED = ("kept", "SG 8, 256 threadgroups", "SG 2, 1024 threadgroups", "merge 16 slices",
            "diagnostic: no P.V products", "diagnostic: no products")


def partial_batches(names) -> dict:
    """nvcc batches ("v<index>" -> [launch]) of each named variant's 32/8/D128 bf16 partial as the cuda arm would
    launch it (the kept geometry is put back after)."""
    from impl.kernels.launches import _paged_pair

    batches = {}
    try:
        for index, name in enumerate(names):
            VARIANTS[name]()
            batches[f"v{index}"] = _paged_pair("bfloat16", None, 32, 8, 1, 128, 128, 16, 300, arm="cuda")[:1]
    finally:
        VARIANTS["kept"]()
    return batches


def compile_each(names=None) -> None:
    """Every variant's 32/8/D128 bf16 partial as the cuda arm would launch it, through nvcc (impl.kernels.nvcc):
    registers per thread, and a failure where a body edit does not compile. 4 threadgroups per SM need <= 128."""
    import tempfile
    from pathlib import Path

    from impl.kernels.nvcc import compile_batches

    names = names or list(VARIANTS)
    batches = partial_batches(names)
    registers = {}
    with tempfile.TemporaryDirectory() as workdir:
        failures = compile_batches(Path(workdir), batches, registers)
    for name, (launch,) in zip(names, batches.values()):
        print(f"{name:32s} {registers.get(launch.cuda_function, '-')} registers, {launch.shared_memory} B ring")
    print("\n".join(failures) or "every variant compiles")
    for dk, (worst, words_ok) in bulk_banks().items():
        print(f"bulk copies, D{dk}: {worst}-way bank conflicts at most, words follow the rotation: {words_ok}")


def scoreboards(names, out_dir) -> None:
    """Each named variant's partial through nvcc and cuobjdump (the GPU machine has both): every SASS instruction
    that sets or waits on a scoreboard, with them (Volta-on control bits: bits 105-125 of an instruction hold its
    stall count, yield, write and read scoreboards, wait mask), into OUT_DIR/<variant>.sass.txt."""
    import re
    import subprocess
    from pathlib import Path

    from impl.kernels.nvcc import compile_batches

    out = Path(out_dir)
    assert not compile_batches(out, partial_batches(names))
    for index, name in enumerate(names):
        listing = subprocess.run(["cuobjdump", "-sass", str(out / f"v{index}.cubin")], capture_output=True,
                                 text=True, check=True).stdout.splitlines()
        rows = []
        for at, line in enumerate(listing):
            found = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;\s*/\* 0x[0-9a-f]+ \*/", line)
            if not found:
                continue
            control = int(re.search(r"/\* (0x[0-9a-f]+) \*/", listing[at + 1]).group(1), 16) >> 41
            write, read, wait = (control >> 5) & 7, (control >> 8) & 7, (control >> 11) & 0x3F
            tags = ([f"sets SB{write}"] if write != 7 else []) + ([f"reads free SB{read}"] if read != 7 else []) + \
                   ([f"waits SB{[b for b in range(6) if wait >> b & 1]}"] if wait else [])
            rows.append(f"{found.group(1)} {found.group(2):70s} {' '.join(tags)}")
        (out / f"{name.replace(' ', '_').replace(',', '')}.sass.txt").write_text("\n".join(rows) + "\n")


if sys.argv[1] == "compile":
    compile_each(sys.argv[2:])
    sys.exit(0)
if sys.argv[1] == "scoreboards":
    scoreboards(sys.argv[3:], sys.argv[2])
    sys.exit(0)
if sys.argv[1] == "sanitize":
    from parity.sanitize_ring import main
    VARIANTS[sys.argv[2]]()
    sys.exit(main())
calls, rounds, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
only = sys.argv[4:]
variants = {k: v for k, v in VARIANTS.items() if k in (only or MEASURED) or k == "kept"}
SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 32768)]  # the two lengths of the 32/8 target
out = sweep(SHAPES, variants, calls=calls, rounds=rounds, log=lambda line: print(line, flush=True))
with open(out_path, "w") as f:
    json.dump(out, f, indent=1)
