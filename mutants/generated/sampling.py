"""A seeded, deterministic sample of generated mutants, stratified per target (docs/generated-mutants.md).

``allocate(populations, n)`` shares ``n`` among the targets in proportion to their populations (largest
remainder; at least one each when ``n`` allows), so the pooled score of a sample estimates the whole set's.
Within a target the sample is the ``k`` mutants whose ``rank(seed, id)`` (a SHA-256 of the seed and the stable
id) is smallest: the same seed draws the same mutants on every machine, and a mutant added to or removed from
a target moves at most one other in or out of its sample.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TypeVar

__all__ = ["allocate", "rank", "stratified_sample"]

M = TypeVar("M")


def allocate(populations: Mapping[str, int], n: int) -> dict[str, int]:
    """Mutants per target for a sample of ``n`` in all: proportional, by largest remainder (ties: by name); then
    every non-empty target gets at least 1 when ``n`` is at least the number of targets (taken from the target
    most above its quota); none above its population."""
    if n < 0:
        raise ValueError(f"a sample size must be >= 0, got {n}")
    sizes = {t: int(p) for t, p in populations.items()}
    if any(p < 0 for p in sizes.values()):
        raise ValueError(f"populations must be >= 0, got {sizes}")
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    live = sorted(t for t, p in sizes.items() if p > 0)
    quotas = {t: n * sizes[t] / total for t in live}
    shares = {t: math.floor(quotas[t]) for t in live}
    for t in sorted(live, key=lambda t: (-(quotas[t] - shares[t]), t))[:n - sum(shares.values())]:
        shares[t] += 1
    if n >= len(live):
        for t in (t for t in live if shares[t] == 0):
            donor = max((u for u in live if shares[u] > 1), key=lambda u: (shares[u] - quotas[u], u))
            shares[donor] -= 1
            shares[t] = 1
    return {t: shares.get(t, 0) for t in sizes}


def rank(seed: int, mutant_id: str) -> str:
    """A mutant's place in the seed's order (hex digest: compared as text)."""
    return hashlib.sha256(f"{seed}:{mutant_id}".encode()).hexdigest()


def stratified_sample(mutants: Sequence[M], n: int, seed: int, *, target=lambda m: m.target,
                      ident=lambda m: m.id) -> tuple[list[M], dict[str, dict[str, int]]]:
    """(the sample, in the mutants' order; ``{target: {"population": P, "sampled": k}}``) of ``n`` mutants."""
    groups: dict[str, list[M]] = defaultdict(list)
    for m in mutants:
        groups[target(m)].append(m)
    shares = allocate({t: len(g) for t, g in groups.items()}, n)
    chosen = set()
    for t, group in groups.items():
        chosen |= {ident(m) for m in sorted(group, key=lambda m: rank(seed, ident(m)))[:shares[t]]}
    sample = [m for m in mutants if ident(m) in chosen]
    strata = {t: {"population": len(g), "sampled": shares[t]} for t, g in sorted(groups.items())}
    return sample, strata
