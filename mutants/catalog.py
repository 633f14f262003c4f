"""The catalog: realistic one-idea bugs in the kernels and the KV-cache state, each with its killers.

A ``Mutant`` is one bug a kernel or cache author really makes, written as
textual ``Substitution``\\ s (file, exact old text, new text) applied to a copy
of the tree. Every old text must occur EXACTLY ONCE in its file, else the
mutant is stale (an error: the catalog drifted from the code).

Kernel bugs are written once per implementation of the algorithm: in the
kernel body (``part="body"``, a ``.metal`` / ``.h`` file that metal and cuda both
compile) AND in the graph arm that mirrors it (``part="graph"``), so the graph
arm kills the mutant on any CPU and the compiled arms kill the same mutant
where a GPU is present. A body-only mutant could never die on CPU.

``tests`` are the pytest node ids expected to kill the mutant, small and fast
(the runner stops at the first failure). ``{arm}`` in a node id expands to each
arm the run covers (``graph`` on a CPU; ``graph`` and ``cuda`` on an NVIDIA
GPU with ``--device gpu``), so one entry names the kernel's gate on every arm.

A bug in a variant only one arm compiles (``KernelSpec.arms``: e.g. normalized
argmax's fused CUDA variant, whose lse mirrors MLX's CUDA logsumexp) has no
graph mirror: nothing the graph arm computes makes the same mistake. Such a
mutant names its ``arms`` (``("cuda",)``); a run whose arms do not include one
of them leaves it out and says so (``Report.left_out``), and ``{arm}`` expands
only to those arms. On a CPU it cannot die; the H200 runs
(``python -m mutants --device gpu --arm cuda``) must kill it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ARMS", "CATALOG", "GAPS", "PARTS", "Mutant", "Substitution", "by_name"]

PARTS = ("body", "graph", "code")  # kernel body string / graph arm / other Python
ARMS = ("graph", "metal", "cuda")  # impl.arms.ARMS (not imported: the catalog loads without MLX)


@dataclass(frozen=True)
class Substitution:
    """Replace ``old`` (which must occur exactly once in ``path``) by ``new``."""

    path: str  # relative to the repository root, "/"-separated
    old: str
    new: str
    part: str = "code"

    def __post_init__(self):
        if self.part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}, got {self.part!r}")
        if not self.old or self.old == self.new:
            raise ValueError(f"{self.path}: a substitution needs a non-empty old text that differs from the new")


@dataclass(frozen=True)
class Mutant:
    """One named bug: an idea, where it lives, its substitutions and the tests that must kill it."""

    name: str
    idea: str  # the bug, in words
    target: str  # the kernel or cache component it breaks
    substitutions: tuple[Substitution, ...]
    tests: tuple[str, ...]  # node ids, "{arm}" expanded per arm
    arms: tuple[str, ...] = ()  # the only arms that run the mutated code (module docstring); () = every arm

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"mutant name must be an identifier, got {self.name!r}")
        if not self.substitutions or not self.tests:
            raise ValueError(f"{self.name}: a mutant needs substitutions and killing tests")
        if not isinstance(self.arms, tuple) or not set(self.arms) <= set(ARMS):
            raise ValueError(f"{self.name}: arms must be a tuple of {ARMS} (empty: every arm), got {self.arms!r}")

    def runs_on(self, arms) -> bool:
        """Whether a run covering ``arms`` runs the mutated code (every run does when ``self.arms`` is empty)."""
        return not self.arms or bool(set(self.arms) & set(arms))

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.path for s in self.substitutions))

    @property
    def in_kernel_body(self) -> bool:
        """Whether the mutant changes a compiled kernel body (so the metal/cuda arms must kill it too)."""
        return any(s.part == "body" for s in self.substitutions)


def body(path: str, old: str, new: str) -> Substitution:
    return Substitution(path, old, new, "body")


def graph(path: str, old: str, new: str) -> Substitution:
    return Substitution(path, old, new, "graph")


def code(path: str, old: str, new: str) -> Substitution:
    return Substitution(path, old, new, "code")


# A kernel's files (impl/kernels/compile.py says how they are laid out): bodies, pieces and headers (.metal, .h)
# for part="body", the graph arm's Python for part="graph", the host code's for part="code".
PAGED_DIR, MULTI_DIR = "impl/paged_attention", "impl/multi_query"
PAGED_PARTIAL, PAGED_MERGE, PAGED_HEADER, PAGED_AFFINE_LOAD, PAGED_STRIDED_LOAD = (
    f"{PAGED_DIR}/{f}" for f in ("partial.metal", "merge.metal", "paged_attention.h", "load_affine.metal",
                                 "load_strided_affine.metal"))
PAGED_MATRIX = f"{PAGED_DIR}/partial_matrix.metal"
PAGED_RING_PROLOGUE = f"{PAGED_DIR}/ring_prologue.metal"
PAGED_RING_FETCH = f"{PAGED_DIR}/ring_fetch.metal"
PAGED_RING_GATE = "parity/test_paged_attention.py::test_dense_pool_ring[{arm}-%s-3]"
PAGED_GRAPH, PAGED_LAUNCH = f"{PAGED_DIR}/graph.py", f"{PAGED_DIR}/launch.py"
ARGMAX, ARGMAX_BODY, ARGMAX_HEADER, ARGMAX_FUSED_SCAN = (
    "impl/normalized_argmax.py", "impl/normalized_argmax.metal", "impl/normalized_argmax.h",
    "impl/normalized_argmax_fused_scan.metal")
KVQ4, KVQ4_BODY = "impl/kvq4_decode.py", "impl/kvq4_decode.metal"
MULTI_PARTIAL, MULTI_COMPUTE, MULTI_RING_STAGER, MULTI_MERGE, MULTI_HEADER = (
    f"{MULTI_DIR}/{f}" for f in ("partial.metal", "compute_block.metal", "ring_stager_loop.metal", "merge.metal",
                                 "multi_query.h"))
MULTI, MULTI_LAUNCH, MULTI_GRAPH = (f"{MULTI_DIR}/{f}" for f in ("__init__.py", "launch.py", "graph.py"))
BLOCK_TABLE = "impl/block_table.py"
MASKS = "impl/masks.py"
RECENT = "impl/recent_calls.py"
PERF_HARNESS = "perf/harness.py"
POOL, PAGED_KV, ROWS, VIEW, DENSE = (f"impl/kv/{m}.py" for m in ("pool", "paged", "rows", "view", "dense"))

PAGED_GATE = "parity/test_paged_attention.py::test_dense_pool[{arm}-%s]"
# The SIMT partial where the matrix partial takes a shape by default (16-bit pools, head dims multiples of 16 up to
# 128): a SIMT-body mutant's killer there (the graph arm skips it: test_dense_pool kills the graph mirror).
PAGED_SIMT_GATE = "parity/test_paged_attention.py::test_dense_pool_simt_partial[{arm}-%s]"
KVQ4_GATE = "parity/test_kvq4_decode.py::test_kvq4_decode[{arm}-seed-%s]"
KVQ4_DIRECT_GATE = "parity/test_kvq4_decode.py::test_kvq4_decode[{arm}-direct-%s]"
MULTI_GATE = "parity/test_multi_query.py::test_multi_query[{arm}-%s]"
FUSED_GATE = "parity/test_normalized_argmax.py::test_fused_variant_shifts_by_mlx_logsumexp[{arm}-%s]"

CATALOG: tuple[Mutant, ...] = (
    # --- direct paged attention ------------------------------------------------
    Mutant(
        "paged_causal_end_off_by_one",
        "the causal end excludes the query's own token: tokens < length - n + i instead of <=",
        "paged_attention",
        (body(PAGED_PARTIAL, "const uint end = min(uint(length - N + query + 1), last);",
              "const uint end = min(uint(length - N + query), last);"),
         graph(PAGED_GRAPH, "visible = tokens.reshape(1, 1, -1) <= (length - n + query)",
               "visible = tokens.reshape(1, 1, -1) < (length - n + query)")),
        (PAGED_GATE % "bfloat16-Hq8-Hkv8-Dk64-Dv64-bs16-len63-n1",
         PAGED_SIMT_GATE % "bfloat16-Hq8-Hkv8-Dk64-Dv64-bs16-len63-n1")),
    Mutant(
        "paged_gqa_head_map_modulo",
        "GQA maps query head hq to KV head hq % HK instead of hq / (HQ / HK)",
        "paged_attention",
        (body(PAGED_PARTIAL, "const uint hq = hk * G + r / N, query = r % N;",
              "const uint hq = (r / N) * HK + hk, query = r % N;"),
         graph(PAGED_GRAPH, "qf = qf.reshape(hk, group * n, dk)",
               "qf = qf.reshape(group, hk, n, dk).transpose(1, 0, 2, 3).reshape(hk, group * n, dk)"),
         graph(PAGED_GRAPH, "return out.reshape(1, hq, n, dv)",
               "return out.reshape(hk, group, n, dv).transpose(1, 0, 2, 3).reshape(1, hq, n, dv)")),
        (PAGED_GATE % "float32-Hq6-Hkv2-Dk80-Dv80-bs8-len97-n8",)),
    Mutant(
        "paged_merge_without_max_rescale",
        "the SIMD-group combine and the merge sum the partials' values and normalizers without rescaling each "
        "by exp(max_p - max)",
        "paged_attention",
        (body(PAGED_PARTIAL, "const float weight = exp(ms - top);", "const float weight = 1.0f;"),
         body(PAGED_MERGE, "const float weight = exp(top[k] - shift);", "const float weight = 1.0f;"),
         graph(PAGED_GRAPH, "rescale = mx.exp(maximum - overall)", "rescale = mx.ones_like(maximum)")),
        # several partitions on every arm: 600 tokens (the matrix partial's partitions hold >= 128, so 65 is one)
        (PAGED_GATE % "float16-Hq16-Hkv2-Dk128-Dv128-bs32-len600-n8",
         PAGED_SIMT_GATE % "float16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4")),
    Mutant(
        "paged_merge_reads_the_sum_as_the_max",
        "the merge reads each partition's max one float late in its packed row (DV + 1, the sum, instead of DV): "
        "the partitions are weighed by exp(sum_p - maximum)",
        "paged_attention",
        (body(PAGED_MERGE, "const float m = parts[base + DV];", "const float m = parts[base + DV + 1];"),),
        # several partitions each (13, 10 and 5): with one, any weight cancels between values and sums
        ("parity/test_paged_attention.py::test_merge_matches_float64_oracle[{arm}-bfloat16-Hq8-n2-count13-buffer16-"
         "Dv42-rising]",
         PAGED_GATE % "bfloat16-Hq16-Hkv2-Dk128-Dv128-bs32-len600-n8",
         KVQ4_DIRECT_GATE % "bfloat16-H16-KVH8-N2049-block512-contiguous"),
        arms=("metal", "cuda")),  # the graph arm merges in MLX ops, with no packed buffer to misread
    Mutant(
        "paged_unpack_shift_hardcoded_for_4_bits",
        "dequantize-on-load shifts code k of a word by 4*k whatever BITS is: 8-bit K/V decode garbage",
        "paged_attention_q8",
        (body(PAGED_AFFINE_LOAD, "float(InT(fma(s, float((word >> (e * BITS))",
              "float(InT(fma(s, float((word >> (e * 4))"),
         graph(PAGED_GRAPH, "shifts = mx.arange(pack, dtype=mx.uint32) * bits",
               "shifts = mx.arange(pack, dtype=mx.uint32) * 4")),
        ("parity/test_paged_attention.py::test_quantized_pool[{arm}-bfloat16-q8g64-Hq4-Hkv1-Dk256-Dv256-bs32-len130-n1]",)),
    Mutant(
        "paged_block_table_ignored",
        "token t is read from physical block t / BS instead of block_table[t / BS]",
        "paged_attention",
        (body(PAGED_PARTIAL, "block[k] = STRIDED ? 0 : table[min(t, stop - 1) / BS];  // past the end",
              "block[k] = STRIDED ? 0 : min(t, stop - 1) / BS;  // past the end"),
         body(PAGED_PARTIAL, "if (!STRIDED && t0 + SG * TB < stop) block[k] = table[min(t, stop - 1) / BS];",
              "if (!STRIDED && t0 + SG * TB < stop) block[k] = min(t, stop - 1) / BS;"),
         graph(PAGED_GRAPH, "physical, slot = table[live // bs], live % bs", "physical, slot = live // bs, live % bs")),
        ("properties/test_paged_attention_props.py::test_block_layout_is_invisible[{arm}]",)),
    Mutant(
        "paged_last_block_treated_as_full",
        "the causal end uses the length rounded up to whole blocks: the unused slots of the last block are read",
        "paged_attention",
        (body(PAGED_PARTIAL, "const uint end = min(uint(length - N + query + 1), last);",
              "const uint end = min(uint((length + BS - 1) / BS * BS - N + query + 1), first + span);"),
         graph(PAGED_GRAPH, "live = mx.minimum(tokens, length - 1)",
               "live = mx.minimum(tokens, -(-length // bs) * bs - 1)"),
         graph(PAGED_GRAPH, "visible = tokens.reshape(1, 1, -1) <= (length - n + query)",
               "visible = tokens.reshape(1, 1, -1) <= (-(-length // bs) * bs - n + query)")),
        ("properties/test_paged_attention_props.py::test_slots_past_length_are_never_read[{arm}]",)),
    Mutant(
        "paged_softmax_scale_dropped",
        "the scores are not multiplied by the softmax scale (as if the caller had folded it into q)",
        "paged_attention",
        (body(PAGED_PARTIAL, "float(q[(hq * N + query) * DK + d]) * geometry[0]",
              "float(q[(hq * N + query) * DK + d])"),
         graph(PAGED_GRAPH, "qf = q.astype(mx.float32) * mx.array(scale, dtype=mx.float32)",
               "qf = q.astype(mx.float32)")),
        ("parity/test_decode_e2e.py::test_direct_path_is_kl_close_to_dense[{arm}-float32-p6-bs4]",)),

    Mutant(
        "paged_key_lanes_ignore_half_rows",
        "the K loads keep the whole-SIMD-group lane map (j * 32 + lane) when 16 lanes read a row: q and K "
        "dims disagree, half of the tokens read past the row",
        "paged_attention",
        (body(PAGED_PARTIAL, "const uint d0 = (j * LPR + sub) * VK;", "const uint d0 = (j * 32 + lane) * VK;"),
         graph(PAGED_GRAPH, "k = k.reshape(*k.shape[:-1], steps, lanes, per_lane)",
               "k = k.reshape(*k.shape[:-1], steps, per_lane, lanes).swapaxes(-1, -2)")),
        ("parity/test_paged_attention.py::test_dense_pool_half_simdgroup_rows[{arm}-bfloat16-Hq16-Hkv2-Dk128-Dv128-bs32-len600-n8]",)),

    Mutant(
        "paged_bf16_pair_halves_swapped",
        "the word loads of bfloat16 rows widen a 32-bit word's high half as the even element: each pair of "
        "dims of K and V is swapped",
        "paged_attention",
        (body(PAGED_HEADER, "return Wide4{{bf16_lo_as_float(x.x), bf16_hi_as_float(x.x),",
              "return Wide4{{bf16_hi_as_float(x.x), bf16_lo_as_float(x.x),"),
         graph(PAGED_GRAPH, "return rows.astype(mx.float32)",
               "return rows.reshape(*rows.shape[:-1], -1, 2)[..., ::-1].reshape(rows.shape).astype(mx.float32)")),
        (PAGED_GATE % "bfloat16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4",
         PAGED_SIMT_GATE % "bfloat16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4")),

    # --- direct paged attention: the matrix partial (partial_matrix.metal) ------------------------
    # Compiled arms only: the graph arm computes one algorithm for both partials, and its mirrors of these ideas
    # are the SIMT mutants above. The killers are test_dense_pool's 16-bit cases, which the matrix partial serves.
    Mutant(
        "paged_matrix_q_in_natural_dims",
        "q's tile is loaded in the natural dim order while K's words hold the permuted one (a lane's pairs of every "
        "tile one contiguous run): each score sums q_d * k_pi(d)",
        "paged_attention",
        (body(PAGED_MATRIX, "const uint d = (c / 2) * (2 * SK) + 2 * s + c % 2;", "const uint d = 8 * s + c;"),),
        (PAGED_GATE % "bfloat16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4",),
        arms=("metal", "cuda")),
    Mutant(
        "paged_matrix_output_in_natural_dims",
        "the SIMD groups' outputs go back to threadgroup memory in the tiles' order, not through the dims' "
        "permutation: each output row holds V's dims permuted",
        "paged_attention",
        (body(PAGED_MATRIX, "osh[(sg * R + fr) * DV + seg * 2 * SV + 2 * j + e]", "osh[(sg * R + fr) * DV + 8 * j + fc + e]"),),
        (PAGED_GATE % "bfloat16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4",),
        arms=("metal", "cuda")),
    Mutant(
        "paged_matrix_causal_end_off_by_one",
        "a tile row's causal end excludes the query's own token: tokens < length - n + i instead of <=",
        "paged_attention",
        (body(PAGED_MATRIX, "min(uint(length - N + r % N + 1), last)", "min(uint(length - N + r % N), last)"),),
        (PAGED_GATE % "bfloat16-Hq8-Hkv8-Dk64-Dv64-bs16-len63-n1",),
        arms=("metal", "cuda")),
    Mutant(
        "paged_matrix_rows_share_the_last_limit",
        "every tile row is masked at the threadgroup's last visible token (stop), not at its own causal limit: "
        "query row i < n - 1 sees the tokens after its own",
        "paged_attention",
        (body(PAGED_MATRIX, "x[h][e] = t0 + 8 * h + fc + e < lim ? v : -INFINITY;",
              "x[h][e] = t0 + 8 * h + fc + e < stop ? v : -INFINITY;"),),
        (PAGED_GATE % "float16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4",),
        arms=("metal", "cuda")),
    Mutant(
        "paged_matrix_rescale_skipped",
        "O is never rescaled when a row's running max moves: earlier tokens keep weights relative to a stale max",
        "paged_attention",
        (body(PAGED_MATRIX, "if (!simd_all(factor == 1.0f))", "if (false)"),),
        (PAGED_GATE % "bfloat16-Hq16-Hkv2-Dk128-Dv128-bs32-len600-n8",),
        arms=("metal", "cuda")),
    Mutant(
        "paged_matrix_combine_without_max_rescale",
        "the SIMD groups' states combine without rescaling each by exp(max_s - max)",
        "paged_attention",
        (body(PAGED_MATRIX, "const float weight = exp(ms - top);", "const float weight = 1.0f;"),),
        (PAGED_GATE % "bfloat16-Hq16-Hkv2-Dk128-Dv128-bs32-len600-n8",),
        arms=("metal", "cuda")),
    Mutant(
        "paged_matrix_next_block_not_read",
        "the block-table entries are read once, for a SIMD group's first step: its later steps read the rows at "
        "the slots of its first blocks",
        "paged_attention",
        (body(PAGED_MATRIX, "for (uint h = 0; h < TT; ++h) block[h] = table[min(t1 + 8 * h + fr, stop - 1) / BS];",
              "for (uint h = 0; h < TT; ++h) block[h] = block[h];"),),
        # The register fetch's line: on CUDA a D128 pool takes the ring (launch.MATRIX_RING), D80 the register fetch.
        (PAGED_GATE % "bfloat16-Hq16-Hkv2-Dk128-Dv128-bs32-len600-n8",
         PAGED_GATE % "bfloat16-Hq6-Hkv2-Dk80-Dv80-bs8-len97-n8"),
        arms=("metal", "cuda")),
    Mutant(
        "paged_matrix_key_pair_halves_duplicated",
        "a K tile takes its word's high half for both elements of a lane's pair: every even dim of K reads as the odd",
        "paged_attention",
        (body(PAGED_MATRIX, "ka[h].thread_elements()[0] = word_lo<InT>(kw[h][s]);",
              "ka[h].thread_elements()[0] = word_hi<InT>(kw[h][s]);"),),
        (PAGED_GATE % "float16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4",),
        arms=("metal", "cuda")),

    # --- direct paged attention: the matrix partial's ring fetch (CUDA only: ring_*.metal) ---------
    # Killed by test_dense_pool_ring, which runs the ring (3 slots) against the oracle and the register fetch.
    Mutant(
        "paged_ring_read_unswizzled",
        "a lane reads its K pieces back from the ring at their unswizzled places: the copies stored piece p of row r "
        "at p ^ 2 * bit3(p) ^ bit0(r), so odd rows and upper half-rows read a neighbour's words",
        "paged_attention",
        (body(PAGED_RING_FETCH, "const uint4 x = ring_load16(slot + (read_at + (j ^ flip)) * 16);",
              "const uint4 x = ring_load16(slot + (read_at + j) * 16);"),),
        (PAGED_RING_GATE % "bfloat16-Hq8-Hkv8-Dk128-Dv128-bs16-len65-n4",),
        arms=("cuda",)),
    Mutant(
        "paged_ring_tail_v_unclamped",
        "the last, partial step reads V of its rows past the end (whatever follows in the block, NaN in the gates' "
        "pools) instead of the last live row: weight 0 times NaN is NaN",
        "paged_attention",
        (body(PAGED_RING_FETCH, "const uint vr = min(fr, stop - 1 - t0),", "const uint vr = fr,"),),
        (PAGED_RING_GATE % "bfloat16-Hq8-Hkv8-Dk128-Dv128-bs8-len1031-n1",),
        arms=("cuda",)),
    Mutant(
        "paged_ring_copies_into_the_next_slot",
        "a step's copies go into the slot after its own: the step reads a slot holding another step's rows (or none)",
        "paged_attention",
        (body(PAGED_RING_PROLOGUE, "const uint at = ring_shared + ((a / (SG * TB)) % RING) * (2 * PLANE * 16);",
              "const uint at = ring_shared + ((a / (SG * TB) + 1) % RING) * (2 * PLANE * 16);"),),
        (PAGED_RING_GATE % "bfloat16-Hq16-Hkv2-Dk128-Dv128-bs32-len600-n8",),
        arms=("cuda",)),

    # --- normalized argmax -----------------------------------------------------
    Mutant(
        "argmax_ties_to_highest_id",
        "the threadgroup keeps the highest id among the threads tied on the best score instead of the lowest",
        "normalized_argmax",
        (body(ARGMAX_BODY, "  id = simd_min(id);\n", "  id = simd_max(id == 0xffffffffu ? 0u : id);\n"),
         body(ARGMAX_BODY, "id = simd_min(lane < THREADS / 32 ? ids[lane] : 0xffffffffu);",
              "id = simd_max(lane < THREADS / 32 ? ids[lane] : 0u);"),
         graph(ARGMAX, "winner = ids.min(axis=(1, 2))", "winner = mx.where(ids == NONE, 0, ids).max(axis=(1, 2))")),
        ("parity/test_normalized_argmax.py::test_normalized_argmax[{arm}-bfloat16-1025]",)),
    Mutant(
        "argmax_nan_not_minus_inf",
        "a NaN score wins (native argmax's rule) instead of counting as -inf",
        "normalized_argmax",
        (body(ARGMAX_BODY, "mine = mine > -INFINITY ? mine : -INFINITY;", "mine = isnan(mine) ? INFINITY : mine;"),
         graph(ARGMAX, "mine = mx.where(mine > -mx.inf, mine, -mx.inf)", "mine = mx.where(mx.isnan(mine), mx.inf, mine)")),
        ("parity/test_normalized_argmax.py::test_normalized_argmax[{arm}-bfloat16-1025]",)),
    Mutant(
        "argmax_skips_dtype_rounding",
        "a thread's best score is its largest logit - lse in float32, not rounded to the logits' dtype",
        "normalized_argmax",
        (body(ARGMAX_BODY, "float mine = float(T(top - shift));", "float mine = top - shift;"),
         graph(ARGMAX, "mine = score(top)", "mine = top.astype(mx.float32) - shift.astype(mx.float32)")),
        ("parity/test_normalized_argmax.py::test_rounding_tie_takes_the_lower_id[{arm}-bfloat16]",)),
    Mutant(
        "argmax_skips_the_rescan",
        "a thread answers its largest logit's first id; an earlier id of it whose logit is smaller but rounds to the "
        "same score is looked for only on an exact tie (which its strict > never keeps)",
        "normalized_argmax",
        (body(ARGMAX_BODY, "if (float(T(before - shift)) == best) {", "if (before == top) {"),
         graph(ARGMAX, "rescan = score(before) == best", "rescan = before == top")),
        ("parity/test_normalized_argmax.py::test_normalized_argmax[{arm}-bfloat16-32000]",)),
    Mutant(
        "argmax_row_end_one_short",
        "the element-wise read stops one column before the row's end: the last column is never a candidate",
        "normalized_argmax",
        (body(ARGMAX_HEADER, "c.v[e] = i < V ? float(x[i]) : -INFINITY;",
              "c.v[e] = i < V - 1u ? float(x[i]) : -INFINITY;"),
         graph(ARGMAX, "raw = mx.pad(raw, [(0, 0), (0, rounds * threads * CHUNK - vocab)]",
               "raw = mx.pad(raw[:, :vocab - 1], [(0, 0), (0, rounds * threads * CHUNK - vocab + 1)]")),
        ("parity/test_normalized_argmax.py::test_normalized_argmax[{arm}-float32-1025]",)),
    Mutant(
        "argmax_small_row_pads_with_zero",
        "a row of fewer than 8 logits (Metal's constant space: its own element loop) reads the columns past the row's "
        "end as 0, not -inf: on a row of negative logits a column that does not exist wins",
        "normalized_argmax",
        (body(ARGMAX_HEADER, "c.v[e] = i >= V ? -INFINITY : float(x[i]);", "c.v[e] = i >= V ? 0.0f : float(x[i]);"),
         graph(ARGMAX, "(0, rounds * threads * CHUNK - vocab)], constant_values=-mx.inf)",
               "(0, rounds * threads * CHUNK - vocab)], constant_values=0.0)")),
        ("parity/test_small_inputs.py::test_normalized_argmax_small_logits[{arm}-float32-1x5-all_negative]",
         "parity/test_small_inputs.py::test_normalized_argmax_small_logits[{arm}-bfloat16-2x3-all_negative]")),
    Mutant(
        "argmax_no_score_returns_sentinel",
        "a row with no score above -inf (every score NaN or -inf) returns the start id 0xffffffff instead of 0",
        "normalized_argmax",
        (body(ARGMAX_BODY, "out[row] = id == 0xffffffffu ? 0u : id;", "out[row] = id;"),
         graph(ARGMAX, "out = mx.where(winner == NONE, 0, winner)", "out = winner")),
        ("properties/test_normalized_argmax_props.py::test_matches_the_contract_oracle[{arm}]",)),

    # normalized argmax's fused variant (CUDA only: no graph mirror; module docstring)
    Mutant(
        "argmax_fused_lse_sums_lanes_upward",
        "the fused variant's warp sum of the normalizer runs its butterfly upward (xor 1 .. 16) instead of MLX's "
        "16 .. 1: the same sum in another order, so its lse is no longer MLX's to the last bit",
        "normalized_argmax",
        (body(ARGMAX_FUSED_SCAN, "  normalizer = normalizer * __expf(prevmax - maxval);\n"
                      "  for (int m = 16; m > 0; m >>= 1) normalizer = normalizer + __shfl_xor_sync(0xffffffffu, normalizer, m);\n"
                      "  threadgroup float warp_max",
              "  normalizer = normalizer * __expf(prevmax - maxval);\n"
              "  for (int m = 1; m < 32; m <<= 1) normalizer = normalizer + __shfl_xor_sync(0xffffffffu, normalizer, m);\n"
              "  threadgroup float warp_max"),),
        (FUSED_GATE % "float32-1000", FUSED_GATE % "float32-129", FUSED_GATE % "float32-151936"),
        arms=("cuda",)),
    Mutant(
        "argmax_fused_lse_misses_the_rescale",
        "the fused variant's online normalizer is not rescaled when a round raises the thread's max",
        "normalized_argmax",
        (body(ARGMAX_FUSED_SCAN, "      normalizer = normalizer * __expf(prevmax - maxval);\n", ""),),
        # Not V = 4100: its second round is thread 0's alone, so one thread's partial sum of 1024 is off, below a
        # bfloat16 lse's rounding (the mutant survived the cuda arm there on the H200). At 8 and 38 rounds the max
        # moves in most threads: a NumPy model of the online sum puts the mutant's lse 1.1-2.6 off on 54-56 of 62
        # rows, and the cuda arm kills it at V = 32000 (records/h200-cuda/mutants/argmax.txt).
        (FUSED_GATE % "bfloat16-32000", FUSED_GATE % "float32-151936"),
        arms=("cuda",)),
    Mutant(
        "argmax_fused_lse_of_one_warp",
        "the fused variant skips the reduction across warps: each warp shifts by its own columns' lse (warp 0's is "
        "written out)",
        "normalized_argmax",
        (body(ARGMAX_FUSED_SCAN, "maxval = lane < THREADS / 32 ? warp_max[lane] : __int_as_float(0xff7fffff);",
              "maxval = warp_max[simd];"),
         body(ARGMAX_FUSED_SCAN, "normalizer = lane < THREADS / 32 ? warp_normalizer[lane] : 0.0f;",
              "normalizer = warp_normalizer[simd];")),
        (FUSED_GATE % "bfloat16-32000",),
        arms=("cuda",)),
    Mutant(
        "argmax_fused_scan_forgets_before",
        "the fused variant's scan does not keep the largest logit before a thread's top: a rounding tie inside one "
        "thread answers the top's id",
        "normalized_argmax",
        (body(ARGMAX_FUSED_SCAN, "{ before = top; top = c[u].v[e]; topId = 4u * ((r0 + u) * THREADS + tid) + e; }",
              "{ top = c[u].v[e]; topId = 4u * ((r0 + u) * THREADS + tid) + e; }"),),
        ("parity/test_normalized_argmax.py::test_normalized_argmax[{arm}-bfloat16-32000]",),
        arms=("cuda",)),

    # --- kvq4 decode ------------------------------------------------------------
    Mutant(
        "kvq4_scale_bias_swapped",
        "dequantize computes bias * code + scale instead of scale * code + bias",
        "kvq4_decode",
        (body(KVQ4_BODY, "kr[i] = metal::fma(kscale, float((kword >> (4u * i)) & 15u), kbias);",
              "kr[i] = metal::fma(kbias, float((kword >> (4u * i)) & 15u), kscale);"),
         body(KVQ4_BODY, "vr[i] = metal::fma(vscale, float((vword >> (4u * i)) & 15u), vbias);",
              "vr[i] = metal::fma(vbias, float((vword >> (4u * i)) & 15u), vscale);"),
         graph(KVQ4, "return scales[..., None] * codes + biases[..., None]",
               "return biases[..., None] * codes + scales[..., None]")),
        (KVQ4_GATE % "bfloat16-H4-KVH2-N97-block64-contiguous",)),
    Mutant(
        "kvq4_nibble_order_reversed",
        "dim i of a packed word is read from the high nibble down (bits 28 - 4i) instead of bits 4i",
        "kvq4_decode",
        (body(KVQ4_BODY, "(kword >> (4u * i))", "(kword >> (28u - 4u * i))"),
         body(KVQ4_BODY, "(vword >> (4u * i))", "(vword >> (28u - 4u * i))"),
         graph(KVQ4, "shifts = mx.arange(8, dtype=mx.uint32) * 4", "shifts = 28 - mx.arange(8, dtype=mx.uint32) * 4")),
        (KVQ4_GATE % "float32-H12-KVH2-N301-block100-window",)),
    Mutant(
        "kvq4_wrong_scale_group",
        "a lane reads the scale/bias of group lane % 4 instead of its own 64-dim group lane / 8",
        "kvq4_decode",
        (body(KVQ4_BODY, "const uint g = lane / 8u;", "const uint g = lane % 4u;"),
         graph(KVQ4, "lane_group = mx.arange(SIMD) // (GROUP_SIZE // 8)", "lane_group = mx.arange(SIMD) % GROUPS")),
        (KVQ4_GATE % "float32-H4-KVH2-N97-block64-contiguous",)),
    Mutant(
        "kvq4_combine_without_max_rescale",
        "the sub-chunk combine and the block merge add partials without rescaling each to the common max",
        "kvq4_decode",
        (body(KVQ4_BODY, "const float w = metal::exp(ms - gmax);", "const float w = 1.0f;"),
         body(MULTI_MERGE, "w = metal::exp(ms - next);", "w = 1.0f;"),
         graph(KVQ4, "w = mx.where(m == -mx.inf, 0.0, mx.exp(m - top))", "w = mx.where(m == -mx.inf, 0.0, 1.0)")),
        (KVQ4_GATE % "bfloat16-H16-KVH2-N1000-block256-heads",)),
    Mutant(
        "kvq4_accumulator_not_rescaled",
        "the online softmax rescales the running sum l but not the accumulator o when the max grows",
        "kvq4_decode",
        (body(KVQ4_BODY, "o[j][i] = metal::fma(o[j][i], factor, e * vr[i]);", "o[j][i] = o[j][i] + e * vr[i];"),
         graph(KVQ4, "o * factor[..., None] + e[..., None] * vi", "o + e[..., None] * vi")),
        ("properties/test_kvq4_decode_props.py::test_matches_float64_oracle[{arm}-seed]",)),
    Mutant(
        "kvq4_gqa_head_map_modulo",
        "GQA maps query head h to KV head h % KVH instead of h / REP",
        "kvq4_decode",
        (body(KVQ4_BODY, "qv[j][i] = float(q[(hk * (uint)REP + hg * HPG + j) * (uint)D + lane * 8u + i]);",
              "qv[j][i] = float(q[((hg * HPG + j) * (uint)KVH + hk) * (uint)D + lane * 8u + i]);"),
         # the seed body's merge is multi-query's (one query row): its output head map, the same way
         body(MULTI_MERGE, "const ulong at = ((ulong)(hk * (uint)REP + rr) * (uint)L + qi) * (uint)D + d;",
              "const ulong at = ((ulong)(rr * (uint)KVH + hk) * (uint)L + qi) * (uint)D + d;"),
         graph(KVQ4, "q = qs.astype(mx.float32).reshape(kvh, rep, 1, SIMD, 8)",
               "q = qs.astype(mx.float32).reshape(rep, kvh, 1, SIMD, 8).transpose(1, 0, 2, 3, 4)"),
         graph(KVQ4, "return out.reshape(1, h, 1, HEAD_DIM)", "return out.transpose(1, 0, 2).reshape(1, h, 1, HEAD_DIM)")),
        ("properties/test_kvq4_decode_props.py::test_kv_heads_serve_their_query_heads[{arm}-seed]",)),

    Mutant(
        "kvq4_direct_scale_bias_swapped",
        "the direct body's strided (kvq4) load dequantizes as bias * code + scale instead of scale * code + bias",
        "kvq4_decode",
        (body(PAGED_STRIDED_LOAD, "= fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b);",
              "= fma(b, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), s);"),
         graph(PAGED_GRAPH, "values = scales * codes + biases", "values = biases * codes + scales")),
        (KVQ4_DIRECT_GATE % "bfloat16-H4-KVH2-N97-block64-contiguous",)),

    # --- multi-query causal decode ----------------------------------------------
    Mutant(
        "multi_query_causal_limit_off_by_one",
        "row i sees keys <= N - L + i + 1: one key of the future",
        "multi_query",
        (body(MULTI_COMPUTE, "key >= k1 || key > limit[t]) v = -INFINITY;",
              "key >= k1 || key > limit[t] + 1u) v = -INFINITY;"),
         graph(MULTI_GRAPH, "(key[None, :, b, None, :] <= limit[None])",
               "(key[None, :, b, None, :] <= limit[None] + 1)")),
        ("properties/test_multi_query_props.py::test_rows_never_see_later_keys[{arm}]",)),
    Mutant(
        "multi_query_tile_rows_transposed",
        "the partial reads tile row j as (head r = j % REP, query i = j / REP) while the merge writes it back as "
        "(j / L, j % L)",
        "multi_query",
        (body(MULTI_PARTIAL, "const uint rr = rowOk ? row / (uint)L : 0u, qi = rowOk ? row % (uint)L : 0u;",
              "const uint rr = rowOk ? row % (uint)REP : 0u, qi = rowOk ? row / (uint)REP : 0u;"),
         graph(MULTI_GRAPH, "qf = _half(qs.astype(mx.float32)).reshape(kvh, 1, nq, d)",
               "qf = _half(qs.astype(mx.float32)).reshape(kvh, rep, L, d).transpose(0, 2, 1, 3).reshape(kvh, 1, nq, d)"),
         graph(MULTI_GRAPH, "qi = mx.arange(nq) % L", "qi = mx.arange(nq) // rep")),
        (MULTI_GATE % "bfloat16-H4-KVH2-L8-N8-D64-contiguous",)),
    Mutant(
        "multi_query_merge_without_max_rescale",
        "the split merge adds partials without rescaling each by exp(m_s - max)",
        "multi_query",
        (body(MULTI_MERGE, "w = metal::exp(ms - next);", "w = 1.0f;"),
         graph(MULTI_GRAPH, "weight = mx.where(m == -mx.inf, 0.0, mx.exp(m - top))",
               "weight = mx.where(m == -mx.inf, 0.0, 1.0)")),
        ("properties/test_multi_query_props.py::test_fully_masked_splits_are_skipped[{arm}-3]",)),
    Mutant(
        "multi_query_second_tile_masked_as_first",
        "a SIMD group holding two 8-row tiles masks the second tile's rows with the first tile's causal limits",
        "multi_query",
        (body(MULTI_COMPUTE, "if (!rowOks[t] || key >= k1 || key > limit[t])",
              "if (!rowOks[t] || key >= k1 || key > limit[0])"),
         graph(MULTI_GRAPH, "limit = (n - L + qi).reshape(1, nq, 1)",
               "limit = (n - L + qi[(mx.arange(nq) // 16) * 16 + mx.arange(nq) % 8]).reshape(1, nq, 1)")),
        (MULTI_GATE % "bfloat16-H40-KVH4-L5-N300-D80-splits37-contiguous",)),
    Mutant(
        "multi_query_scale_not_folded",
        "the softmax scale, folded into the kernel's q load, is dropped: the scores are q . k unscaled",
        "multi_query",
        (body(MULTI_PARTIAL, "const float qscale = float(scale[0]);", "const float qscale = 1.0f;"),
         graph(MULTI, "return _graph(q * _scale_array(scale, q.dtype), keys, values, splits)",
               "return _graph(q, keys, values, splits)")),
        (MULTI_GATE % "bfloat16-H4-KVH2-L8-N8-D64-contiguous",)),
    Mutant(
        "multi_query_split_length_floored",
        "keys per split rounded down (N / splits): the last N mod splits keys belong to no split",
        "multi_query",
        (body(MULTI_PARTIAL, "const uint per = (n + splits - 1u) / splits;", "const uint per = n / splits;"),
         graph(MULTI_GRAPH, "per = -(-n // splits)", "per = n // splits")),
        (MULTI_GATE % "bfloat16-H12-KVH2-L5-N300-D80-splits37-contiguous",)),
    Mutant(
        "multi_query_accumulator_not_rescaled",
        "the online softmax rescales the running sum l but not the accumulator O when the max grows",
        "multi_query",
        (body(MULTI_COMPUTE, "              o[t][f].thread_elements()[0] *= corr;\n              o[t][f].thread_elements()[1] *= corr;\n",
               ""),
         graph(MULTI_GRAPH, "o = o * corr[..., None] + _half(w) @ v[:, :, b]", "o = o + _half(w) @ v[:, :, b]")),
        (MULTI_GATE % "float32-H8-KVH1-L4-N257-D256-heads",)),
    Mutant(
        "multi_query_tiles_read_the_buffer_being_staged",
        "the two-stage partial (CUDA) computes block i from the buffer its stagers are filling with block i + 1 "
        "(one stage has one buffer: the graph arm mirrors the effect, block i's scores from block i + 1's keys)",
        "multi_query",
        (body(MULTI_COMPUTE, "const THREADGROUP_MEM half* kc = kt + (step % (uint)STAGES) * (uint)(BK * KS);",
              "const THREADGROUP_MEM half* kc = kt + (it % (uint)STAGES) * (uint)(BK * KS);"),
         graph(MULTI_GRAPH, "s = qf @ k[:, :, b].swapaxes(-1, -2)",
               "s = qf @ k[:, :, min(b + 1, blocks - 1)].swapaxes(-1, -2)")),
        (MULTI_GATE % "bfloat16-H32-KVH8-L8-N4096-D128-slice",)),
    Mutant(
        "multi_query_ring_converts_the_slot_being_filled",
        "the ring partial's stagers (CUDA) convert block i from the slot their cp.async copies of block i + 1 are "
        "filling (the graph arm mirrors the effect, block i's scores from block i + 1's keys)",
        "multi_query",
        (body(MULTI_RING_STAGER, "const T* const slot = raw + (b % (uint)RING) * (uint)(2 * BK * D);",
              "const T* const slot = raw + ((b + 1u) % (uint)RING) * (uint)(2 * BK * D);"),
         graph(MULTI_GRAPH, "s = qf @ k[:, :, b].swapaxes(-1, -2)",
               "s = qf @ k[:, :, min(b + 1, blocks - 1)].swapaxes(-1, -2)")),
        (MULTI_GATE % "bfloat16-H32-KVH8-L8-N4096-D128-slice",)),  # the ring is CUDA's default at NQ 32 / D 128
    Mutant(
        "multi_query_ring_packs_pairs_high_first",
        "the ring partial's conversion (CUDA) packs a bfloat16 word's two elements high one first: dims 8i and "
        "8i + 1 of every K and V row trade places (the graph arm mirrors the effect on its rows)",
        "multi_query",
        (body(MULTI_HEADER, "const uint4 h = make_uint4(half2_bits(bf16_lo_as_float(w.x), bf16_hi_as_float(w.x)),",
              "const uint4 h = make_uint4(half2_bits(bf16_hi_as_float(w.x), bf16_lo_as_float(w.x)),"),
         graph(MULTI_GRAPH, "    gathered = mx.where(live, key, 0).reshape(-1)\n",
               "    gathered = mx.where(live, key, 0).reshape(-1)\n"
               "    swap = mx.array([i ^ 1 if i % 8 < 2 else i for i in range(d)])\n"
               "    keys, values = keys[..., swap], values[..., swap]\n")),
        (MULTI_GATE % "bfloat16-H32-KVH8-L8-N4096-D128-slice",)),  # the ring is CUDA's default at NQ 32 / D 128
    Mutant(
        "multi_query_reads_q_as_contiguous",
        "the partial indexes q as if it were contiguous [1, H, L, D] instead of through q_strides: a view of q (a "
        "decode step's transposed [1, L, H, D], a head slice) reads other heads' and rows' values",
        "multi_query",
        (body(MULTI_PARTIAL, "const auto qp = q + (ulong)(hk * (uint)REP + rr) * (ulong)q_strides[1] + (ulong)qi * "
                     "(ulong)q_strides[2];",
              "const auto qp = q + ((ulong)(hk * (uint)REP + rr) * (uint)L + qi) * (uint)D;"),
         body(MULTI_PARTIAL, "const ulong qds = (ulong)q_strides[3];", "const ulong qds = 1;")),
        ("parity/test_multi_query.py::test_query_views_are_read_through_strides[{arm}-bfloat16-H32-KVH8-L8-N1000-"
         "D128-decode]",),
        arms=("metal", "cuda")),  # the graph arm reads q through MLX ops: no mirror makes the same mistake
    Mutant(
        "multi_query_merge_reads_l_from_m",
        "the merge reads each split's sum l at m's offset in the packed partial (cells * D instead of cells * (D + "
        "1)): the denominators are the maxima",
        "multi_query",
        (body(MULTI_MERGE, "ls = part[cells * (uint)(D + 1) + b];", "ls = part[cells * (uint)D + b];"),),
        ("parity/test_multi_query.py::test_merge_matches_float64_oracle[{arm}-bfloat16-splits1-KVH2-NQ4-D64-random]",
         MULTI_GATE % "bfloat16-H4-KVH2-L8-N8-D64-contiguous"),
        arms=("metal", "cuda")),  # the graph arm merges in MLX ops, with no packed buffer to misread
    Mutant(
        "multi_query_staging_items_floored",
        "the stagers' items per block rounded down (BK / rows per pass): where the passes do not divide a block, its "
        "last rows are never staged and the tiles read the previous block's",
        "multi_query.host",
        (code(MULTI_LAUNCH, '("ITEMS", -(-bk // rows_per_pass))', '("ITEMS", bk // rows_per_pass)'),),
        ("parity/test_multi_query.py::test_launch_geometry_stages_every_row",)),

    # --- the memo of validated calls (host) -----------------------------------------
    Mutant(
        "recent_calls_key_drops_scalar_types",
        "a scalar's key is its value alone: True (== 1, same hash) passes for a remembered 1 and skips the check "
        "that refuses a bool",
        "recent_calls",
        (code(RECENT, "return type(value), value", "return None, value"),),
        ("impl/test_recent_calls.py::test_a_remembered_int_never_lets_a_bool_through",)),
    Mutant(
        "recent_calls_key_drops_dtype",
        "an array's key is its shape alone: q in another dtype hits a remembered call and skips the dtype checks",
        "recent_calls",
        (code(RECENT, "return x.shape, x.dtype", "return x.shape, None"),),
        ("impl/test_recent_calls.py::test_bad_arguments_raise_whatever_was_remembered",)),

    # --- partition defaults (host) -----------------------------------------------------
    Mutant(
        "paged_quantized_partition_floor_dropped",
        "affine pools' default partitions lose their 512-token floor: 256-token partitions at 32/8/D128/N32k, the "
        "64-token ones that made kvq4 at 8/1 slower than the seed body (H200, 8/1/N32k: 114.5 against 93.7 us eval8 "
        "with 512-token partitions; impl/paged_attention/launch.py, QUANTIZED_MIN_PARTITION)",
        "paged_attention.host",
        (code(PAGED_LAUNCH, "quanta = max(quanta, min(QUANTIZED_MIN_PARTITION // PARTITION_QUANTUM, whole))",
              "quanta = max(quanta, 1)"),),
        ("properties/test_paged_attention_props.py::test_default_partition_fills_the_target_and_no_more",)),

    # --- perf's benchmarks (host) -------------------------------------------------------
    Mutant(
        "perf_rounds_share_one_input_set",
        "the launch that takes a case's input sets in turn (perf.harness.taking_turns) takes the first only: a "
        "round's calls read the same K/V and share the GPU's cache, which made an H200 paged partition look 1.4x "
        "faster than it is",
        "perf.harness",
        (code(PERF_HARNESS, "turn = itertools.cycle(launches)", "turn = itertools.cycle(launches[:1])"),),
        ("perf/tests/test_harness.py::test_a_rounds_calls_take_the_input_sets_in_turn",)),
    Mutant(
        "perf_ab_blocks_back_to_back",
        "the interleaved A/B times each variant's blocks back to back instead of in turn: a drift of the host during "
        "the run (the H200's pools moved 10-30% an hour apart) falls on one variant only",
        "perf.interleaved",
        (code("perf/interleaved.py", "    for _ in range(blocks):\n        for name, launch in calls.items():\n",
              "    for name, launch in calls.items():\n        for _ in range(blocks):\n"),),
        ("perf/tests/test_interleaved.py::test_every_variant_is_timed_in_every_block_in_turn",)),

    # --- masks --------------------------------------------------------------------
    Mutant(
        "window_mask_off_by_one",
        "the sliding window keeps window + 1 keys (offset + i - j <= window instead of < window)",
        "masks",
        (code(MASKS, "mx.logical_and(mask, queries - keys < window)",
              "mx.logical_and(mask, queries - keys <= window)"),),
        ("parity/test_masks.py::test_create_causal_mask_matches_oracle",)),
    Mutant(
        "bidirectional_mask_one_way",
        "an image token sees every key, not only the other image tokens (bidir[:, None] twice: the transpose lost)",
        "masks",
        (code(MASKS, "(bidir[:, None] & bidir[None, :])", "(bidir[:, None] & bidir[:, None])"),),
        ("parity/test_masks.py::test_bidirectional_mask_matches_oracle",)),
    Mutant(
        "batched_mask_left_pad_off_by_one",
        "a row's first real key is hidden with its left padding (keys > left_pad instead of >=)",
        "masks",
        (code(MASKS, "visible = keys >= mx.array(list(pads)", "visible = keys > mx.array(list(pads)"),),
        ("parity/test_masks.py::test_batched_decode_mask_matches_oracle",)),

    # --- KV cache state ---------------------------------------------------------
    Mutant(
        "kv_dequantize_swaps_scales_and_biases",
        "the quantized pool's dequantize hands mx.dequantize the biases as scales and the scales as biases "
        "(an expected row computed through this same wrapper matches it: the killers compare with mx.quantize's planes)",
        "kv.quantization",
        (code("impl/kv/quantization.py",
              "return mx.dequantize(packed, scales, biases, group_size=self.group_size, bits=self.bits, mode=MODE)",
              "return mx.dequantize(packed, biases, scales, group_size=self.group_size, bits=self.bits, mode=MODE)"),),
        ("parity/test_kv_parity.py::test_quantized_planes_are_mx_quantize_of_the_rows",
         "properties/test_kv_stateful.py::TestQuantizedRows::runTest")),
    Mutant(
        "pool_growth_loses_last_block",
        "grow() puts every new block but the last on the free list",
        "kv.pool",
        (code(POOL, "new = list(range(blocks - 1, self.num_blocks - 1, -1))",
              "new = list(range(blocks - 2, self.num_blocks - 1, -1))"),),
        ("properties/test_kv_pool.py::test_cache_growth_keeps_every_token",)),
    Mutant(
        "pool_clone_shares_free_list",
        "clone() copies the free set but shares the free-list stack with its source",
        "kv.pool",
        (code(POOL, "copy._free = list(self._free)", "copy._free = self._free"),),
        ("properties/test_kv_pool.py::test_clone_allocations_never_touch_the_source_free_list",)),
    Mutant(
        "pool_writes_in_place",
        "write_block assigns into the pool array in place, so a view holding that array sees later writes",
        "kv.pool",
        (code(POOL, "setattr(self, name, mx.slice_update(getattr(self, name), update, start, axes=(0, 1, 2, 3)))",
              "getattr(self, name)[phys, :, within:within + update.shape[2], :] = update"),),
        ("properties/test_kv_snapshots.py::test_snapshot_reads_the_same_after[float32-h2-d32v64-view-trim_and_rewrite]",)),
    Mutant(
        "projected_bytes_forgets_scale_planes",
        "bytes_per_block of a quantized pool counts the packed words but not the scale and bias planes",
        "kv.pool",
        (code(POOL, "return lead * (words * 4 + 2 * groups * itemsize)", "return lead * words * 4"),),
        ("parity/test_kv_parity.py::test_projected_bytes_of_a_quantized_pool_counts_packed_scales_and_biases",)),
    Mutant(
        "gather_blocks_interleaves_blocks",
        "gather transposes [blocks, H, bs, W] to [H, bs, blocks, W]: tokens of different blocks interleave",
        "kv.pool",
        (code(POOL, "return picked.transpose(1, 0, 2, 3).reshape(1, heads, table.size * block_size, width)",
              "return picked.transpose(1, 2, 0, 3).reshape(1, heads, table.size * block_size, width)"),),
        ("parity/test_kv_parity.py::test_paged_update_and_fetch_is_bit_exact_with_dense[float32]",)),
    Mutant(
        "quantized_pool_scales_and_biases_swapped",
        "a quantized write stores mx.quantize's biases in the scale planes and its scales in the bias planes",
        "kv.pool",
        (code(POOL, "(kq[0], vq[0], kq[1], kq[2], vq[1], vq[2])", "(kq[0], vq[0], kq[2], kq[1], vq[2], vq[1])"),),
        ("parity/test_kv_parity.py::test_quantized_planes_are_mx_quantize_of_the_rows",)),
    Mutant(
        "split_append_wrong_offset_in_block",
        "an append split across blocks writes every piece at the first piece's row offset",
        "kv.paged",
        (code(PAGED_KV, "block, within = divmod(self.offset + written, size)",
              "block, within = (self.offset + written) // size, self.offset % size"),),
        ("properties/test_kv_blocks.py::test_appends_across_block_edges_read_back_exactly",)),
    Mutant(
        "trim_does_not_release_blocks",
        "trim drops the emptied blocks from the table without returning them to the pool",
        "kv.paged",
        (code(PAGED_KV, "self.pool.free(self._table.pop())", "self._table.pop()"),),
        ("properties/test_kv_memory.py::test_cycles_keep_active_memory_bounded[float16-h2-d64v64]",)),
    Mutant(
        "filter_rows_ignores_order",
        "filter_rows keeps the rows named in keep but in their old order, not keep's",
        "kv.rows",
        (code(ROWS, "self._rows = [self._rows[i] for i in keep]",
              "self._rows = [row for i, row in enumerate(self._rows) if i in keep]"),),
        ("properties/test_kv_stateful.py::TestFloat32Rows::runTest",)),
    Mutant(
        "merge_rows_aliases_sources",
        "merge_rows adopts its source caches instead of clones: appends to a source show up in the batch",
        "kv.rows",
        (code(ROWS, "self._rows = [source.clone() for source in sources]", "self._rows = list(sources)"),),
        ("properties/test_kv_stateful.py::TestBFloat16Rows::runTest",)),
    Mutant(
        "rope_offsets_use_padded_width",
        "rope_offsets gives every row the batch's longest length instead of its own",
        "kv.rows",
        (code(ROWS, "return mx.array(self.row_offsets, dtype=mx.int32)",
              "return mx.array([self.offset] * self.batch_size, dtype=mx.int32)"),),
        ("properties/test_kv_masks.py::test_rows_mask_is_the_batched_decode_mask",)),
    Mutant(
        "rows_trim_checks_longest_row",
        "PagedKvRows.trim validates against the longest row, so a trim past the shortest one fails half-way",
        "kv.rows",
        (code(ROWS, "check_trim(tokens, min(self.row_offsets, default=0))",
              "check_trim(tokens, max(self.row_offsets, default=0))"),),
        ("parity/test_kv_bad_input.py::test_bad_input_is_refused_and_changes_nothing[rows trim beyond shortest]",)),
    Mutant(
        "view_direct_for_maskless_rows",
        "attend takes the (always causal) direct kernel for mask=None with several query rows",
        "kv.view",
        (code(VIEW, 'return mask == "causal" or (mask is None and queries == 1)',
              'return mask == "causal" or mask is None'),),
        ("parity/test_kv_attend.py::test_dispatch_between_direct_kernel_and_control_path[directTrue-n2-none]",)),
    Mutant(
        "paged_cache_snapshot_kept_after_trim",
        "trim frees blocks but keeps the frozen table of the views: the next view still names the freed blocks",
        "kv.paged",
        (code(PAGED_KV, "            self.pool.free(self._table.pop())\n            self._snapshot = None",
              "            self.pool.free(self._table.pop())"),),
        ("parity/test_kv_attend.py::test_views_share_one_table_snapshot_until_the_table_changes",)),
    Mutant(
        "paged_cache_snapshot_kept_after_new_block",
        "append allocates a block but keeps the frozen table of the views: the new block is missing from them",
        "kv.paged",
        (code(PAGED_KV, "                self._table.append(pool.alloc())\n                self._snapshot = None",
              "                self._table.append(pool.alloc())"),),
        ("parity/test_kv_attend.py::test_views_share_one_table_snapshot_until_the_table_changes",)),
    Mutant(
        "block_table_admits_one_past_the_pool",
        "a frozen table's pool check lets an entry equal to num_blocks through: the kernel would read past the pool",
        "block_table",
        (code(BLOCK_TABLE, "if self.smallest < 0 or self.largest >= num_blocks:",
              "if self.smallest < 0 or self.largest > num_blocks:"),),
        ("properties/test_block_table.py::test_frozen_table_is_checked_against_the_pool[last-one-past-the-pool]",)),
    Mutant(
        "block_table_cache_keyed_on_wrapped_entries",
        "the table conversion cache keys on int32 bytes: an int64 entry 2**32 + b is served b's checked table",
        "block_table",
        (code(BLOCK_TABLE, "key = (host.dtype.str, host.tobytes())",
              "key = host.astype(np.int32).tobytes()"),),
        ("properties/test_block_table.py::test_a_wrapping_entry_is_not_served_from_the_cache",)),
    Mutant(
        "kernel_name_ignores_output_dtypes_and_ranks",
        "kernel names leave out a launch's output dtypes and input ranks, which MLX renders into the code it caches by "
        "name: an f32-output and an f16-output launch of one spec share one compiled kernel",
        "kernels.compile",
        (code("impl/kernels/compile.py", "*map(str, input_dtypes), *extra, *variant)}", "*map(str, input_dtypes), *extra)}"),),
        ("impl/kernels/test_kernel_names.py::test_what_changes_the_rendered_code_changes_the_name",)),
    Mutant(
        "kernel_name_ignores_preludes",
        "kernel names digest the header and body but not the preludes: MLX's by-name cache serves a build of an "
        "edited prelude's predecessor",
        "kernels.compile",
        (code("impl/kernels/compile.py",
              "_digest(preludes, spec.header, spec.source, *names,",
              "_digest(spec.header, spec.source, *names,"),),
        ("impl/kernels/test_cuda_compile.py::test_kernel_names_change_with_a_prelude[CUDA_PRELUDE]",)),
    Mutant(
        "kernel_name_ignores_shared_memory",
        "kernel names leave out a launch's dynamic shared memory: MLX opts a kernel into it once per name, so a "
        "launch asking for more than the first load's size would run with too little",
        "kernels.compile",
        (code("impl/kernels/compile.py",
              "extra = (f\"shared_memory={shared_memory}\",) if shared_memory else ()",
              "extra = ()"),),
        ("impl/kernels/test_cuda_compile.py::test_cuda_only_specs_and_dynamic_shared_memory_are_checked",)),
    Mutant(
        "kvq4_one_trace_for_every_length",
        "the compiled kvq4 call is one function for every cache length: MLX keeps a trace per length for the "
        "life of the process",
        "kvq4_decode.host",
        (code(KVQ4, "else _compiled_pair(arm, scale, block, signature))", "else _compiled_pair(arm, scale, block, ()))"),),
        ("parity/test_kvq4_decode.py::test_compiled_calls_keep_a_bounded_trace_per_length[seed]",)),
    Mutant(
        "kvq4_direct_one_trace_for_every_length",
        "the direct body's compiled kvq4 call is one function for every cache length: MLX keeps a trace per "
        "length for the life of the process",
        "kvq4_decode.host",
        (code(KVQ4, "_compiled_direct(arm, _in_dtype(scale, q.dtype), block, signature)",
              "_compiled_direct(arm, _in_dtype(scale, q.dtype), block, ())"),),
        ("parity/test_kvq4_decode.py::test_compiled_calls_keep_a_bounded_trace_per_length[direct]",)),
    Mutant(
        "multi_query_copies_q",
        "the compiled call makes q contiguous before the partial: a graph node per call (~2 us of the H200 host's time), "
        "and a copy kernel whenever q is a view",
        "multi_query.host",
        (code(MULTI, "(part,) = partial_launch(q, keys, values,",
              "(part,) = partial_launch(mx.contiguous(q), keys, values,"),),
        ("parity/test_multi_query.py::test_the_call_is_two_kernels_and_hands_q_over_as_given",)),
    Mutant(
        "multi_query_one_trace_for_every_length",
        "the compiled multi-query call is one function for every cache length: MLX keeps a trace per length "
        "for the life of the process",
        "multi_query.host",
        (code(MULTI, "_compiled_call(arm, scale, splits, input_signature((q, keys, values)))",
              "_compiled_call(arm, scale, splits, ())"),),
        ("parity/test_multi_query.py::test_compiled_calls_keep_a_bounded_trace_per_length",)),
    Mutant(
        "dense_growth_rounds_down",
        "the dense cache grows by floor(L / 256) steps instead of ceil: an append shorter than a step gets no room",
        "kv.dense",
        (code(DENSE, "steps = -(-g.tokens // self.step) * self.step", "steps = g.tokens // self.step * self.step"),),
        ("properties/test_kv_dense.py::test_buffer_grows_in_256_token_steps",)),
    Mutant(
        "kvq4_subchunk_overruns_block",
        "a sub-chunk ends at min(N, s0 + sub), not at its block's end: a ragged block's last sub-chunk re-reads "
        "the next block's first tokens",
        "kvq4_decode",
        (body(KVQ4_BODY, "s1 = metal::min(tEnd, s0 + sub);", "s1 = metal::min(N, s0 + sub);"),
         graph(KVQ4, "live = (within < block) & (token < n)", "live = token < n")),
        # a block of 101 tokens: its fourth sub-chunk of 26 would run 3 tokens into the next block (the property
        # test draws such blocks only sometimes: on the cuda arm it once let this mutant live)
        ("parity/test_kvq4_decode.py::test_kvq4_decode[{arm}-seed-float32-H8-KVH2-N403-block101-contiguous]",
         "properties/test_kvq4_decode_props.py::test_matches_float64_oracle[{arm}-seed]")),
    # --- bugs that only realistic inputs show: maxima beyond exp's range, block sizes off powers of two, score
    # levels a max must not assume (the parity modules' "inputs realistic kernel bugs need") --------------------
    Mutant(
        "paged_merge_rescales_to_the_first_partition",
        "the merge combines its slices against slice 0's max, the max of partition 0 and those SL apart (the graph "
        "arm: partition 0's): a later partition whose max lies more than 88.7 above it (an outlier token) weighs "
        "exp(> 88.7) = inf",
        "paged_attention",
        (body(PAGED_MERGE, "for (uint s = 0; s < SL; ++s) top = max(top, tops[s]);",
              "for (uint s = 0; s < SL; ++s) top = max(top, tops[0]);"),
         graph(PAGED_GRAPH, "overall = maximum.max(axis=-1, keepdims=True)", "overall = maximum[..., :1]")),
        ("parity/test_paged_attention.py::test_partition_maxima_beyond_exp_range[{arm}-float32-Hq8-Hkv2-Dk128-Dv128-"
         "bs16-len1000-n2-late]",)),
    Mutant(
        "multi_query_merge_rescales_to_the_first_slice",
        "the merge's slices combine against slice 0's max (the graph arm: split 0's), not the largest: a split of "
        "another slice whose max lies more than 88.7 above it weighs inf",
        "multi_query",
        (body(MULTI_MERGE, "gtop = metal::max(gtop, tops[i]);", "gtop = metal::max(gtop, tops[0]);"),
         graph(MULTI_GRAPH, "top = m.max(axis=1, keepdims=True)", "top = m[:, :1]")),
        ("parity/test_multi_query.py::test_split_maxima_beyond_exp_range[{arm}-float32-H8-KVH2-L4-N1500-D64-slice-"
         "late]",)),
    Mutant(
        "kvq4_combine_rescales_to_the_first_sub_chunk",
        "the sub-chunks combine against sub-chunk 0's max (the graph arm: the first partial's), not the largest: "
        "an outlier more than 88.7 above it weighs inf",
        "kvq4_decode",
        (body(KVQ4_BODY, "gmax = metal::max(gmax, msh[s * (uint)REP + h]);",
              "gmax = metal::max(gmax, msh[h]);"),
         graph(KVQ4, "top = m.max(axis=axis, keepdims=True)", "top = mx.take(m, mx.array([0]), axis=axis)")),
        ("parity/test_kvq4_decode.py::test_block_maxima_beyond_exp_range[{arm}-seed-float32-H8-KVH1-N1203-block512-"
         "slice-late]",)),
    Mutant(
        "paged_slot_from_a_power_of_two_mask",
        "a token's slot in its block is t & (BS - 1), right only when the block size is a power of two (the pool "
        "takes any)",
        "paged_attention",
        (body(PAGED_PARTIAL, "(block[k] * HK + hk) * BS + t % BS;", "(block[k] * HK + hk) * BS + (t & (BS - 1));"),
         graph(PAGED_GRAPH, "physical, slot = table[live // bs], live % bs",
               "physical, slot = table[live // bs], live & (bs - 1)")),
        ("parity/test_paged_attention.py::test_block_sizes_off_powers_of_two[{arm}-float32-Hq8-Hkv2-Dk64-Dv64-bs24-"
         "len300-n4]",)),
    Mutant(
        "paged_running_max_starts_at_zero",
        "the online softmax's running max starts at 0, not -inf: when every score is far below 0, every "
        "exp(s - 0) is 0 and the output 0 / 0",
        "paged_attention",
        (body(PAGED_PARTIAL, "m[i] = -INFINITY; l[i] = 0.0f;", "m[i] = 0.0f; l[i] = 0.0f;"),
         graph(PAGED_GRAPH, "maximum = scores.max(axis=-1)  #", "maximum = mx.maximum(scores.max(axis=-1), 0.0)  #")),
        ("parity/test_paged_attention.py::test_no_score_above_zero[{arm}-float32-Hq8-Hkv2-Dk128-Dv128-bs16-len300-n2-"
         "floor]",)),
    Mutant(
        "kvq4_combine_skips_a_max_of_zero",
        "the sub-chunk combine skips a partial whose max is 0 (it means to skip the -inf of no visible token): "
        "when every score is 0, every partial is dropped and the output is 0 / 0",
        "kvq4_decode",
        (body(KVQ4_BODY, "      if (ms == -INFINITY) continue;\n      const float w = metal::exp(ms - gmax);",
              "      if (ms == 0.0f) continue;\n      const float w = metal::exp(ms - gmax);"),
         graph(KVQ4, "w = mx.where(m == -mx.inf, 0.0, mx.exp(m - top))", "w = mx.where(m == 0.0, 0.0, mx.exp(m - top))")),
        ("parity/test_kvq4_decode.py::test_no_score_above_zero[{arm}-seed-float32-H8-KVH1-N1203-block512-slice-zero]",)),
    # --- bugs written by hand against the finished suite, which it did not kill until the test beside each was
    # added (docs/mutants.md, "Bugs nobody listed") ------------------------------------------------------------
    Mutant(
        "paged_dequantize_skips_dtype_rounding",
        "a dequantized K/V element is used as the float32 s * q + b, not rounded to the pool dtype first (the "
        "contract's float(InT(s * q + b))): random pools never let that rounding decide a softmax",
        "paged_attention",
        (body(PAGED_AFFINE_LOAD, "= float(InT(fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b)));",
              "= fma(s, float((word >> (e * BITS)) & ((1u << BITS) - 1u)), b);"),
         graph(PAGED_GRAPH, "return values.astype(storage.dtype).astype(mx.float32) if round_kv else values",
               "return values")),
        ("parity/test_paged_attention.py::test_dequantized_kv_is_rounded_to_the_pool_dtype[{arm}-8]",)),
    Mutant(
        "pool_restore_hands_out_high_first",
        "restore_arrays rebuilds the free list in ascending order, so the highest free block is handed out first, "
        "not the lowest as in a new pool",
        "kv.pool",
        (code(POOL, "self._free = [b for b in range(self.num_blocks - 1, -1, -1) if b not in used]",
              "self._free = [b for b in range(self.num_blocks) if b not in used]"),),
        ("properties/test_kv_pool.py::test_restore_arrays_hands_out_low_indices_first",)),
    Mutant(
        "cache_mask_window_from_the_offset_only",
        "a cache's mask takes the window into account only once the earlier tokens alone fill it (offset >= "
        "window): new tokens that carry the keys past the window attend to keys the window hides",
        "masks",
        (code(MASKS, "if window is not None and offset + tokens > window:",
              "if window is not None and offset >= window:"),),
        ("properties/test_kv_masks.py::test_cache_mask_policy",)),
    Mutant(
        "dense_state_is_the_whole_buffer",
        "the dense cache's state is its buffer (a 256-row step, trimmed tokens and zeros included), not the live "
        "prefix mlx-lm's KVCache.state returns",
        "kv.dense",
        (code(DENSE, "return [] if self.keys is None else list(self.fetch())",
              "return [] if self.keys is None else [self.keys, self.values]"),),
        ("parity/test_kv_parity.py::test_dense_state_is_the_live_prefix",)),
    Mutant(
        "multi_query_block_keys_halved_at_the_limit",
        "multi-query stages 16-key blocks at D = 248, where two padded 32-key blocks fill Metal's 32 KiB exactly: "
        "half the keys per block at a head dim that fits",
        "multi_query.host",
        (code(MULTI_LAUNCH, "2 * BK * (d + ROW_PAD) * 2 <= THREADGROUP_BYTES",
              "2 * BK * (d + ROW_PAD) * 2 < THREADGROUP_BYTES"),),
        ("impl/test_helper_checks.py::test_block_keys_halves_only_past_the_threadgroup_memory",)),
    Mutant(
        "paged_quantized_partition_past_the_sequence",
        "an affine pool's partition is the 512-token minimum even for a shorter sequence (not the whole sequence "
        "rounded up to the quantum): padded work on every short decode",
        "paged_attention.host",
        (code(PAGED_LAUNCH, "quanta = max(quanta, min(QUANTIZED_MIN_PARTITION // PARTITION_QUANTUM, whole))",
              "quanta = max(quanta, QUANTIZED_MIN_PARTITION // PARTITION_QUANTUM)"),),
        ("impl/test_helper_checks.py::test_a_sequence_shorter_than_the_minimum_partition_is_one_whole_partition"
         "[affine]",)),
    Mutant(
        "paged_rows_ignore_the_combine_memory",
        "a partial threadgroup serves up to MAX_ROWS query rows whatever Dv: at Dv = 512 four rows' combine "
        "buffers need 32896 bytes, past the 32768 a body may declare",
        "paged_attention.host",
        (code(PAGED_LAUNCH, "return max(1, min(rows, MAX_ROWS, fit))", "return max(1, min(rows, MAX_ROWS))"),),
        ("impl/test_helper_checks.py::test_rows_per_threadgroup_fit_the_combine_buffers[512]",)),
    Mutant(
        "perf_baseline_median_of_all_samples",
        "a pooled baseline's median is that of every sample, not of the process medians: one slow process's "
        "samples move the gate's reference",
        "perf.baseline",
        (code("perf/baseline.py", '"median_s": float(np.median([np.median(p) for p in per_process])),',
              '"median_s": float(np.median(pooled)),'),),
        ("perf/tests/test_baseline.py::test_the_pooled_median_is_the_median_of_process_medians_not_of_all_samples",)),
    Mutant(
        "perf_gate_floor_exclusive",
        "the regression gate judges a case only above its floor, not at it: a baseline median exactly at the "
        "floor is never gated",
        "perf.regression",
        (code("perf/regression.py", "gated = reference >= floor_s", "gated = reference > floor_s"),),
        ("perf/tests/test_regression.py::test_a_baseline_median_at_the_floor_is_gated",)),
    Mutant(
        "paged_remembered_key_drops_head_dim",
        "the key of a validated paged call leaves out the storage's stated head dim: a storage stating another head "
        "dim over the remembered planes is served as the remembered call, its refusal skipped",
        "paged_attention.host",
        (code(f"{PAGED_DIR}/__init__.py", "scalar_key(storage.block_size), scalar_key(storage.head_dim),",
              "scalar_key(storage.block_size),"),),
        ("impl/test_recent_calls.py::test_bad_arguments_raise_whatever_was_remembered[paged bf16-after a valid call]",)),
    Mutant(
        "paged_direct_length_bound_inclusive",
        "the direct kernel takes a length of exactly 2**24, which its float32 length no longer holds as a bound "
        "below 2**24 (DIRECT_MAX_LENGTH is exclusive)",
        "paged_attention.host",
        (code(f"{PAGED_DIR}/__init__.py", "if direct and length >= DIRECT_MAX_LENGTH:",
              "if direct and length > DIRECT_MAX_LENGTH:"),),
        ("properties/test_paged_attention_props.py::test_a_length_of_2_to_the_24_is_refused_by_the_direct_kernel",)),
)


# Realistic bugs the suite does not kill yet: each names the missing test. Not run by
# default (a survivor fails the check); ``python -m mutants NAME`` runs one by name, so
# once the suite gains the test the mutant moves into CATALOG.
GAPS: tuple[Mutant, ...] = ()


def by_name(names) -> list[Mutant]:
    """The catalog's mutants called ``names`` (in that order); ValueError naming any unknown one."""
    index = {m.name: m for m in CATALOG + GAPS}
    unknown = [n for n in names if n not in index]
    if unknown:
        raise ValueError(f"no mutant named {', '.join(unknown)} in the catalog")
    return [index[n] for n in names]


_names = [m.name for m in CATALOG + GAPS]
assert len(set(_names)) == len(_names), "mutant names must be unique"
del _names
