"""Mutation testing of the suite: a catalog of realistic kernel and cache bugs the suite must kill.

``python -m mutants`` (``make mutants``) applies each mutant of ``catalog.CATALOG``
to a temporary copy of the tree, runs the tests named to kill it there, and
records killed or survived (``runner``). The README's "Mutants" section has the
details.
"""

from .catalog import CATALOG, Mutant, Substitution, by_name
from .runner import Report, StaleMutant, run_catalog

__all__ = ["CATALOG", "Mutant", "Report", "StaleMutant", "Substitution", "by_name", "run_catalog"]
