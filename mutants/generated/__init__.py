"""Generated mutants: every operator mutant of the kernel bodies, sampled or all, and the score they give.

``bodies`` derives the mutants from the text of each kernel body file (``.metal`` / ``.h``), ``equivalents``
lists those that cannot change any output (skipped), ``sampling`` draws a seeded stratified sample, ``score``
turns the ``mutant`` / ``mutation_run`` records into a score per target with its 95% interval, and
``python -m mutants.generated`` runs them through ``mutants.runner`` (docs/generated-mutants.md).
"""
