"""kvq4's direct path under racecheck, one case per process, and initcheck's report on the faulting geometry.
python3 kvq4san.py OUT.txt"""
import subprocess, sys, time
from concurrent.futures import ThreadPoolExecutor
GEOS = ["H4-KVH2-N97-block64-contiguous", "H12-KVH2-N301-block100-window", "H8-KVH2-N403-block101-contiguous",
        "H8-KVH1-N513-block512-slice", "H16-KVH2-N1000-block256-heads", "H16-KVH8-N2049-block512-contiguous",
        "H24-KVH4-N1500-block512-transposed", "H8-KVH2-N1203-blockdefault-window", "H8-KVH1-N700-blockdefault-reversed"]
IDS = [f"parity/test_kvq4_decode.py::test_kvq4_decode[cuda-direct-bfloat16-{g}]" for g in GEOS]
IDS += [f"parity/test_kvq4_decode.py::test_kvq4_decode[cuda-seed-bfloat16-{g}]" for g in GEOS[4:5]]
HEADS = "parity/test_kvq4_decode.py::test_kvq4_decode[cuda-direct-bfloat16-H16-KVH2-N1000-block256-heads]"


def san(tool, node, extra=()):
    cmd = ["compute-sanitizer", "--tool", tool, *extra, "--kernel-name", "kns=custom_kernel_", "--target-processes",
           "all", sys.executable, "-m", "pytest", node, "--device", "gpu", "-q", "-p", "no:cacheprovider"]
    t = time.time()
    try:
        d = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
        text = d.stdout + d.stderr
    except subprocess.TimeoutExpired:
        text = "TIMEOUT"
    lines = text.splitlines()
    summ = [l for l in lines if "SUMMARY" in l or " passed" in l or " failed" in l or "Internal" in l]
    return tool, " ".join(extra), node, round(time.time() - t), summ, lines


with ThreadPoolExecutor(6) as pool:
    jobs = [pool.submit(san, "racecheck", n) for n in IDS]
    jobs += [pool.submit(san, "initcheck", HEADS), pool.submit(san, "initcheck", IDS[0]),
             pool.submit(san, "racecheck", HEADS, ("--racecheck-detect-level", "error")),
             pool.submit(san, "racecheck", HEADS, ("--racecheck-memcpy-async", "no")),
             pool.submit(san, "memcheck", HEADS, ("--padding", "512"))]
    with open(sys.argv[1], "w") as f:
        for j in jobs:
            tool, extra, node, secs, summ, lines = j.result()
            f.write(f"=== {tool} {extra} {node} ({secs} s)\n" + "\n".join(summ) + "\n")
            if tool == "initcheck" or "heads" in node:
                body = [l for l in lines if l.startswith("=========") and "Host Frame" not in l]
                f.write("--- sanitizer lines (Host Frames dropped), first 60:\n" + "\n".join(body[:60]) + "\n")
print(open(sys.argv[1]).read()[-6000:])
