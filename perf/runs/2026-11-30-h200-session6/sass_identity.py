"""Machine-code identity of every CUDA kernel instance the nvcc compile tests build, for edits made without a GPU.

Renders each launch of ``impl/kernels/test_cuda_compile*.py`` (paged, strided kvq4, argmax, kvq4 seed, multi-query
partial and merge at both schedules, the simdgroup probes), compiles it to an sm_90 cubin with nvcc, and writes one
line per kernel: its spec name and template arguments (not the name's digest, which covers the source text) and a
hash of its ``.text`` section (the SASS bytes). Run on two trees (e.g. a ``git worktree`` of the commit the H200 gated)
and diff the files: equal lines mean the GPU runs the same instructions. Usage: python sass_identity.py OUT.txt

2026-11-30: HEAD after the prelude's helpers, the braces and ``tensor_mma`` as a call of ``tensor_mma_rows16`` against
100a2a2 (gated on the H200 in calls E4 / E5): every line equal.
"""
import hashlib
import pathlib
import subprocess
import sys
import tempfile

from impl.kernels import test_cuda_compile as plain
from impl.kernels import test_cuda_compile_decode as decode
from impl.kernels.nvcc import ARCH, NVCC, STANDIN_UTILS

work = pathlib.Path(tempfile.mkdtemp())
(work / "mlx/backend/cuda/device").mkdir(parents=True)
(work / "mlx/backend/cuda/device/utils.cuh").write_text(STANDIN_UTILS)
probes = [decode.probe_launch(*(decode.mx.zeros((64,)) for _ in range(3)), decode.mx.zeros((256,)), t)
          for t in (False, True)]
launches = (plain.paged_launches() + plain.strided_launches() + plain.argmax_launches() + decode.kvq4_launches()
            + decode.multi_query_launches() + probes)
lines = {}
for launch in launches:
    key = f"{launch.spec.name} {launch.template}"
    if key in lines:
        continue
    unit = work / "u.cu"
    unit.write_text(launch.cuda_source())
    built = subprocess.run([NVCC, f"-arch={ARCH}", "-std=c++17", "-cubin", str(unit), "-o", str(work / "u.cubin"),
                            f"-I{work}"], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    data = (work / "u.cubin").read_bytes()
    sections = subprocess.run(["readelf", "-S", "-W", str(work / "u.cubin")], capture_output=True, text=True).stdout
    code = b""
    for row in sections.replace("[ ", "[").splitlines():
        f = row.split()
        if len(f) > 5 and f[1].startswith(".text.") and "custom_kernel" in f[1]:
            code += data[int(f[4], 16):int(f[4], 16) + int(f[5], 16)]
    assert code, f"no kernel code in the cubin of {key}"
    lines[key] = f"{key}: {len(code)} bytes, sha256 {hashlib.sha256(code).hexdigest()[:16]}"
pathlib.Path(sys.argv[1]).write_text("\n".join(sorted(lines.values())) + "\n")
print(f"{len(lines)} kernel instances")
