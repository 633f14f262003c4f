"""Generated Python mutants that cannot change any output, each with the argument why: the generator skips them.

Two kinds (``mutants/generated/python.py`` applies both; docs/generated-mutants.md):

* ``RULES``: a place where cosmic-ray's operators can change nothing that runs, argued once for every mutant
  there. ``rule_of(node, source)`` names the rule a mutation position falls under (or None).
* ``EQUIVALENTS``: one mutant, by its generated id (``<file>:<digest of the mutated line>:<operator>:<k>``, as
  the kernel bodies' ``equivalents``): an edit of the line changes its digest, so an argument never outlives the
  text it was made about (``mutants/generated/test_python.py`` fails on an id the generator no longer produces:
  argue the new line again, or drop the entry). Only mutants equivalent for every input on every arm belong
  here; one that merely survives the tests is a survivor, reported with its diff.
"""

from __future__ import annotations

import re

__all__ = ["EQUIVALENTS", "RULES", "rule_of"]

FUTURE_ANNOTATIONS = re.compile(r"^from __future__ import (?:[\w, ()]*\b)?annotations\b", re.M)

RULES: dict[str, str] = {
    "annotation": "inside a type annotation of a module with `from __future__ import annotations` (PEP 563): the "
                  "annotation is kept as its source text and nothing in the suite evaluates it (no "
                  "typing.get_type_hints; dataclasses and NamedTuple read ClassVar / InitVar from the text alone), "
                  "so `int | None` turned `int & None` or `int | None` with a number changed runs the same",
}


def _is_annotation_of(child, parent) -> bool:
    """Whether ``child`` is the annotation of ``parent`` (a parameter, a function's return, an annotated name)."""
    kind = parent.type
    if kind == "tfpdef":  # a parameter's name ':' annotation (the param holds it, then '=' default)
        return len(parent.children) > 2 and parent.children[2] is child
    if kind == "param":  # a lambda's or an unannotated parameter: no annotation; else parso's own
        return getattr(parent, "annotation", None) is child
    if kind in ("funcdef", "async_funcdef"):  # 'def' name parameters '->' annotation ':' suite
        return getattr(parent, "annotation", None) is child
    if kind == "annassign":  # ':' annotation ['=' value]
        return len(parent.children) > 1 and parent.children[1] is child
    return False


def in_annotation(node) -> bool:
    """Whether a parso ``node`` lies inside a type annotation."""
    child, parent = node, node.parent
    while parent is not None:
        if _is_annotation_of(child, parent):
            return True
        if parent.type in ("suite", "file_input", "simple_stmt"):  # a statement's boundary: no annotation holds it
            return False
        child, parent = parent, parent.parent
    return False


def rule_of(node, source: str) -> str | None:
    """The ``RULES`` entry a mutation at the parso ``node`` of ``source`` falls under, or None."""
    if FUTURE_ANNOTATIONS.search(source) and in_annotation(node):
        return "annotation"
    return None


EQUIVALENTS: dict[str, str] = {
    # --- the masks -----------------------------------------------------------------------------------------------
    "impl/masks.py:af6816d8:core/ReplaceComparisonOperator_Eq_LtE:0":
        "tokens <= 1: cache_mask checked tokens >= 1 (check_int, minimum=1) first, so <= 1 is == 1",
    "impl/masks.py:f2235924:core/ReplaceBinaryOperator_BitAnd_Mul:0":
        "bidir[:, None] * bidir[None, :]: bidir is a bool array (refused otherwise, an empty one cast), MLX keeps "
        "bool * bool bool, and the product of 0 / 1 values is their and",
    "impl/masks.py:72891467:core/ReplaceOrWithAnd:0":
        "dtype == bool and size == 0 for a NumPy bidir: a non-empty bool array then goes to mx.array as it is, "
        "not through np.asarray(..., dtype=bool), which for an array already bool is the same array",
    # --- the graph arms ------------------------------------------------------------------------------------------
    "impl/paged_attention/graph.py:2c7e0657:core/ReplaceComparisonOperator_Eq_Is:0":
        "which is \"keys\": _load's two callers pass the literals \"keys\" and \"values\", and CPython interns "
        "identifier-like string literals, so `is` and `==` agree on every call",
    "impl/paged_attention/graph.py:25edc5c0:core/NumberReplacer:0":
        "shift = where(maximum == -inf, 1.0, maximum): the shift replaces only an empty partition's max, whose "
        "scores are all -inf, and exp(-inf - c) is 0 for any finite c",
    "impl/paged_attention/graph.py:25edc5c0:core/NumberReplacer:1":
        "shift = where(maximum == -inf, -1.0, maximum): as with 1.0, exp(-inf - c) is 0 for any finite c",
    "impl/paged_attention/graph.py:26a461c5:core/NumberReplacer:0":
        "pack = 33 // bits: bits is 4 or 8 (paged_attention refuses others, QUANTIZED_BITS; kvq4's direct body "
        "passes 4), and 33 // 4 == 32 // 4, 33 // 8 == 32 // 8",
    "impl/multi_query/graph.py:3bbe05c8:core/NumberReplacer:4":
        "v = where(live, v, 1.0): a slot past its split's keys is masked (score -inf, weight exactly 0 after the "
        "exp), so its value enters P . V as 0 * 1.0 == 0 * 0.0",
    "impl/multi_query/graph.py:3bbe05c8:core/NumberReplacer:5":
        "v = where(live, v, -1.0): as with 1.0, a masked slot's weight is exactly 0",
    "impl/multi_query/graph.py:6a64979c:core/ReplaceComparisonOperator_Eq_Lt:0":
        "weight = where(m < -inf, 0, exp(m - top)): where m is -inf, top (the max over splits) is above -inf and "
        "exp(-inf - top) is the 0.0 the where gave, or every split is -inf (only with infinite inputs: a row always "
        "sees key 0) and num / den is 0 / 0 = NaN either way",
    "impl/multi_query/graph.py:6a64979c:core/ReplaceUnaryOperator_Delete_USub:0":
        "weight = where(m == +inf, 0, exp(m - top)): for finite scores m is finite or -inf, so the where takes "
        "exp(m - top), the 0.0 it gave for m = -inf (top is above -inf: a row always sees key 0); a split with m = "
        "+inf (an overflowed score) makes top +inf, and the output is NaN either way: exp(inf - inf) in the "
        "original, 0 / 0 in the mutant (every other weight exp(m - inf) = 0)",
    "impl/multi_query/graph.py:e045972d:core/ReplaceUnaryOperator_Delete_USub:1":
        "k is [KVH, splits, blocks, bk, D], so k[:, :, b] has 4 axes and swapaxes(-1, 2) is swapaxes(-1, -2)",
    "impl/multi_query/graph.py:e045972d:core/ReplaceUnaryOperator_USub_UAdd:1":
        "swapaxes(-1, +2): +2 is 2, the program of the swapaxes(-1, 2) mutant above",
    "impl/normalized_argmax.py:b160efcf:core/ReplaceComparisonOperator_Lt_NotEq:0":
        "before only feeds rescan, which is and-ed with earlier.any(): a column before pos scoring best makes the "
        "max of the columns other than pos (at most top, whose score is best) score best too, so the condition "
        "is earlier.any() either way",
    "impl/normalized_argmax.py:b160efcf:core/ReplaceComparisonOperator_Lt_IsNot:0":
        "column is not pos (always True: two arrays) makes before every column's max, top, whose score is best for "
        "every candidate, so rescan is True there and the condition is earlier.any() as with <; non-candidates' ids "
        "are dropped by mine == best",
    "impl/normalized_argmax.py:90046dd7:core/ReplaceComparisonOperator_Gt_NotEq:0":
        "mine != -inf keeps a NaN the > test turned -inf: a score is NaN only where lse is NaN or infinite, and then "
        "no thread's score is above -inf (finite - inf is -inf), so the original's best is -inf and the row answers "
        "0; a NaN best fails best > -inf as well: 0",
    "impl/normalized_argmax.py:235e3f59:core/ReplaceBinaryOperator_Add_BitOr:1":
        "CHUNK * (...) | first % CHUNK: CHUNK is 4, so the product's two low bits are 0 and first % 4 < 4 fills only "
        "them: | adds (uint32 ids below 2**32)",
    "impl/normalized_argmax.py:a1bac537:core/ReplaceUnaryOperator_USub_Invert:0":
        "earlier.any over axis -2 (~1) instead of -1: rescan already implies an earlier best column, so a thread "
        "with rescan gets its earliest best id at that column of the broadcast [rows, threads, cols] ids and pos "
        "at the others; the min over threads and columns is the same id, and rescan false gives pos everywhere",
    "impl/normalized_argmax.py:a1bac537:core/NumberReplacer:1":
        "earlier.any over axis 0 (-0) instead of -1: as for ~1, rescan implies an earlier best column, so the "
        "broadcast ids hold the thread's earliest best id there and pos elsewhere, and the min is the same",
    "impl/normalized_argmax.py:a1bac537:core/ReplaceUnaryOperator_USub_UAdd:0":
        "earlier.any over axis +1: earlier is [rows, threads, cols], so axis 1 is axis -2, the ~1 mutant's program",
    "impl/normalized_argmax.py:a1bac537:core/ReplaceUnaryOperator_Delete_USub:0":
        "earlier.any over axis 1: earlier is [rows, threads, cols], so axis 1 is axis -2, the ~1 mutant's program",
    "impl/normalized_argmax.py:a1bac537:core/NumberReplacer:0":
        "earlier.any over axis -2: the ~1 mutant's program (earlier is [rows, threads, cols])",
    "impl/normalized_argmax.py:a1bac537:core/ReplaceUnaryOperator_USub_Not:0":
        "earlier.any over axis `not 1`, False, which MLX takes as axis 0: the -0 mutant's program",
    # --- kvq4 decode ---------------------------------------------------------------------------------------------
    "impl/kvq4_decode.py:8fe022fc:core/ReplaceComparisonOperator_IsNot_NotEq:0":
        "type(planes) != QuantizedKV: type objects compare by identity (type defines no other equality)",
    # --- the KV state --------------------------------------------------------------------------------------------
    "impl/kv/paged.py:9c1545b9:core/ReplaceComparisonOperator_Eq_Gt:0":
        "whole = n > g.tokens is always False (n <= g.tokens - written): the append then slices keys[:, :, 0:n] "
        "where it would pass keys whole, n = g.tokens: the same rows",
    "impl/kv/paged.py:cd474ec1:core/ReplaceComparisonOperator_LtE_Eq:0":
        "while len(table) == block: the table holds ceil((offset + written) / size) blocks at the loop, so block "
        "(floor of the same) is len(table) - 1 or len(table), and <= holds exactly when == does",
    "impl/kv/rows.py:e3f57d2a:core/ReplaceComparisonOperator_NotEq_Lt:0":
        "len(set(keep)) < len(keep): the set of keep's entries never holds more than keep does, so < and != agree",
    "impl/kv/rows.py:a711b0dc:core/NumberReplacer:1":
        "self._rows[-1] inside len(self._rows) == 1: the one row, as [0]",
    "impl/kv/view.py:1c27aa55:core/NumberReplacer:5":
        "batch_size > 0 instead of > 1 differs only at one row, where a 4-D mask of batch batch_size has batch 1 and "
        "mask[0:1] is the mask itself",
    "impl/kv/view.py:1c27aa55:core/ReplaceComparisonOperator_Gt_NotEq:0":
        "batch_size != 1 instead of > 1 differs only at 0 rows, where row_mask's left_pad[row] raises IndexError "
        "either way (attend refuses an empty view before it cuts a mask)",
    "impl/kv/paged.py:01af0064:core/ReplaceComparisonOperator_Lt_NotEq:0":
        "while written != g.tokens: each pass adds n = min(size - within, g.tokens - written) >= 1, so written "
        "reaches g.tokens exactly and never passes it",
    "impl/kv/paged.py:16dbc7c8:core/ReplaceComparisonOperator_Gt_NotEq:0":
        "while len(self._table) != keep: the table holds ceil(offset / block_size) blocks before the trim and "
        "keep = ceil(new offset / block_size) <= that, so the loop ends at len == keep either way",
    "impl/kv/quantization.py:a87d1094:core/NumberReplacer:0":
        "33 // self.bits: bits is 4 or 8 (SUPPORTED_BITS, checked in __post_init__), and 33 // 4 == 32 // 4, "
        "33 // 8 == 32 // 8",
    # --- the gates' metrics --------------------------------------------------------------------------------------
    "reference/metrics.py:57b12e82:core/NumberReplacer:3":
        "where(a > -1, 3, -3) for the actual's infinity's sign: it is read only where a is +inf or -inf, which "
        "compare with -1 as with 0",
}
