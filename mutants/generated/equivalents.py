"""Generated mutants that cannot change any output, each with the argument why: the generator skips them.

Keys are generated ids (``<file>:<digest of the mutated line>:<operator>:<k>``, ``bodies`` docstring): an edit of
the line changes its digest, so an argument never outlives the text it was made about
(``meta_tests/test_generated_mutants.py`` fails on an id the generator no longer produces: argue the new line
again, or drop the entry). Only mutants equivalent for every input on every arm belong here; one that merely
survives the tests is a survivor, reported with its diff.

Also here, argued one by one: a mutant whose only effect is undefined behaviour past a thread's register array or
SIMD group ("not a realistic bug"), where the generator's rules (``bodies``) cannot see it.

A recurring argument, "uniform store": a store guarded by ``lane == 0`` (or ``x == 0``, ``d == 0``, ``slice == 0``)
writes a value that every thread of the guard's group computed from the same inputs in the same order, so it is
the same bits in each; with ``!=`` the other threads (there are always some) store those same bits to the same
address, and no thread reads it before the barrier that follows.
"""

from __future__ import annotations

EQUIVALENTS: dict[str, str] = {
    # --- normalized argmax -----------------------------------------------------------------------------------
    "impl/normalized_argmax_fused_scan.metal:f52b48f3:relational:0":
        "larger(a, b) with a <= b differs from a < b only where a == b, and then returns b for a: the same value, "
        "bar the sign of a zero, which no later use of maxval can see (exp(x - maxval), logf(n) + maxval); NaN "
        "compares false either way",
    "impl/normalized_argmax.metal:19869a6e:relational:0":
        "mine >= -INFINITY ? mine : -INFINITY differs from > only at mine == -inf, where both arms are -inf",
    "impl/normalized_argmax.metal:52e398ee:relational:0":
        "uniform store: best = simd_max(mine) is broadcast to the SIMD group (on CUDA a butterfly of max whose "
        "lanes can differ only in a zero's sign, and best is only compared, where -0 == +0)",
    "impl/normalized_argmax.metal:d1154049:relational:0":
        "uniform store: id = simd_min(id), an integer, is the same in every lane",
    "impl/normalized_argmax.metal:46148e6c:relational:0":
        "uniform store: id = simd_min(...), an integer, is the same in every lane of SIMD group 0",
    # --- kvq4 decode -----------------------------------------------------------------------------------------
    "impl/kvq4_decode.metal:045e1f60:relational:0":
        "uniform store: m[j] and l[j] come from score = simd_sum(score) (a sum is commutative bit for bit, so "
        "every lane holds the same sum) and the same max / exp / fma in every lane",
    "impl/kvq4_decode.metal:c2c78774:relational:0":
        "uniform store: gmax and den depend on the head h alone, computed by every thread of h from msh / lsh in "
        "the same order; D >= 8, so other threads of h exist",
    # --- paged attention -------------------------------------------------------------------------------------
    "impl/paged_attention/partial.metal:44c30103:relational:0":
        "prefetching the next batch's block entries also when t0 + SG * TB == stop reads table in bounds "
        "(min(t, stop - 1)) into entries no batch uses: the loop ends there",
    "impl/paged_attention/partial.metal:8069dfcb:relational:0":
        "uniform store: top and total depend on the row i alone, computed by each thread of i over msh / lsh in "
        "the same order; DV > 1, so other threads of i exist",
    "impl/paged_attention/partial.metal:d1a6f2ec:relational:0":
        "r <= ROWS gives the first padded row (r == ROWS, chunks past ROWS) a causal limit: its q is 0 (the load "
        "tests r < ROWS) and its state is never written (the combine skips rows >= ROWS); stop may then cover more "
        "live tokens (< last), which every real row masks by its own limit (weight 0, max unchanged)",
    "impl/paged_attention/partial.metal:9fed3c3c:guard:1":
        "p = exp(score - next) is NaN only when next == -inf, no token visible to row i yet; visibility is a prefix "
        "of the tokens (mine < lim[i]) and a SIMD group's batches rise, so that holds only for a group that sees "
        "none of the partition's tokens: its m stays -inf and the combine skips it (ms == -INFINITY), NaN state "
        "and all",
    "impl/paged_attention/partial.metal:74a2180f:relational:0":
        "not a realistic bug (undefined behaviour): bit <= 32 adds one shuffle_xor with partner lane ^ 32, out of "
        "the SIMD group; CUDA returns the caller's own value, so o and l double exactly and v / t is unchanged; "
        "Metal leaves an out-of-range partner undefined",
    "impl/paged_attention/merge.metal:da5ab49e:relational:0":
        "a batch that starts at the count holds no live partition: every top is -inf, so the slice's max stays "
        "(factor exp(0) = 1) or its empty state stays (shift 0: 0 times exp(-inf)), every weight is exp(-inf) = 0, "
        "and the clamped loads read inside the count",
    "impl/paged_attention/merge.metal:d085ecfa:relational:0":
        "uniform store: every lane x of a slice holds the same max (its lanes read the same partitions' maxima, "
        "whatever the dim), so lanes 1..31 store what lane 0 would",
    "impl/paged_attention/merge.metal:9367169d:relational:0":
        "uniform store: every lane x of a slice holds the same sum and the same weight (both from the partitions' "
        "maxima and sums, whatever the dim), so lanes 1..31 store what lane 0 would",
    "impl/paged_attention/merge.metal:ddedd14e:guard:1":
        "a slice that saw no token has max -inf, sum 0 and values 0, and exp(-inf - top) is exactly 0 for the "
        "finite top of every row (a row sees at least one token, so some partition's max is finite): the guard "
        "changes nothing",
    "impl/paged_attention/merge.metal:e0ec7ac9:relational:0":
        "uniform store: the SL slices read the same values[s][x] and totals and compute the same output element; "
        "slices 1..SL-1 store what slice 0 would",
    "impl/paged_attention/partial_matrix.metal:ff4182c3:guard:0":
        "a tile row past ROWS (the last chunk's unused rows) then gets a causal end below `last` too: it can only "
        "widen stop to live tokens, which every real row masks at its own limit (weight exactly 0 times a finite "
        "V, as for the masked tokens of any tile), and the unused row's own output is never stored (r >= ROWS)",
    "impl/paged_attention/ring_prologue.metal:dd894642:relational:0":
        "a <= stop issues one more step, at a == stop, only for a SIMD group whose steps land exactly on the end: "
        "it copies rows a % BS .. + 7 of the block last read (in the pool: block stays the last live step's) into "
        "slot (a / (SG * TB)) % RING, which no step reads (the loop stops before a) and which the slot's last "
        "reader read before the barriers of its products; block is not read past the end (a + SG * TB < stop "
        "fails), and ring_osh waits for every copy before the combine takes the ring's memory (records/h100-cuda/"
        "ring-ceiling/: racecheck clean under it)",
    # --- multi-query -----------------------------------------------------------------------------------------
    "impl/multi_query/partial.metal:635c11f2:relational:0":
        "k1 >= k0 ? (k1 - k0 + BK - 1) / BK : 0 differs from > only at k1 == k0, where the first arm is "
        "(BK - 1) / BK == 0 too",
    "impl/multi_query/compute_block.metal:4152c9df:relational:0":
        "f0 + 4 < D / 8 sends the last full group of four dims-blocks (f0 + 4 == D / 8) to the else branch, which "
        "loads the same four fragments (f0 + i < D / 8 for i < 4) one simdgroup_load each: the same kf",
    "impl/multi_query/compute_block.metal:4152c9df:relational:1":
        "the V side of :0: f0 + 4 < D / 8 sends the last full group of four V fragments to the else branch, which "
        "loads the same four (f0 + i < D / 8 for i < 4) one simdgroup_load each: the same vf",
    "impl/multi_query/multi_query.h:4eb55a46:guard:0":
        "a key past the split (!live) is staged from the live row k1 - 1 (the ring's issue clamps the key), and "
        "compute_block masks its score to -inf (key >= k1), so its weight is exactly 0: 0 times that row's finite "
        "half values (the contract keeps V within half's range) adds 0 to O as the zeros did; its K never reaches a "
        "weight",
    "impl/multi_query/multi_query.h:171d9ce0:guard:0":
        "as multi_query.h:4eb55a46:guard:0, for bfloat16 rows: the live row k1 - 1 converted to half instead of "
        "zeros, under a weight of exactly 0",
    "impl/multi_query/compute_block.metal:8450f02f:relational:2":
        "not a realistic bug (undefined behaviour): f + 1 <= D / 8 takes the paired product at f + 1 == D / 8, "
        "reading qf[.][D / 8], one past the thread's register array, and a key fragment never loaded",
    "impl/multi_query/merge.metal:d363a802:relational:0":
        "uniform store: top and den come from the same splits' m and l (loads that do not depend on the lane's "
        "dims) in the same order in every lane x",
    "impl/multi_query/merge.metal:a8f585ba:relational:0":
        "uniform store: the MERGE_SLICES = 8 slices read the same tops, dens and nums and compute the same output; "
        "slices 1..7 store what slice 0 would",
}
