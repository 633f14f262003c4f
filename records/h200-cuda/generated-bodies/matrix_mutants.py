"""Generated body mutants of the matrix partial alone (impl/paged_attention/partial_matrix.metal), a seeded sample,
on the cuda arm: python3 matrix_mutants.py RESULTS N (no clean check: records/h200-cuda/matrix-partial/gates.txt ran
the same tests on the unmutated tree)."""
import random
import sys

from mutants.generated import __main__ as cli

args = cli.parse_args(["--bodies", "--targets", "paged_attention", "--device", "gpu", "--arm", "cuda",
                       "--workers", "15", "--profile", "dev", "--timeout", "150", "--no-clean-check",
                       "--results", sys.argv[1]])
mutants, _ = cli.selection(args)
mine = [m for m in mutants if m.file == "impl/paged_attention/partial_matrix.metal"]
chosen = random.Random(1).sample(mine, min(int(sys.argv[2]), len(mine)))
print(f"{len(chosen)} of the matrix partial's {len(mine)} non-equivalent generated mutants", flush=True)
status, _ = cli.execute(args, chosen, {"paged_attention": {"population": len(mine), "sampled": len(chosen)}})
sys.exit(status)
