"""The Metal arm in CI, without a Mac: every Metal unit the suite can launch type-checks clean.

For every instance of ``impl.kernels.launches.metal_launches()`` (the units ``test_metal_source.py`` holds
equal to MLX's), ``impl.kernels.metal_frontend`` type-checks MLX's preamble and the unit with clang against the
project's Metal standard library stand-in (``metal_stand_in/``, tested by ``test_metal_stand_in.py``): address
spaces, half / bfloat conversions, vector types, SIMD-group and simdgroup_matrix signatures, barriers, and per
instance at most 32 KiB of threadgroup memory and 31 buffers. A failure names the kernel, its template instance,
its inputs' address spaces (``d`` device, ``c`` constant) and the body or header line.

What this cannot see (a Mac settles it: ``parity/test_metal_probes.py`` in the macos-metal job): numerics,
whether Apple's compiler accepts the code it generates, pipeline limits (``maxTotalThreadsPerThreadgroup``).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from impl import kvq4_decode as kvq4
from impl import multi_query as mq
from impl import normalized_argmax as argmax
from impl import paged_attention as paged
from impl.kernels import KernelSpec, Launch
from impl.kernels.launches import metal_launches
from impl.kernels.metal_frontend import (CLANG, SKIP_REASON, THREADGROUP_MEMORY_MAX, check_launches, check_unit,
                                         launch_label, launch_regions)

pytestmark = pytest.mark.skipif(CLANG is None, reason=SKIP_REASON)


@pytest.fixture(scope="module")
def checked():
    launches = metal_launches()
    return launches, check_launches(launches)


@pytest.mark.slow(seconds=10)
def test_every_metal_unit_type_checks(checked, gate):
    """One flag per distinct unit, gated equal to all-clean: the report reads the unit count and the failing
    count from this record (``reports.render.metal_arm_text``); the errors are printed, a line each."""
    _, results = checked
    failures = [error for r in results for error in r.errors]
    print(f"{len(failures)} errors in {sum(not r.clean for r in results)} of {len(results)} Metal units:",
          *failures[:40], sep="\n")
    gate.equal(np.array([r.clean for r in results]), np.ones(len(results), bool), kernel="metal_frontend",
               what="Metal units that type-check clean (clang against impl/kernels/metal_stand_in)")


def test_threadgroup_memory_per_kernel(checked):
    """Each kernel's largest instance is within 32 KiB, and is the instance its module says is largest: kvq4 at
    its Metal GQA bound (``max_gqa_factor('metal')``), the paged partial at Dv = 256 with 8 rows per KV head,
    multi-query at the head dim whose staged K / V blocks are widest."""
    _, results = checked
    largest: dict[str, tuple[int, str]] = {}
    for r in results:
        name = r.label.split("<", 1)[0]
        largest[name] = max(largest.get(name, (0, "")), (r.threadgroup_bytes, r.label))
    assert all(b <= THREADGROUP_MEMORY_MAX for b, _ in largest.values()), largest
    assert f"REP={kvq4.max_gqa_factor('metal')}," in largest[kvq4.PARTIAL.name][1]
    assert largest[kvq4.PARTIAL.name][0] == kvq4.threadgroup_bytes(kvq4.max_gqa_factor("metal"))
    assert "DV=256" in largest[paged.PARTIAL.name][1], largest[paged.PARTIAL.name]
    # multi-query's K / V stages: 2 buffers x block_keys(D) rows x (D + ROW_PAD) halves; its largest D is 128
    # (at D > 248 block_keys halves the rows).
    staged = {d: 2 * mq.block_keys(d) * (d + mq.launch.ROW_PAD) * 2 for d in (64, 80, 128, 256)}
    widest = max(staged, key=staged.get)
    assert f"D={widest}," in largest[mq.PARTIAL.name][1], (staged, largest[mq.PARTIAL.name])
    assert largest[mq.PARTIAL.name][0] == staged[widest]
    assert largest[argmax.ROW.name][0] == 2 * 32 * 4  # bests and ids: one slot per SIMD group


def test_the_constant_space_defect_is_caught():
    """The defect this check was built for: a helper declared on ``const device T*`` called with an input below 8
    elements, which MLX passes as ``const constant T*``. A copy of the element loop that normalized argmax's header
    had before its fix fails, naming the kernel, the instance (``[c]``: the input is constant) and the body line;
    the same kernel over 8 elements (device) is clean."""
    header = ("template <typename T>\nMETAL_FUNC float first(const device T* x) { return float(x[0]); }\n")
    spec = KernelSpec("constant_space_probe", ("x",), ("out",),
                      "  out[0] = first(x);  // a device helper\n", header=header)
    small = Launch(spec, (mx.zeros((5,), mx.bfloat16),), (), (1, 1, 1), (1, 1, 1), ((1,),), (mx.float32,))
    big = Launch(spec, (mx.zeros((8,), mx.bfloat16),), (), (1, 1, 1), (1, 1, 1), ((1,),), (mx.float32,))
    bad = check_unit(small.metal_source(), launch_label(small), launch_regions(small))
    assert not bad.clean and any("constant_space_probe<>[c]: body line 1: no matching function for call to 'first'"
                                 in e for e in bad.errors), bad.errors
    good = check_unit(big.metal_source(), launch_label(big), launch_regions(big))
    assert good.clean, good.errors


def test_mlx_closes_a_signature_early(gate):
    """MLX's generator, with shape parameters, two outputs and no thread attribute, emits ``) {`` after the first
    output (``metal_source``'s comment): the unit does not compile. Recorded as a finding of MLX's; the check sees
    it, so a kernel written that way fails here before a Mac would."""
    spec = KernelSpec("early_close_probe", ("x",), ("a", "b"), "  a[0] = x_shape[0]; b[0] = 1.0f;\n")
    launch = Launch(spec, (mx.zeros((9,)),), (), (1, 1, 1), (1, 1, 1), ((1,), (1,)), (mx.float32, mx.float32))
    unit = launch.mlx_metal_source()
    signature = unit.split("[[kernel]]", 1)[1]
    result = check_unit(unit, launch_label(launch), launch_regions(launch))
    gate.finding("mx.fast.metal_kernel closes the signature early (shape parameters, two outputs, no thread "
                 "attribute)", {"mlx": mx.__version__, "signature_closings": signature.count(") {"),
                                "type_checks": result.clean, "first_error": (result.errors or [""])[0][-160:]},
                 kernel="metal_frontend")
    assert signature.count(") {") in (1, 2)  # 1: fixed upstream (then the unit type-checks), 2: as in 0.32.4
    assert result.clean == (signature.count(") {") == 1), result.errors


def test_a_0d_input_is_a_reference():
    """MLX passes a 0-d input as ``const constant T&``: a body indexing it as a pointer does not compile (no public
    call of the project gives a kernel a 0-d input: ``launches.metal_launches`` has none), one reading it as a value
    does."""
    as_pointer = KernelSpec("zero_d_probe", ("x",), ("out",), "  out[0] = x[0];\n")
    as_value = KernelSpec("zero_d_value_probe", ("x",), ("out",), "  out[0] = x;\n")
    for spec, clean in ((as_pointer, False), (as_value, True)):
        launch = Launch(spec, (mx.array(1.5),), (), (1, 1, 1), (1, 1, 1), ((1,),), (mx.float32,))
        assert "const constant float& x [[buffer(0)]]" in launch.metal_source()
        result = check_unit(launch.metal_source(), launch_label(launch), launch_regions(launch))
        assert result.clean == clean, result.errors
        if not clean:
            assert any("body line 1: subscripted value is not an array" in e for e in result.errors), result.errors
    assert not [launch for launch in metal_launches() if any(a.ndim == 0 for a in launch.inputs)]
