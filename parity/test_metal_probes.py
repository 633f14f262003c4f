"""The Metal probes (``impl/metal_probes.py``): what the metal arm's bodies assume and only an Apple GPU settles.

Each ``test_*`` with an ``arm`` runs on the metal arm only (``@pytest.mark.arms("metal")``): in the macos-metal
workflow's ``make gate`` (DEVICE=gpu, under Metal's shader and API validation), after the Metal canary. Elsewhere
they are collected and skipped, the reason naming why the metal arm is unavailable (conftest.py). Each records its
measurement through the ``gate`` fixture, and its docstring says what a pass proves. One probe settles one question:

* ``test_simdgroup_fragment_ownership``: the (row, column) each lane's ``thread_elements()`` hold;
* ``test_simdgroup_load_origin_and_transpose``: how ``simdgroup_load`` reads ``ulong2(column, row)`` and
  ``transpose_matrix`` from device and threadgroup memory;
* ``test_a_1024_thread_group_runs`` and ``test_argmax_groups_fit_the_pipeline_limit``: that the pipelines take
  normalized argmax's 1024-thread groups;
* ``test_half_and_bfloat_conversions_round_to_nearest_even``: float32 -> half / bfloat, bit for bit;
* ``test_special_values_follow_ieee_under_the_default_math_mode``: the -inf / NaN arithmetic of the masking.

The tests without an arm run everywhere: they hold the probes' own expectations to independent references (so a
Mac's failure is the GPU's, not the oracle's) and the bodies to what the probes cover.
"""

from __future__ import annotations

import re
import struct

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest

from impl import kvq4_decode, multi_query, normalized_argmax, paged_attention
from impl import metal_probes as probes
from impl.kernels import KernelSpec
from parity.gates import GateFailure
from reference.metrics import canonical_nan


class AllGates:
    """Gate calls that each record, pass or fail, and fail the test once at the end with every failure: a probe's
    answer is the whole table, not its first wrong entry."""

    def __init__(self, gate):
        self.gate, self.failures, self.calls = gate, [], 0

    def __getattr__(self, name):
        method = getattr(self.gate, name)

        def call(*args, **kwargs):
            self.calls += 1
            try:
                return method(*args, **kwargs)
            except GateFailure as failure:
                self.failures.append(str(failure))

        return call

    def done(self) -> None:
        if self.failures:
            pytest.fail(f"{len(self.failures)} of {self.calls} gates failed:\n" + "\n".join(self.failures),
                        pytrace=False)


def host(x) -> np.ndarray:
    return np.array(x)


# --- 1. simdgroup_matrix fragment ownership ----------------------------------------------------------------------


def layout_diagnosis(held: np.ndarray, assumed: np.ndarray) -> str:
    """Where the lanes' elements differ from the assumed layout, as (row, column) pairs (the source holds r*8+c)."""
    pairs = held.reshape(32, 2), assumed.reshape(32, 2)
    wrong = [lane for lane in range(32) if not np.array_equal(pairs[0][lane], pairs[1][lane])]
    if not wrong:
        return ""

    def cell(v) -> str:
        v = float(v)
        return f"({int(v) // 8}, {int(v) % 8})" if v.is_integer() and 0 <= v < 64 else f"{v!r}"

    shown = "; ".join(f"lane {lane} holds {cell(held[2 * lane])}, {cell(held[2 * lane + 1])}, assumed "
                      f"{cell(assumed[2 * lane])}, {cell(assumed[2 * lane + 1])}" for lane in wrong[:8])
    return f"; {len(wrong)} lanes differ: {shown}"


@pytest.mark.arms("metal")
def test_simdgroup_fragment_ownership(arm, gate):
    """A pass proves multi_query.h's ``sg_fragment_row`` / ``sg_fragment_col`` are Metal's fragment layout for
    ``simdgroup_float8x8`` and ``simdgroup_half8x8``: after ``simdgroup_load`` of the 8x8 whose element (r, c) is
    r*8 + c, lane l's ``thread_elements()[e]`` is element (sg_fragment_row(l), sg_fragment_col(l) + e), read in
    both directions (the header's functions as Metal compiled them equal their Python port; every lane's elements,
    written out at slot 2l + e, hold the assumed cells; and a matrix whose lanes set ``thread_elements()`` by that
    layout stores row-major as r*8 + c). The multi-query partial addresses thread_elements() this way: it writes
    its query fragments and softmax weights, reads and masks its scores, and reads its output rows by it."""
    gates = AllGates(gate.bind(kernel=probes.FRAGMENT.name))
    held_f, held_h, assumed, wrote_f, wrote_h = probes.fragment_launch().run(arm)
    port = np.array([probes.fragment_row(l) * 8 + probes.fragment_col(l) + e for l in range(32) for e in (0, 1)],
                    dtype=np.uint32)
    gates.equal(assumed, port, what="multi_query.h's sg_fragment_row(l) * 8 + sg_fragment_col(l) + e as Metal "
                                    "computed it, against impl.metal_probes.fragment_row / fragment_col")
    for name, held, dtype in (("simdgroup_float8x8", held_f, np.float32), ("simdgroup_half8x8", held_h, np.float16)):
        got = host(held)
        gates.bit_exact(got, port.astype(dtype), what=f"{name}: lane l's thread_elements()[e] at slot 2l + e hold "
                                                      f"element (sg_fragment_row(l), sg_fragment_col(l) + e)"
                                                      + layout_diagnosis(got, port.astype(dtype)), case=name)
    for name, wrote, dtype in (("simdgroup_float8x8", wrote_f, np.float32), ("simdgroup_half8x8", wrote_h, np.float16)):
        gates.bit_exact(wrote, np.arange(64, dtype=dtype), case=f"{name} write",
                        what=f"{name}: thread_elements() set by the assumed layout, then simdgroup_store: element "
                             "(r, c) = r*8 + c")
    gates.done()


# --- 2. simdgroup_load: origin and transpose -----------------------------------------------------------------------


def reading_diagnosis(case: probes.LoadCase, got: np.ndarray) -> str:
    """Which reading of the origin and transpose the GPU's matrix matches, when it is not the project's."""
    got = got.astype(np.float32)
    if np.array_equal(got, probes.load_expected(case)):
        return ""
    if np.array_equal(got, probes.load_expected(case, "swapped")):
        return ("; the GPU read the origin as (row, column)" + (", i.e. in the transposed matrix's own coordinates"
                                                                if case.transpose else ""))
    flipped = probes.LoadCase(case.slot, case.element, case.memory, not case.transpose, case.origin, case.via)
    for reading in ("project", "swapped"):
        if np.array_equal(got, probes.load_expected(flipped, reading)):
            return f"; the GPU's matrix is the {reading} reading with transpose={str(flipped.transpose).lower()}"
    return "; it matches neither reading of the origin, transposed or not"


@pytest.mark.arms("metal")
def test_simdgroup_load_origin_and_transpose(arm, gate):
    """A pass proves ``simdgroup_load(m, src, elements_per_row, ulong2(col, row), transpose)`` reads what the
    project's model says (``impl/kernels/metal_simdgroup.cuh``): the 8x8 block whose element (r, c) is
    src[(row + r) * elements_per_row + col + c], transposed when ``transpose``, from device and from threadgroup
    memory, for float and half matrices, with elements_per_row = 40 and origins (0, 0), (8, 0), (16, 0), (6, 5),
    (16, 8); that the origin and the pointer offset src + row * 40 + col are the same load; and that
    multi_query.h's ``simdgroup_load_x4`` (the key fragments: transposed; the value fragments: plain) gives the
    four 8x8 blocks at columns 0, 8, 16, 24. Each matrix is stored by ``simdgroup_store`` (no fragment layout
    assumed); that lane l's thread_elements() then hold its cells by the assumed layout is checked too, per
    element type, against the stored matrix (so a wrong load is reported once). On a failure the message says
    which reading the GPU follows (the origin as (row, column), an ignored transpose, neither)."""
    gates = AllGates(gate.bind(kernel=probes.LOAD.name))
    stored_f, held_f, stored_h, held_h = (host(x) for x in probes.load_launch().run(arm))
    outputs = {"float": (stored_f, held_f, np.float32), "half": (stored_h, held_h, np.float16)}
    for case in probes.LOAD_CASES:
        stored, _, dtype = outputs[case.element]
        got = stored[64 * case.slot:64 * case.slot + 64].reshape(8, 8)
        gates.bit_exact(got, probes.load_expected(case).astype(dtype),
                        what=f"{case.name}: the loaded matrix, stored row-major" + reading_diagnosis(case, got),
                        case=case.name)
    for element, (stored, held, dtype) in outputs.items():
        slots = probes.LOAD_SLOTS[element]
        by_layout = np.concatenate([probes.held_order(stored[64 * s:64 * s + 64].reshape(8, 8)) for s in range(slots)])
        gates.bit_exact(held, by_layout, what=f"simdgroup_{element}8x8 after each load: lane l's thread_elements()[e] "
                                              "at slot 2l + e hold (sg_fragment_row(l), sg_fragment_col(l) + e) of the "
                                              "stored matrix", case=f"{element} fragments after the loads")
    gates.done()


# --- 3. 1024-thread groups against the pipelines' limit ---------------------------------------------------------------

# mlx/backend/metal/custom_kernel.cpp (MLX 0.32.4), a ValueError raised when the command is encoded (at evaluation).
LIMIT_ERROR = re.compile(r"Thread group size \((\d+)\) is greater than the maximum allowed threads per threadgroup "
                         r"\((\d+)\)")


def device_info() -> dict:
    """What MLX tells of the device (its pipelines' limits it does not expose): name, architecture, memory sizes,
    max_recommended_working_set_size, ..."""
    query = getattr(mx, "device_info", None) or mx.metal.device_info
    try:
        return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in query().items()}
    except Exception as exc:  # noqa: BLE001 (the record says why it is empty)
        return {"error": f"{type(exc).__name__}: {exc}"}


def run_at_limit(launch, arm: str):
    """``launch``'s outputs, evaluated; or, when MLX refuses the group size, (None, (size, limit)). Any other
    error propagates."""
    try:
        outputs = launch.run(arm)
        mx.eval(*outputs)
        return outputs, None
    except Exception as exc:  # noqa: BLE001 (only the limit's error is ours to explain)
        found = LIMIT_ERROR.search(str(exc))
        if found is None:
            raise
        return None, (int(found.group(1)), int(found.group(2)))


def limit_failure(gate, launch, refused: tuple[int, int], what: str) -> str:
    size, limit = refused
    trivial = ""
    if launch.spec is not probes.THREADGROUP_WIDTH:
        _, trivial_refused = run_at_limit(probes.threadgroup_width_launch(), "metal")
        trivial = (f" A trivial {probes.THREADGROUP_LIMIT}-thread kernel's pipeline "
                   + (f"allows only {trivial_refused[1]}: the device's own limit." if trivial_refused else
                      "takes the group: the limit is this kernel's (its register footprint)."))
    info = device_info()
    gate.finding("pipeline maxTotalThreadsPerThreadgroup below a production threadgroup",
                 {"kernel": launch.spec.name, "template": {k: str(v) for k, v in launch.template},
                  "threadgroup": size, "pipeline_limit": limit, "device_info": info},
                 kernel=launch.spec.name)
    return (f"{what}: MLX refused the {size}-thread group: the pipeline's maxTotalThreadsPerThreadgroup is {limit} "
            f"on this device ({info}). Its groups must be sized within that limit (at most {limit // 32 * 32} "
            f"threads in whole SIMD groups): normalized_argmax's MAX_THREADS / threads_for.{trivial}")


@pytest.mark.arms("metal")
def test_a_1024_thread_group_runs(arm, gate):
    """A pass proves a trivial kernel's pipeline takes a ``THREADGROUP_LIMIT`` (= normalized argmax's
    ``MAX_THREADS``, 1024)-thread group and every thread of it runs: thread t writes t, thread 0 the group's
    ``threads_per_threadgroup``. It is the baseline for ``test_argmax_groups_fit_the_pipeline_limit``: a limit
    below 1024 here is the device's, there the kernel's."""
    outputs, refused = run_at_limit(probes.threadgroup_width_launch(), arm)
    if refused:
        pytest.fail(limit_failure(gate, probes.threadgroup_width_launch(), refused, probes.THREADGROUP_WIDTH.name))
    seen, width = outputs
    gate.equal(seen, np.arange(probes.THREADGROUP_LIMIT, dtype=np.uint32), what="every thread of the group ran",
               kernel=probes.THREADGROUP_WIDTH.name)
    gate.equal(width, np.array([probes.THREADGROUP_LIMIT], dtype=np.uint32), what="threads_per_threadgroup.x",
               kernel=probes.THREADGROUP_WIDTH.name)


@pytest.mark.arms("metal")
@pytest.mark.parametrize("vocab", probes.ARGMAX_VOCABS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_argmax_groups_fit_the_pipeline_limit(arm, gate, dtype, vocab):
    """A pass proves the metal arm's normalized argmax launches at its production geometry: the row kernel
    (``row_launch``; the fused variant too wherever its ``arms`` include metal: today it is CUDA-only) with
    ``MAX_THREADS`` = 1024 threads per row's group, per dtype (T changes the kernel's registers) at Llama's and
    Qwen's vocabularies, is accepted by its pipeline and returns native ``argmax(logits - logsumexp)``'s ids.

    MLX refuses a group wider than the pipeline's ``maxTotalThreadsPerThreadgroup``, which Apple's compiler
    lowers below the device's 1024 for kernels with a large footprint; MLX does not expose the pipeline's value to
    Python, so this probe launches and reads MLX's refusal. On one, the test fails with the limit MLX reported,
    what ``mx.device_info()`` says of the device (a finding records both) and whether a trivial 1024-thread
    kernel runs, and says the groups must be sized within the limit."""
    launches = probes.argmax_launches(getattr(mx, dtype), vocab)
    assert launches and normalized_argmax.threads_for(vocab) == normalized_argmax.MAX_THREADS
    assert all(launch.threadgroup == (normalized_argmax.MAX_THREADS, 1, 1) for launch in launches)
    x = launches[0].inputs[0]
    native = normalized_argmax.normalized_argmax_native(x)
    for launch in launches:
        outputs, refused = run_at_limit(launch, arm)
        if refused:
            pytest.fail(limit_failure(gate, launch, refused, f"{launch.spec.name} (T={dtype}, V={vocab})"))
        gate.equal(outputs[0], native, what=f"{launch.spec.name} at {launch.threadgroup[0]} threads per row: native "
                                            "argmax(logits - logsumexp) (rows with a planted maximum, no NaN)",
                   kernel="normalized_argmax", case=f"{launch.spec.name} V={vocab}")
    gate.finding("device the 1024-thread argmax groups ran on", {"device_info": device_info(), "vocab": vocab,
                                                                 "dtype": dtype}, kernel="normalized_argmax")


# --- 4. float32 -> half / bfloat rounding -------------------------------------------------------------------------

NAN_BITS = {"half": (0x7C00, 0x7E00), "bfloat": (0x7F80, 0x7FC0)}  # (infinity, the one NaN compared)


def canonical_nan_bits(bits, fmt: str) -> np.ndarray:
    """uint16 bits with every NaN of ``fmt`` as one quiet NaN: a NaN's sign and payload are no part of the
    conversion's contract (a NaN must stay a NaN)."""
    bits = np.asarray(bits, dtype=np.uint16)
    infinity, nan = NAN_BITS[fmt]
    return np.where((bits & 0x7FFF) > infinity, np.uint16(nan), bits).astype(np.uint16)


def rne_expected(fmt: str) -> np.ndarray:
    x = probes.conversion_values()
    return canonical_nan_bits(probes.half_rne_bits(x) if fmt == "half" else probes.bfloat_rne_bits(x), fmt)


def conversion_diagnosis(got: np.ndarray, expected: np.ndarray) -> str:
    wrong = np.flatnonzero(got != expected)
    if not wrong.size:
        return ""
    x, groups = probes.conversion_values().view(np.uint32), probes.conversion_groups()
    by_group = sorted({groups[i] for i in wrong})
    shown = "; ".join(f"x=0x{int(x[i]):08x} ({groups[i]}): got 0x{int(got[i]):04x}, RNE 0x{int(expected[i]):04x}"
                      for i in wrong[:8])
    return f"; differing in {', '.join(by_group)}: {shown}"


@pytest.mark.arms("metal")
def test_half_and_bfloat_conversions_round_to_nearest_even(arm, gate):
    """A pass proves every spelling the bodies use for float32 -> half (``half(x)``, ``static_cast<half>(x)``,
    ``half h = x``, ``T(x)`` with MLX's ``float16_t``) and float32 -> bfloat (``bfloat(x)``,
    ``static_cast<bfloat>(x)``, ``T(x)`` with ``bfloat16_t``) rounds to nearest, ties to even, bit for bit: at
    every tie between two neighbours of the format (even below and even above) and the float32 values either
    side, for half and bfloat subnormals (float32 subnormal inputs included: none flushed to zero), at the
    largest finite value (its tie and beyond overflow to infinity, 65520 -> inf for half), for signed zeros and
    infinities; and that a NaN stays a NaN (its payload and sign are not compared; a signalling NaN with only low
    payload bits must not become an infinity). The references: NumPy's float32 -> float16 cast, and RNE on the
    float32 bits for bfloat (``bfloat_rne_bits``, held to ml_dtypes by ``test_probe_oracles_agree``)."""
    gates = AllGates(gate.bind(kernel=probes.CONVERT.name))
    outputs = probes.conversion_launch().run(arm)
    for (name, (fmt, spelling)), out in zip(probes.CONVERSION_OUTPUTS.items(), outputs):
        got, expected = canonical_nan_bits(host(out), fmt), rne_expected(fmt)
        gates.bit_exact(got, expected, what=f"{spelling}: float32 -> {fmt} bits, round to nearest even, NaN as one "
                                            "NaN" + conversion_diagnosis(got, expected), case=spelling)
    gates.done()


# --- 5. -inf / NaN under the default math mode ------------------------------------------------------------------


def ieee_diagnosis(got: np.ndarray, indices) -> str:
    expected = canonical_nan(probes.special_expected())
    wrong = [i for i in indices if got[i].tobytes() != expected[i].tobytes()]
    return "; ".join(f"{probes.SPECIAL_CHECKS[i].name}: got {float(got[i])!r}, IEEE {float(expected[i])!r}"
                     for i in wrong)


@pytest.mark.arms("metal")
def test_special_values_follow_ieee_under_the_default_math_mode(arm, gate):
    """A pass proves that with the compile options the product's kernels get (``compiled_kernel`` passes none:
    MLX's default math mode, "safe" in MLX 0.32.4) the GPU computes IEEE results for the -inf / NaN arithmetic
    the bodies' masking rests on, on runtime values the compiler cannot fold: ``exp(-inf) == +0`` (``exp``,
    ``metal::exp``, ``metal::precise::exp``; a masked score minus a finite max), ``-inf - -inf`` is NaN (what the
    bodies guard before ``exp(m - next)``), ``-INFINITY`` / ``INFINITY`` literals, ``metal::max`` and
    ``simd_max`` with the empty max -inf, ``isnan`` / ``isinf``, every comparison with NaN false (so the argmax
    body's ``x > -INFINITY ? x : -INFINITY`` maps NaN to -inf), ``-inf == -INFINITY``, ``select``,
    ``log(0) == -inf``, and half / bfloat of -inf and NaN (``SPECIAL_CHECKS``). What no body relies on
    (``metal::fast::exp`` at -inf, ``max`` / ``fmax`` / ``simd_max`` with a NaN operand) is recorded as a
    finding, with what the same unit gives under the "relaxed" and "fast" math modes (also findings): what the
    default protects the bodies from."""
    (r,) = probes.specials_launch().run(arm)
    got, expected = canonical_nan(r), canonical_nan(probes.special_expected())
    relied = [i for i, check in enumerate(probes.SPECIAL_CHECKS) if check.relied_on]
    others = [i for i, check in enumerate(probes.SPECIAL_CHECKS) if not check.relied_on]
    gate.finding("special values no body relies on, under the default math mode",
                 {probes.SPECIAL_CHECKS[i].name: float(got[i]) for i in others}, kernel=probes.SPECIALS.name)
    for mode in ("relaxed", "fast"):
        try:
            (out,) = probes.specials_kernel(mode)(inputs=[mx.array(probes.SPECIAL_VALUES)], grid=(32, 1, 1),
                                                  threadgroup=(32, 1, 1), output_shapes=[(len(probes.SPECIAL_CHECKS),)],
                                                  output_dtypes=[mx.float32])
            moded = canonical_nan(out)
            evidence = {"differs_from_ieee": ieee_diagnosis(moded, range(len(probes.SPECIAL_CHECKS))) or "nothing"}
        except Exception as exc:  # noqa: BLE001 (a finding, not the probe's verdict)
            evidence = {"error": f"{type(exc).__name__}: {exc}"}
        gate.finding(f"the special-value checks under math_mode={mode!r}", evidence, kernel=probes.SPECIALS.name)
    diagnosis = ieee_diagnosis(got, relied)
    gate.bit_exact(got[relied], expected[relied], kernel=probes.SPECIALS.name,
                   what="IEEE results of the -inf / NaN expressions the bodies rely on, NaN as one NaN"
                        + (f"; differing: {diagnosis}" if diagnosis else ""))


# --- everywhere: the probes' own oracles and coverage -----------------------------------------------------------


def python_half_bits(value: np.float32) -> int:
    """Python's own float -> half (``struct``'s ``e`` format: round half to even from the exact double of the
    float32), an overflow being the infinity of its sign: a reference independent of NumPy's cast."""
    try:
        return struct.unpack("<H", struct.pack("<e", float(value)))[0]
    except OverflowError:
        return 0xFC00 if value < 0 else 0x7C00


def test_probe_oracles_agree():
    """The expectations a Mac is judged against are right: the fragment layout's port covers each of the 64 cells
    once; ``bfloat_rne_bits`` equals ml_dtypes' float32 -> bfloat16 and ``half_rne_bits`` Python's ``struct``
    half (NaN as NaN) on every conversion input, and the inputs reach every group with both rounding directions at
    the ties;
    the two readings of a load's origin differ wherever the origin's column and row do (so the probe tells them
    apart) and agree for pointer offsets; and the x4 loads expect the blocks at columns 0, 8, 16, 24."""
    cells = sorted(probes.fragment_row(l) * 8 + probes.fragment_col(l) + e for l in range(32) for e in (0, 1))
    assert cells == list(range(64))
    assert sorted(probes.held_order(np.arange(64).reshape(8, 8))) == list(range(64))
    x = probes.conversion_values()
    assert len(x) % 64 == 0
    with np.errstate(invalid="ignore", over="ignore"):
        theirs_bfloat = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    for fmt, ours, theirs in (("bfloat", probes.bfloat_rne_bits(x), theirs_bfloat),
                              ("half", probes.half_rne_bits(x), np.array([python_half_bits(v) for v in x]))):
        np.testing.assert_array_equal(canonical_nan_bits(ours, fmt), canonical_nan_bits(theirs, fmt), err_msg=fmt)
    groups = set(probes.conversion_groups())
    assert {"half tie", "half subnormal", "half overflow", "bfloat tie", "bfloat subnormal", "bfloat overflow",
            "float32 subnormal", "nan", "overflow", "infinity and zero"} <= groups
    half, bfloat = probes.half_rne_bits(x), probes.bfloat_rne_bits(x)
    u = x.view(np.uint32)
    assert np.any((u == 0x3F801000) & (half == 0x3C00)) and np.any((u == 0x3F803000) & (half == 0x3C02))  # ties
    assert np.any((u == 0x3F808000) & (bfloat == 0x3F80)) and np.any((u == 0x3F818000) & (bfloat == 0x3F82))
    assert np.any((u == 0x7F800001) & (bfloat == 0x7FC0))  # a low-payload signalling NaN stays a NaN
    assert np.any((u == 0x477FF000) & (half == 0x7C00)) and np.any((u == 0x7F7F8000) & (bfloat == 0x7F80))
    for case in probes.LOAD_CASES:
        project, swapped = probes.load_expected(case), probes.load_expected(case, "swapped")
        col, row = case.origin
        assert np.array_equal(project, swapped) == (case.via == "pointer" or col == row), case.name
        if case.via.startswith("x4"):
            block = probes.load_source_matrix()[:8, col:col + 8]
            assert np.array_equal(project, block.T if case.transpose else block), case.name
    assert len(probes.SPECIAL_CHECKS) == len({c.name for c in probes.SPECIAL_CHECKS})


def test_probe_units_are_metal_only_and_built_as_the_product():
    """Each probe spec is metal-only and carries no compile options of its own (``KernelSpec`` has none: the
    probes compile through ``compiled_kernel`` exactly as the product's kernels); the argmax instances are the
    product's own spec at 1024 threads; every builder's launch is what ``metal_probe_launches`` lists."""
    launches = probes.metal_probe_launches()
    specs = [launch.spec for launch in launches]
    own = [probes.FRAGMENT, probes.LOAD, probes.THREADGROUP_WIDTH, probes.CONVERT, probes.SPECIALS]
    assert all(spec in specs and spec.arms == ("metal",) for spec in own)
    argmax = [launch for launch in launches if launch.spec not in own]
    assert {launch.spec for launch in argmax} == {s for s in (normalized_argmax.ROW, normalized_argmax.FUSED)
                                                  if "metal" in s.arms}
    assert len(argmax) == 3 * len(probes.ARGMAX_VOCABS) and all(l.threadgroup == (1024, 1, 1) for l in argmax)
    assert "compile_options" not in {f for f in KernelSpec.__dataclass_fields__}


def test_bodies_call_no_fast_math_function():
    """The special-value probe gates ``exp`` / ``metal::exp`` / ``metal::precise::exp`` and only records
    ``metal::fast::*``: that holds while no kernel body or header of the product calls a ``fast::`` function."""
    modules = (paged_attention, paged_attention.launch, kvq4_decode, multi_query, multi_query.launch,
               normalized_argmax)
    specs = {id(v): v for m in modules for v in vars(m).values() if isinstance(v, KernelSpec)}.values()
    texts = {f"{spec.name} {part}": text for spec in specs for part, text in (("body", spec.source),
                                                                              ("header", spec.header))}
    assert texts
    using = sorted(name for name, text in texts.items() if re.search(r"\bfast::", text))
    assert not using, f"{using} call metal::fast:: functions: gate them in impl.metal_probes.SPECIAL_CHECKS"
