"""One generated mutant under compute-sanitizer memcheck: python3 oobq.py ID OUT.txt PYTEST_ARGS..."""
import shutil, subprocess, sys, time
from pathlib import Path
from mutants.generated.bodies import all_mutants
from mutants.runner import apply_mutant, copy_tree, tree_files, mutant_diff

ident, out, args = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
(m,) = [m for m in all_mutants() if m.id == ident]
tree = Path("/tmp/oobq-tree"); shutil.rmtree(tree, ignore_errors=True); tree.mkdir()
copy_tree(tree, tree_files()); apply_mutant(m, tree)
cmd = ["compute-sanitizer", "--tool", "memcheck", "--kernel-name", "kns=custom_kernel_", "--target-processes", "all",
       "--error-exitcode", "86", sys.executable, "-m", "pytest", *args, "--device", "gpu", "-x", "-q", "-p",
       "no:cacheprovider"]
t = time.time()
done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=400)
text = done.stdout + done.stderr
lines = text.splitlines()
keep = [l for l in lines if l.startswith("=========") and "Host Frame" not in l][:80]
keep += [l for l in lines if " passed" in l or " failed" in l][-3:]
out.write_text(f"{ident}\n{mutant_diff(m)}\n$ {' '.join(cmd)}\nexit {done.returncode}, {time.time()-t:.0f} s\n"
               + "\n".join(keep) + "\n")
print(out.read_text()[-3000:])
