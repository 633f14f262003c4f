"""Generate the Python mutants with cosmic-ray: its operators find and apply the mutations, ``mutants.runner``
runs them (docs/generated-mutants.md).

The targets (``TARGETS``) are the Python whose bugs the suite must catch: the graph arms (the kernels in MLX ops,
which CI's CPU runs), the KV-cache state, the block table and the masks, the gates and the metrics they measure
with, the perf regression verdict and the report's verdicts. Each is a file, or for a file that also holds a
compiled arm's host code only the functions the graph arm runs (``Target.scope``): on a CPU the rest never runs.

What cosmic-ray (a standard Python mutation tool) does here: ``cosmic_ray.plugins`` gives its operators
(``operators()``: every core operator that takes no arguments; the two variable operators take a cause and an
effect variable, for a different use), ``Operator.mutation_positions`` over ``cosmic_ray.ast.ast_nodes`` of the
file's parso tree enumerates the mutations (the same walk as its ``init`` command: occurrence ``n`` of an
operator is its ``n``-th position in the file), and ``cosmic_ray.mutating.mutate_code`` applies one, giving the
mutated module. Its own runner (a work database, a worker that rewrites the file in place and runs a test
command) is not used: each mutant becomes a catalog ``Mutant`` that ``mutants.runner`` runs like any other (a
copy of the tree, a fork of the warm zygote on a CPU, its records), so a sample fits in CI and the records are
those of every other mutant.

A mutant (``bodies.GeneratedMutant``, ``generated="python"``) has one substitution (part ``graph`` in a graph
arm's module, ``code`` elsewhere: ``catalog.PARTS``): the lines cosmic-ray changed (old and new), grown by
neighbouring lines until the old text occurs exactly once in the file (the runner's rule); applied, it gives
exactly cosmic-ray's module. Its id is ``<file>:<digest>:<operator>:<k>``, as the kernel bodies': ``digest``
hashes the text of the line the mutation starts on (stripped), ``operator`` is cosmic-ray's name
(``core/ReplaceBinaryOperator_Add_Sub``), ``k`` counts that operator's mutations on lines of that text, in order.
An edit elsewhere in the file leaves the id as it was; an edit of the line makes new mutants. Its target is the
file; its tests are the file's whole test set (``Target.tests``: files and test functions, every arm's cases: on
a CPU the compiled arms' skip), not the tests someone expected to kill it.

Equivalent mutants (``python_equivalents``: by rule, e.g. inside an annotation that is never evaluated, or by id
with the argument) are skipped: ``sites`` lists them, marked; ``draw``, ``sample`` and ``generate`` leave them
out. Every mutant the operators make is valid Python: ``_incompetent`` drops the positions where cosmic-ray
would write a syntax error, and ``build`` refuses one that slipped through.

``ExceptionReplacer`` writes ``except CosmicRayTestingException:`` as cosmic-ray does; the copy does not define
the name, so when the ``try`` body raises, the handler's test raises NameError instead of catching: the handler
is gone, which is the mutation's point.
"""

from __future__ import annotations

import re
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..catalog import Substitution
from .bodies import TARGET_TESTS as BODY_TESTS
from .bodies import GeneratedMutant, digest

__all__ = [
    "FAMILIES", "REPO_ROOT", "TARGETS", "TOOL", "PySite", "Target", "build", "draw", "family", "generate",
    "operators", "sample", "sites", "strata", "substitution", "tool_version",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOL = "cosmic-ray"
# Operator families (``--operators`` takes these or cosmic-ray's full names): the name's prefix -> family.
FAMILIES = {
    "ReplaceBinaryOperator": "binary", "ReplaceComparisonOperator": "comparison",
    "ReplaceUnaryOperator": "unary", "AddNot": "boolean", "ReplaceTrueWithFalse": "boolean",
    "ReplaceFalseWithTrue": "boolean", "ReplaceAndWithOr": "boolean", "ReplaceOrWithAnd": "boolean",
    "ReplaceBreakWithContinue": "loop", "ReplaceContinueWithBreak": "loop", "ZeroIterationForLoop": "loop",
    "ExceptionReplacer": "exception", "NumberReplacer": "number", "RemoveDecorator": "decorator",
}


@dataclass(frozen=True)
class Target:
    """A file to mutate: the tests that must kill its mutants, and optionally the functions to mutate."""

    tests: tuple[str, ...]  # test files / test functions, in the order they run (-x stops at the first failure)
    scope: tuple[str, ...] | None = None  # top-level def / class names (nested ones included); None: the file
    why: str = ""  # why this scope, this test set
    part: str = "code"  # the substitutions' part (catalog.PARTS): "graph" for a graph arm's module


# --- the targets and their whole test sets -------------------------------------------------------------------
# Test sets: every test module about the file (the parity gates and properties of its kernel or component, the
# meta tests of a gate), fastest and most direct first; a survivor runs all of them. The graph arms take their
# kernel family's set (``bodies.TARGET_TESTS``: every test that runs one of its arms).
KV_TESTS = ("parity/test_kv_parity.py", "parity/test_kv_bad_input.py", "parity/test_kv_attend.py",
            "properties/test_kv_pool.py", "properties/test_kv_blocks.py", "properties/test_kv_dense.py",
            "properties/test_kv_masks.py", "properties/test_kv_snapshots.py", "properties/test_kv_memory.py",
            "parity/test_decode_e2e.py", "properties/test_kv_stateful.py")
GATE_TESTS = ("meta_tests/test_gates.py", "meta_tests/test_metrics.py", "meta_tests/test_smoke_conftest.py",
              "reports/tests/test_plugin.py", "parity/test_masks.py", "parity/test_normalized_argmax.py",
              "parity/test_paged_attention.py", "parity/test_kv_parity.py", "parity/test_metal_probes.py",
              "parity/test_decode_e2e.py")
REPORT_TESTS = ("reports/tests/test_bad_records.py", "reports/tests/test_compare.py", "reports/tests/test_render.py",
                "reports/tests/test_mutation_scores.py", "reports/tests/test_browser.py", "reports/tests/test_plugin.py",
                "impl/test_canary.py", "perf/tests/test_harness.py")
GRAPH = "runs on the graph arm"
TARGETS: dict[str, Target] = {
    # the graph arms
    "impl/paged_attention/graph.py": Target(BODY_TESTS["paged_attention"], why=GRAPH, part="graph"),
    "impl/multi_query/graph.py": Target(BODY_TESTS["multi_query"], why=GRAPH, part="graph"),
    "impl/normalized_argmax.py": Target(
        BODY_TESTS["normalized_argmax"],
        scope=("threads_for", "normalized_argmax_native", "normalized_argmax", "_compiled", "_matrix", "_lse",
               "_graph_argmax"),
        why="the graph arm and the dispatch it runs through; the launches, their checks and the fused variant's "
            "thread count serve the compiled arms alone"),
    "impl/kvq4_decode.py": Target(
        BODY_TESTS["kvq4_decode"],
        scope=("_planes", "kvq4_decode_eligible", "_is_int", "_check_planes", "_validate", "_check_fits",
               "default_body", "kvq4_decode", "_planes_key", "_graph_call", "_scaled", "_Cache", "_cache",
               "_in_dtype", "_dequantize", "_combine", "_graph"),
        why="the graph arm (seed and direct bodies), its dispatch and the checks every arm runs; the launches, the "
            "compiled calls and the threadgroup-memory bound serve the compiled arms alone"),
    # the KV-cache state, the block table, the masks
    **{f"impl/kv/{name}.py": Target(KV_TESTS, why="the KV cache's state: every KV test")
       for name in ("pool", "paged", "rows", "view", "dense", "quantization", "validation", "errors")},
    "impl/block_table.py": Target(
        ("properties/test_block_table.py", "parity/test_paged_attention.py", "impl/test_recent_calls.py",
         "properties/test_paged_attention_props.py", "parity/test_kv_attend.py", "parity/test_kv_bad_input.py",
         "parity/test_kv_parity.py", "properties/test_kv_snapshots.py", "parity/test_decode_e2e.py",
         "properties/test_kv_stateful.py"),
        why="paged attention takes its tables; the KV cache builds them"),
    "impl/masks.py": Target(("parity/test_masks.py", "properties/test_kv_masks.py", "parity/test_kv_attend.py",
                             "parity/test_decode_e2e.py"), why="the masks' oracle tests and their KV users"),
    # the gates and their metrics
    "parity/gates.py": Target(GATE_TESTS, why="the gates' meta tests and parity modules using every kind of gate"),
    "reference/metrics.py": Target(("meta_tests/test_metrics.py", *GATE_TESTS[:1], *GATE_TESTS[2:],
                                    "reference/tests/test_attention_ref.py", "reference/tests/test_sampling_ref.py",
                                    "reference/tests/test_quant_ref.py", "reference/tests/test_bad_input.py"),
                                   why="what the gates measure (ulps, NMSE, KL)"),
    # the perf verdict, the report's verdicts
    "perf/regression.py": Target(("perf/tests/test_regression.py", "perf/tests/test_harness.py",
                                  "perf/tests/test_baseline.py", "reports/tests/test_compare.py",
                                  "perf/test_bench_suite.py"), why="the statistical regression gate"),
    "reports/results.py": Target(REPORT_TESTS, why="the report's results and their verdicts"),
    "reports/summary.py": Target(REPORT_TESTS, why="the report's summary verdicts"),
}


def tool_version() -> str:
    from importlib.metadata import version

    return version("cosmic-ray")


def operators(selected: Sequence[str] = ()) -> list[tuple[str, object]]:
    """(cosmic-ray name, instance) of every operator that takes no arguments, in cosmic-ray's order;
    ``selected``: only these families or names."""
    import cosmic_ray.plugins

    chosen = []
    names = list(cosmic_ray.plugins.operator_names())
    unknown = set(selected) - set(FAMILIES.values()) - set(names)
    if unknown:
        raise ValueError(f"unknown operator {sorted(unknown)}: families {sorted(set(FAMILIES.values()))} or "
                         "cosmic-ray's names (core/ReplaceAndWithOr)")
    for name in names:
        cls = cosmic_ray.plugins.get_operator(name)
        if cls.arguments():
            continue
        if selected and family(name) not in selected and name not in selected:
            continue
        chosen.append((name, cls()))
    return chosen


def family(operator: str) -> str:
    """The family of a cosmic-ray operator name (``core/ReplaceBinaryOperator_Add_Sub``: binary)."""
    base = operator.split("/", 1)[-1]
    return FAMILIES.get(base.split("_", 1)[0], "other")


# --- enumeration -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PySite:
    """One mutation cosmic-ray makes: operator ``operator``'s ``occurrence``-th position in ``file``."""

    file: str
    operator: str
    occurrence: int
    line: int  # 1-based, where the position starts
    column: int
    id: str
    equivalent: str | None = None  # the rule or the argument that makes it equivalent, or None

    @property
    def name(self) -> str:
        stem = re.sub(r"\W", "_", self.file.removesuffix(".py"))
        op = re.sub(r"\W", "_", self.operator.split("/", 1)[-1])
        digest_, k = self.id.split(":")[1], self.id.rsplit(":", 1)[1]
        return f"py_{stem}_{op}_{digest_}_{k}"


def _scope_lines(tree, scope: tuple[str, ...] | None) -> list[tuple[int, int]] | None:
    """Line ranges (first, last) of the top-level definitions named in ``scope``; None: the whole file."""
    if scope is None:
        return None
    found = {}
    for node in tree.children:
        definition = node.children[-1] if node.type in ("decorated", "async_stmt") else node
        if definition.type in ("funcdef", "classdef") and definition.name.value in scope:
            found[definition.name.value] = (node.start_pos[0], node.end_pos[0])
    missing = set(scope) - set(found)
    if missing:
        raise ValueError(f"scope names no top-level definition: {sorted(missing)}")
    return list(found.values())


# Where an operand cannot be a ``not`` test: ``a * not b``, ``2 ** not x``, ``a < not b`` are syntax errors.
_NO_NOT_TEST = {"power", "term", "arith_expr", "shift_expr", "and_expr", "xor_expr", "expr", "comparison", "factor"}


def _incompetent(node, operator: str) -> bool:
    """Whether cosmic-ray's ``operator`` at ``node`` writes a syntax error (an incompetent mutant, in its words):
    an operator with no left operand taken for a binary one (a parameter list's bare ``*`` or ``/`` in
    ``def f(a, *, b)``, a dict display's ``**`` in ``{**d, k: v}``), or a unary operator
    turned ``not`` where only an arithmetic operand may stand (``-(-n // b) * 2`` to ``not (-n // b) * 2`` is
    fine, ``x * -y`` to ``x * not y`` is not)."""
    if operator.startswith("core/ReplaceBinaryOperator_"):  # an operator with no left operand is not binary
        before = node.get_previous_sibling()
        return (node.parent.type in ("parameters", "lambdef") or before is None or before.type == "keyword"
                or (before.type == "operator" and before.value in (",", "(", "[", "{", ":")))
    return (operator.startswith("core/ReplaceUnaryOperator_") and operator.endswith("_Not") and node.type == "factor"
            and node.parent.type in _NO_NOT_TEST)


def sites(root: Path = REPO_ROOT, *, targets: Sequence[str] = (), operators_: Sequence[str] = (),
          equivalents: dict[str, str] | None = None) -> list[PySite]:
    """Every mutation of the targets (``targets``: only these files; ``operators_``: only these families or
    names), equivalents included and marked, in file order then cosmic-ray's operator order."""
    from cosmic_ray.ast import ast_nodes, get_ast

    from .python_equivalents import EQUIVALENTS, RULES, rule_of

    equivalents = EQUIVALENTS if equivalents is None else equivalents
    unknown = set(targets) - set(TARGETS)
    if unknown:
        raise ValueError(f"unknown target {sorted(unknown)}: targets {sorted(TARGETS)}")
    ops = operators(operators_)
    out = []
    for path, target in TARGETS.items():
        if targets and path not in targets:
            continue
        source = Path(root, path).read_text()
        lines = source.splitlines()
        tree = get_ast(source)
        ranges = _scope_lines(tree, target.scope)
        nodes = list(ast_nodes(tree))
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for name, op in ops:
            occurrence = 0
            for node in nodes:
                for start, _ in op.mutation_positions(node):
                    line = start[0]
                    if not _incompetent(node, name) and (ranges is None or any(a <= line <= b for a, b in ranges)):
                        line_digest = digest(lines[line - 1])
                        k = counts[(line_digest, name)]
                        counts[(line_digest, name)] += 1
                        site_id = f"{path}:{line_digest}:{name}:{k}"
                        rule = rule_of(node, source)
                        why = f"{rule}: {RULES[rule]}" if rule else equivalents.get(site_id)
                        out.append(PySite(path, name, occurrence, line, start[1], site_id, why))
                    occurrence += 1
    return out


# --- the mutants -------------------------------------------------------------------------------------------


def _line_starts(text: str) -> list[int]:
    return [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]


def substitution(path: str, original: str, mutated: str, part: str = "code") -> tuple[Substitution, int]:
    """(the substitution that turns ``original`` into ``mutated``, the 1-based line its old text starts on): the
    whole lines that differ, grown by the next line, then the previous one, in turn, until the old text occurs
    exactly once in ``original``."""
    if original == mutated:
        raise ValueError(f"{path}: the mutation changes nothing")
    prefix = 0
    limit = min(len(original), len(mutated))
    while prefix < limit and original[prefix] == mutated[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and original[-1 - suffix] == mutated[-1 - suffix]:
        suffix += 1
    start, end = prefix, len(original) - suffix  # original[start:end] became mutated[start:len(mutated) - suffix]
    delta = len(mutated) - len(original)
    starts = _line_starts(original)
    last = len(starts) - 1

    def eol(i: int) -> int:  # the end of line i (its newline's offset, or the text's end)
        return starts[i + 1] - 1 if i < last else len(original)

    a = max(i for i, s in enumerate(starts) if s <= start)
    b = max(i for i, s in enumerate(starts) if s <= max(start, end - 1))
    while eol(b) < end and b < last:  # the change takes a line's newline: take the next line too
        b += 1
    grow_down = True
    while True:
        old = original[starts[a]:eol(b)]
        if old.strip() and original.count(old) == 1:
            new = mutated[starts[a]:eol(b) + delta]
            return Substitution(path, old, new, part), a + 1
        if (grow_down or a == 0) and b < last:
            b += 1
        elif a > 0:
            a -= 1
        else:
            raise ValueError(f"{path}: no context of offset {start} occurs once")
        grow_down = not grow_down


def _change(sub: Substitution) -> str:
    """The substitution's change in a line: the differing middle of old and new, shortened."""
    old, new = sub.old, sub.new
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    while p > 0 and not old[p - 1].isspace():  # whole tokens: '32' -> '33', not '2' -> '3'
        p -= 1
    while s > 0 and not old[len(old) - s].isspace():
        s -= 1
    a, b = old[p:len(old) - s], new[p:len(new) - s]

    def short(text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= 60 else text[:57] + "..."

    return f"{short(a)!r} -> {short(b)!r}"


def build(chosen: Sequence[PySite], root: Path = REPO_ROOT) -> list[GeneratedMutant]:
    """The catalog-style mutants of ``chosen`` sites (cosmic-ray applies each to its file's text)."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    texts: dict[str, str] = {}
    mutants = []
    for site in chosen:
        if site.file not in texts:
            texts[site.file] = Path(root, site.file).read_text()
        source = texts[site.file]
        operator = cosmic_ray.plugins.get_operator(site.operator)()
        mutated = mutate_code(source, operator, site.occurrence)
        if mutated is None:
            raise ValueError(f"{site.id}: cosmic-ray made no mutation at occurrence {site.occurrence}")
        try:
            with warnings.catch_warnings():  # (``x is "a"`` from ``==``: a SyntaxWarning, the mutant's own business)
                warnings.simplefilter("ignore", SyntaxWarning)
                compile(mutated, site.file, "exec")
        except SyntaxError as exc:
            raise ValueError(f"{site.id}: cosmic-ray's mutation is not valid Python ({exc}): teach _incompetent to "
                             "skip such positions") from None
        target = TARGETS[site.file]
        sub, _ = substitution(site.file, source, mutated, target.part)
        mutants.append(GeneratedMutant(
            name=site.name, idea=f"{site.operator} (cosmic-ray) at line {site.line}: {_change(sub)}", target=site.file,
            substitutions=(sub,), tests=target.tests, id=site.id, operator=site.operator, file=site.file,
            line=site.line, generated="python"))
    return mutants


def generate(root: Path = REPO_ROOT, *, targets: Sequence[str] = (), operators: Sequence[str] = (),
             equivalents: dict[str, str] | None = None) -> list[GeneratedMutant]:
    """Every generated mutant of the targets that is not equivalent, in file order."""
    return build([s for s in sites(root, targets=targets, operators_=operators, equivalents=equivalents)
                  if s.equivalent is None], root)


def strata(every: Sequence[PySite], chosen: Sequence[PySite] | None = None) -> dict[str, dict[str, int]]:
    """``{target: {"population", "sampled", "equivalent"}}`` (``score.run_record``'s strata): the population is the
    non-equivalent sites; ``chosen`` None: every one of them runs."""
    out: dict[str, dict[str, int]] = {}
    for s in every:
        row = out.setdefault(s.file, {"population": 0, "sampled": 0, "equivalent": 0})
        row["equivalent" if s.equivalent else "population"] += 1
    for s in (c for c in every if c.equivalent is None) if chosen is None else chosen:
        out[s.file]["sampled"] += 1
    return dict(sorted(out.items()))


def draw(every: Sequence[PySite], n: int | None, seed: int) -> tuple[list[PySite], dict[str, dict[str, int]]]:
    """(the sites a run takes, the strata) of ``every`` (``sites``' output): ``n`` non-equivalent sites stratified
    per target file, drawn by ``seed`` (``sampling.stratified_sample``: the same seed draws the same ids anywhere),
    or every one (``n`` None)."""
    from .sampling import stratified_sample

    live = [s for s in every if s.equivalent is None]
    chosen = live if n is None else stratified_sample(live, n, seed, target=lambda s: s.file, ident=lambda s: s.id)[0]
    return chosen, strata(every, chosen)


def sample(n: int | None, seed: int, root: Path = REPO_ROOT, *, targets: Sequence[str] = (),
           operators: Sequence[str] = (), equivalents: dict[str, str] | None = None
           ) -> tuple[list[GeneratedMutant], dict[str, dict[str, int]]]:
    """(the mutants, the strata) of a run: ``draw`` over the targets' sites; only the drawn ones are built."""
    chosen, counts = draw(sites(root, targets=targets, operators_=operators, equivalents=equivalents), n, seed)
    return build(chosen, root), counts
