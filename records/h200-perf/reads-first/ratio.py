"""One process's kernel time of the paged kernels (the cuda arm's default: the ring, reads first) beside MLX SDPA on
contiguous K / V at the issue's three D128 target shapes and N64k between them (perf.sweep.sweep, ``rounds``
measurements of each); with ``--summary``, the ratio over processes from their documents.
    python3 ratio.py CALLS ROUNDS OUT.json
    python3 ratio.py --summary ratio1.json ratio2.json ..."""
import json
import statistics
import sys

SHAPES = [(32, 8, 1, 128, 131072), (32, 8, 1, 128, 65536), (32, 8, 1, 128, 32768), (8, 1, 1, 128, 32768)]


def summary(paths):
    """Per shape: each process's median over its rounds, paged and SDPA, their ratio; then the median ratio over the
    processes and how many processes had the paged kernels at or below SDPA."""
    docs = [json.load(open(p)) for p in paths]
    for dims in SHAPES:
        ratios = []
        for path, doc in zip(paths, docs):
            paged, sdpa = (doc.get(f"{dims}|{label}") for label in ("paged", "sdpa"))
            if not paged or not sdpa:
                print(f"{dims} {path}: incomplete")
                continue
            p, s = (statistics.median(m["median_us"] for m in runs) for runs in (paged, sdpa))
            ratios.append(p / s)
            print(f"{dims} {path}: paged {p:.1f} us  sdpa {s:.1f} us  ratio {p / s:.3f}")
        if ratios:
            print(f"{dims} over {len(ratios)} processes: median ratio {statistics.median(ratios):.3f}, "
                  f"range {min(ratios):.3f}-{max(ratios):.3f}, at or below 1.0 in {sum(r <= 1.0 for r in ratios)}")


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2:])
        sys.exit(0)
    import impl.paged_attention as paged
    from perf.sweep import sweep

    calls, rounds, out_path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    out = sweep(SHAPES, {"paged": lambda: paged.set_matrix_ring(3)}, calls=calls, rounds=rounds,
                log=lambda line: print(line, flush=True))
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)
