"""After the GPU calls: the CUDA prelude's fragment helpers (a_fragment / b_fragment / store_rows16, replacing three
inline copies in metal_simdgroup.cuh) leave multi-query's partial PTX unchanged. Renders the partial at 4 geometries
x 3 dtypes (one and two stages, two tiles and one, D 80 / 128 / 256), compiles each to PTX with nvcc (sm_90), and
writes them to argv[1] with the kernel-name digest and the unit's internal hashes masked. Run once on each tree
(git stash) and compare the two files: identical (2026-11-30, commit after 8f71a8d)."""
import pathlib
import re
import subprocess
import sys
import tempfile

import mlx.core as mx

from impl import multi_query as mq
from impl.kernels.nvcc import NVCC, STANDIN_UTILS

work = pathlib.Path(tempfile.mkdtemp())
(work / "mlx/backend/cuda/device").mkdir(parents=True)
(work / "mlx/backend/cuda/device/utils.cuh").write_text(STANDIN_UTILS)
texts = []
for h, kvh, L, d, stages in ((32, 8, 8, 128, 2), (16, 8, 8, 256, 2), (6, 1, 4, 256, 1), (12, 2, 3, 80, 2)):
    for dtype in (mx.bfloat16, mx.float16, mx.float32):
        q, kv = mx.zeros((1, h, L, d), dtype), mx.zeros((1, kvh, 1000, d), dtype)
        unit = work / "u.cu"
        unit.write_text(mq.partial_launch(q, kv, kv, mx.ones((1,), dtype), 8, stages).cuda_source())
        subprocess.run([NVCC, "-arch=sm_90", "-std=c++17", "-ptx", str(unit), "-o", str(work / "u.ptx"), f"-I{work}"],
                       check=True)
        ptx = re.sub(r"multi_query_partial_[0-9a-f]{10}", "NAME", (work / "u.ptx").read_text())
        texts.append(re.sub(r"_[0-9a-f]{8}_[0-9]+_u_cu_[0-9a-f]{8}", "H", ptx))
pathlib.Path(sys.argv[1]).write_text("\n".join(texts))
