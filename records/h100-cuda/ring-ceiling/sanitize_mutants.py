"""The suite's compute-sanitizer test (parity/test_paged_attention.py::test_ring_under_compute_sanitizer, racecheck
and memcheck) on generated ring mutants whose wrongness is an ordering or an unused access, which the gates see only
by timing: each mutant applied to its own copy of the tree, all of them at once.
    python3 sanitize_mutants.py OUT_DIR ID [ID ...]"""
import os
import subprocess
import sys
from pathlib import Path

from mutants.generated.bodies import all_mutants
from mutants.runner import apply_mutant, copy_tree, tree_files

out, ids = Path(sys.argv[1]), sys.argv[2:]
by_id = {m.id: m for m in all_mutants()}
files = tree_files()
runs = []
for i, mid in enumerate(ids):
    tree = Path(f"/tmp/sanitize-mutant-{i}")
    copy_tree(tree, files)
    apply_mutant(by_id[mid], tree)
    log = out / f"mutant{i}.txt"
    with open(log, "w") as f:
        f.write(f"# {mid}\n")
        f.flush()
        env = {**os.environ, "PYTHONPATH": f"{tree}:{os.environ.get('PYTHONPATH', '')}"}
        runs.append((mid, log, subprocess.Popen(
            [sys.executable, "-m", "pytest", "parity/test_paged_attention.py", "-k",
             "test_ring_under_compute_sanitizer and cuda", "--device", "gpu", "-q", "-rfEs", "-p", "no:cacheprovider"],
            cwd=tree, stdout=f, stderr=subprocess.STDOUT, env=env)))
for mid, log, proc in runs:
    rc = proc.wait()
    text = log.read_text().splitlines()
    print(mid, f"pytest exit {rc}", *[line for line in text if line.startswith(("FAILED", "PASSED", "ERROR"))
                                      or " passed" in line or " failed" in line], sep=" | ", flush=True)
