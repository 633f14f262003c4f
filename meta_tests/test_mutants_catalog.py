"""The mutation score: every mutant of the catalog dies (``mutants/``; ``make mutants`` runs the same).

The whole catalog runs here, 2 mutants at a time, each against its killing
tests in a temporary copy of the tree, after the clean check (the union of the
killing tests passes on the unmutated tree). Measured on 2 cores with the ci
profile: about 50 s for 38 mutants alone, under 2 minutes inside ``make test``
(README "Mutants"). One ``mutant`` record per mutant goes to the run's
results file, so ``make gate``'s report shows the score; a survivor or an
error fails this test, and with it ``make test`` and ``make gate``.

``MLXGATE_MUTANTS`` chooses what runs: ``all`` (default), ``rotate:N`` (the
1/N of the catalog picked by today's date: the fallback should the catalog
outgrow CI's budget) or ``off`` (a skip that says so, for local loops).
"""

from __future__ import annotations

import os

import pytest

from mutants.catalog import CATALOG
from mutants.runner import rotation, run_catalog

SELECTION_ENV = "MLXGATE_MUTANTS"


def selected(value: str):
    if value == "all":
        return list(CATALOG)
    if value.startswith("rotate:") and value.removeprefix("rotate:").isdigit():
        return rotation(CATALOG, int(value.removeprefix("rotate:")))
    raise ValueError(f"{SELECTION_ENV} must be all, rotate:N or off, got {value!r}")


def test_selection_values():
    assert len(selected("all")) == len(CATALOG)
    assert 0 < len(selected("rotate:4")) <= -(-len(CATALOG) // 4)
    with pytest.raises(ValueError, match=SELECTION_ENV):
        selected("some")


@pytest.mark.slow(seconds=170)  # the catalog on 2 cores beside the rest of make test
def test_every_mutant_is_killed(request):
    choice = os.environ.get(SELECTION_ENV, "all")
    if choice == "off":
        pytest.skip(f"{SELECTION_ENV}=off: the mutant catalog is not part of this pytest run")
    mutants = selected(choice)
    lines = []
    report = run_catalog(mutants, device=request.config.mlxgate_device, workers=2, log=lines.append)
    failures = [f"{r.status.upper()} {r.mutant.name}: {r.mutant.idea}\n  tests: {', '.join(r.tests)}\n"
                f"{r.detail if r.status != 'survived' else ''}{r.diff}"
                for r in report.results if not r.killed]
    assert not failures, (f"{len(failures)} of {len(mutants)} mutants not killed "
                          f"(score {report.score:.0%}):\n" + "\n".join(failures) + "\n" + "\n".join(lines))
