"""Every gate passes on a right input and fails on a known-wrong one, and records both.

Gates here write to a list (``make_gate(sink=records.append)``), so the
deliberate failures never reach the run's results file.
"""

from __future__ import annotations

import ml_dtypes
import mlx.core as mx
import numpy as np
import pytest

from parity.gates import GateFailure
from reference import metrics

DTYPES = ("float32", "float16", "bfloat16")
NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
MX_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


@pytest.fixture
def recorded(make_gate):
    records: list[dict] = []
    return make_gate(sink=records.append, kernel="meta"), records


def _failing(call):
    with pytest.raises(GateFailure) as info:
        call()
    return info.value


# --- bit_exact ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_bit_exact_passes_identical_mlx_arrays(recorded, dtype):
    gate, records = recorded
    x = mx.random.normal((3, 5)).astype(MX_DTYPES[dtype])
    gate.bit_exact(x, mx.array(x))
    assert records[-1]["passed"] and records[-1]["measured"] == 0 and records[-1]["dtype"] == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_bit_exact_fails_on_one_ulp_and_names_the_element(recorded, dtype):
    gate, records = recorded
    x = np.linspace(-1, 1, 12).reshape(3, 4).astype(NP_DTYPES[dtype])
    y = x.copy()
    y.view(np.uint32 if dtype == "float32" else np.uint16)[2, 1] += 1
    failure = _failing(lambda: gate.bit_exact(y, x))
    assert "index (2, 1)" in str(failure) and "bit-exact" in str(failure)
    assert records[-1]["passed"] is False and records[-1]["measured"] == 1


def test_bit_exact_distinguishes_signed_zero_and_dtype(recorded):
    gate, _ = recorded
    _failing(lambda: gate.bit_exact(np.array([-0.0], np.float32), np.array([0.0], np.float32)))
    failure = _failing(lambda: gate.bit_exact(np.zeros(2, np.float16), np.zeros(2, np.float32)))
    assert "dtype" in str(failure)
    failure = _failing(lambda: gate.bit_exact(np.zeros(3, np.float32), np.zeros(2, np.float32)))
    assert "shape" in str(failure)


def test_equal_compares_values_across_integer_widths(recorded):
    gate, records = recorded
    gate.equal(np.array([1, 2, 3], np.uint32), np.array([1, 2, 3], np.int64))
    failure = _failing(lambda: gate.equal(np.array([1, 2, 4]), np.array([1, 2, 3])))
    assert "index (2,)" in str(failure)
    failure = _failing(lambda: gate.equal(np.array([0, 2, 3]), np.array([1, 2, 3])))  # below counts as above
    assert "index (0,)" in str(failure) and records[-1]["measured"] == 1


# --- max_ulp -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_ulp_counts_units_in_the_last_place(recorded, dtype):
    gate, records = recorded
    x = np.array([1.0, 2.0, -3.0], NP_DTYPES[dtype])
    bits = x.view(np.uint32 if dtype == "float32" else np.uint16).copy()
    bits[1] += 3
    y = bits.view(NP_DTYPES[dtype])
    gate.max_ulp(y, x, ulps=3, why="test: 3 ULP planted")
    assert records[-1]["measured"] == 3
    failure = _failing(lambda: gate.max_ulp(y, x, ulps=2, why="test: 3 ULP planted, 2 allowed"))
    assert "index (1,)" in str(failure)


def test_max_ulp_across_zero_and_nonfinite(recorded):
    gate, records = recorded
    tiny = np.array([np.float32(1e-45)])
    gate.max_ulp(-tiny, tiny, ulps=2, why="smallest subnormals either side of zero are 2 ULP apart")
    assert records[-1]["measured"] == 2
    gate.max_ulp(np.array([np.nan, np.inf], np.float32), np.array([np.nan, np.inf], np.float32), ulps=0,
                 why="matching NaN and +inf are 0 apart")
    _failing(lambda: gate.max_ulp(np.array([np.inf], np.float32), np.array([-np.inf], np.float32), ulps=1e30,
                                  why="opposite infinities are infinitely far"))


def test_thresholds_must_state_a_derivation(recorded):
    gate, _ = recorded
    x = np.ones(3, np.float32)
    with pytest.raises(ValueError, match="why"):
        gate.max_ulp(x, x, ulps=1, why="")
    with pytest.raises(ValueError, match="limit"):
        gate.nmse(x, x, limit=float("nan"), why="x")
    with pytest.raises(ValueError, match="ulps must be a real number"):
        gate.max_ulp(x, x, ulps=True, why="x")
    for threshold in (np.int64(2), np.float32(2.0)):  # NumPy numbers are numbers
        assert gate.max_ulp(x, x, ulps=threshold, why="x")["passed"]


def test_kl_gate_fails_a_reference_that_is_no_distribution(recorded):
    gate, _ = recorded
    _failing(lambda: gate.kl(np.array([[np.nan, 1.0, 2.0]]), np.array([[5.0, -3.0, 0.0]]), limit=1e9,
                             why="a NaN reference row has no KL"))


# --- nmse ------------------------------------------------------------------------


def test_nmse_passes_small_noise_and_fails_a_wrong_sign(recorded):
    gate, records = recorded
    rng = np.random.default_rng(0)
    ref = rng.normal(size=256)
    gate.nmse(ref * (1 + 1e-4), ref, limit=1e-7, why="test: relative noise 1e-4 gives NMSE 1e-8")
    assert records[-1]["measured"] == pytest.approx(1e-8, rel=1e-3)
    wrong = ref.copy()
    wrong[7] = -wrong[7]
    failure = _failing(lambda: gate.nmse(wrong, ref, limit=1e-7, why="test"))
    assert "index (7,)" in str(failure)


def test_nonfinite_placement_fails_numeric_gates(recorded):
    gate, _ = recorded
    ref = np.array([1.0, np.nan, 3.0])
    gate.nmse(np.array([1.0, np.nan, 3.0]), ref, limit=0, why="identical including NaN placement")
    failure = _failing(lambda: gate.nmse(np.array([1.0, 2.0, 3.0]), ref, limit=1.0, why="test"))
    assert "NaN/inf" in str(failure) and "index (1,)" in str(failure)


# --- kl ----------------------------------------------------------------------------


def test_kl_matches_closed_form_and_fails_a_shifted_distribution(recorded):
    gate, records = recorded
    ref = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]]))
    test = np.log(np.array([[0.25, 0.5, 0.25], [0.1, 0.2, 0.7]]))
    expected = 0.5 * np.log(2) + 0.25 * np.log(0.5)  # row 0; row 1 is 0
    failure = _failing(lambda: gate.kl(ref, test, limit=0.1, why="test"))
    assert records[-1]["measured"] == pytest.approx(expected)
    assert "index (0,)" in str(failure)
    assert records[-1]["worst"] == {"index": [0], "actual": pytest.approx(expected), "expected": 0.0}  # KL's ideal
    gate.kl(ref, ref + 3.0, limit=1e-12, why="softmax is shift invariant: KL is 0 up to float64 rounding")


def test_kl_fails_mismatched_shapes(recorded):
    gate, records = recorded
    failure = _failing(lambda: gate.kl(np.zeros((2, 3)), np.zeros((2, 4)), limit=1, why="x"))
    assert "shape (2, 4) != expected (2, 3)" in str(failure) and records[-1]["passed"] is False


# --- error_ratio -----------------------------------------------------------------------


def test_error_ratio_floor_is_one_output_ulp_at_the_peak():
    ref = np.array([0.3, -2.5, 1.0])
    assert metrics.rounding_noise_floor(ref, "bfloat16") == 2.0 ** -6  # bf16 ULP on [2, 4)
    assert metrics.rounding_noise_floor(ref, "float16") == 2.0 ** -9
    assert metrics.rounding_noise_floor(ref, "float32") == 2.0 ** -22


def test_error_ratio_passes_within_factor_and_fails_beyond(recorded):
    gate, records = recorded
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(4, 64))
    baseline = ref + 1e-3  # baseline error 1e-3
    floor = metrics.rounding_noise_floor(ref, "float32")
    gate.error_ratio((ref + 1.9e-3).astype(np.float32), ref, baseline)
    assert records[-1]["threshold"] == pytest.approx(2e-3 + floor)
    wrong = ref + 1.9e-3
    wrong[3, 10] += 1e-2
    failure = _failing(lambda: gate.error_ratio(wrong.astype(np.float32), ref, baseline))
    assert "index (3, 10)" in str(failure) and "FlashAttention" in str(failure)


def test_error_ratio_floor_is_read_from_the_reference_not_the_output(recorded):
    """The default floor is one ULP at the reference's peak: an output that rounds past the next binade (127.6 ->
    128 in bfloat16, spacing 1) must not lift the floor for the small elements it also gets wrong (1.0 -> 1.9)."""
    gate, records = recorded
    reference = np.array([127.6, 1.0])
    actual = np.array([128.0, 1.9]).astype(ml_dtypes.bfloat16)
    _failing(lambda: gate.error_ratio(actual, reference, reference.copy()))
    assert records[-1]["floor"] == 0.5  # the bfloat16 spacing on [64, 128), where 127.6 lies


def test_error_ratio_cannot_collapse_when_the_baseline_is_exact(recorded):
    gate, _ = recorded
    ref = np.array([1.0, 2.0, 3.0])
    # Baseline exactly right; the kernel is off by one bf16 ULP at the peak: within the floor.
    actual = np.array([1.0, 2.0, 3.0 + 2.0 ** -6]).astype(ml_dtypes.bfloat16)
    gate.error_ratio(actual, ref, ref.copy())
    wrong = np.array([1.0, 2.0, 3.0 + 2.0 ** -4]).astype(ml_dtypes.bfloat16)
    _failing(lambda: gate.error_ratio(wrong, ref, ref.copy()))


# --- records -------------------------------------------------------------------------------


def test_every_call_records_context_and_verdict(make_gate):
    records: list[dict] = []
    gate = make_gate(sink=records.append).bind(kernel="k", arm="graph")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    gate.bit_exact(x, x, case="Hq8-Hkv2")
    with pytest.raises(GateFailure):
        gate.bit_exact(x + 1, x)
    assert [r["passed"] for r in records] == [True, False]
    first = records[0]
    for key in ("test_id", "gate", "kernel", "arm", "dtype", "shape", "measured", "threshold", "derivation"):
        assert key in first
    assert (first["kernel"], first["arm"], first["shape"], first["case"]) == ("k", "graph", [2, 3], "Hq8-Hkv2")


def test_a_calls_kernel_overrides_the_gates_bound_kernel(recorded):
    """A test gating two kernels through one gate names each call's kernel (``kernel=``): the record is filed
    under that kernel, not the one the gate was bound to, or the report's per-kernel table and the comparison
    would count it against the wrong kernel. Without ``kernel=`` the bound one still holds."""
    gate, records = recorded  # bound to kernel "meta"
    x = np.arange(4, dtype=np.int32)
    gate.equal(x, x, kernel="block_table")
    gate.equal(x, x)
    assert [r["kernel"] for r in records] == ["block_table", "meta"]


def test_findings_are_recorded_not_raised(make_gate):
    records: list[dict] = []
    make_gate(sink=records.append).finding("quantize differs on GPU", {"max_diff": 0.033})
    assert records[0]["kind"] == "finding" and records[0]["evidence"]["max_diff"] == 0.033


def test_gate_fixture_writes_the_results_file(tmp_path, monkeypatch, make_gate):
    from reports import recorder

    path = tmp_path / "results.jsonl"
    monkeypatch.setenv(recorder.RESULTS_ENV, str(path))
    gate = make_gate()
    gate.equal(np.array([1]), np.array([1]))
    (record,) = list(recorder.read_records(path))
    assert record["gate"] == "equal" and record["schema"] == recorder.SCHEMA_VERSION


# --- shapes, empty inputs, findings ----------------------------------------------------------------------

SHAPE_MISMATCHES = {
    "max_ulp": lambda g: g.max_ulp(np.zeros(3, np.float32), np.zeros(4), ulps=1, why="x"),
    "nmse": lambda g: g.nmse(np.zeros(3, np.float32), np.zeros(4), limit=1e-3, why="x"),
    "kl": lambda g: g.kl(np.zeros((2, 3)), np.zeros((3, 2), np.float32), limit=1, why="x"),
    "error_ratio": lambda g: g.error_ratio(np.zeros(3, np.float32), np.zeros(4), np.zeros(3, np.float32)),
    "error_ratio baseline": lambda g: g.error_ratio(np.zeros(3, np.float32), np.zeros(3), np.zeros(4, np.float32)),
}


@pytest.mark.parametrize("name", sorted(SHAPE_MISMATCHES))
def test_a_shape_mismatch_is_a_recorded_failure(recorded, name):
    # every gate call, pass or fail, leaves one record: a mismatch must not vanish from the report's counts
    gate, records = recorded
    failure = _failing(lambda: SHAPE_MISMATCHES[name](gate))
    assert "shape" in str(failure)
    assert len(records) == 1 and records[0]["passed"] is False and records[0]["measured"] == float("inf")


def test_kl_of_no_rows_passes_and_an_empty_vocabulary_is_refused(recorded):
    gate, records = recorded
    assert gate.kl(np.zeros((0, 5)), np.zeros((0, 5), np.float32), limit=1, why="x")["passed"]
    assert records[-1]["measured"] == 0.0 and records[-1]["detail"] == "no rows"
    with pytest.raises(ValueError, match="vocabulary"):
        gate.kl(np.zeros((2, 0)), np.zeros((2, 0), np.float32), limit=1, why="x")


def test_a_finding_keeps_array_evidence_and_refuses_unknown_context(recorded, tmp_path):
    from reports.recorder import append_record, read_records

    gate, records = recorded
    record = gate.finding("x", {"a": np.array([1, 2]), "b": np.float32(3), "c": mx.array([0.5])})
    append_record(record, tmp_path / "r.jsonl")
    assert next(read_records(tmp_path / "r.jsonl"))["evidence"] == {"a": [1, 2], "b": 3.0, "c": [0.5]}
    with pytest.raises(ValueError, match="unknown finding context"):
        gate.finding("x", {}, bogus=1)


X = np.ones(3, np.float32)
BAD_GATE_CALLS = [
    ("why not a str", lambda g: g.max_ulp(X, X, ulps=1, why=3), TypeError, "why"),
    ("ulps past float", lambda g: g.max_ulp(X, X, ulps=2**2000, why="x"), ValueError, "ulps"),
    ("factor past float", lambda g: g.error_ratio(X, X, X, factor=2**2000), ValueError, "factor"),
    ("factor negative", lambda g: g.error_ratio(X, X, X, factor=-1.0), ValueError, "factor"),
    ("floor NaN", lambda g: g.error_ratio(X, X, X, floor=float("nan")), ValueError, "floor"),
    ("floor bool", lambda g: g.error_ratio(X, X, X, floor=True), ValueError, "floor"),
    ("error ratio why blank", lambda g: g.error_ratio(X, X, X, why=" "), ValueError, "why"),
    ("kernel not a str", lambda g: g.max_ulp(X, X, ulps=1, why="x", kernel=3), TypeError, "kernel"),
    ("case not a str", lambda g: g.equal(X, X, case=object()), TypeError, "case"),
    ("unknown arm", lambda g: g.nmse(X, X, limit=1, why="x", arm="gpu"), ValueError, "arm"),
    ("shape a str", lambda g: g.bit_exact(X, X, shape="x"), TypeError, "shape"),
    ("shape of floats", lambda g: g.bit_exact(X, X, shape=(3.0,)), TypeError, "shape"),
    ("bind an unknown arm", lambda g: g.bind(arm="gpu"), ValueError, "arm"),
    ("finding title None", lambda g: g.finding(None, {}), ValueError, "title"),
    ("finding evidence a list", lambda g: g.finding("t", [1]), TypeError, "evidence"),
]


@pytest.mark.parametrize("call, error, name", [c[1:] for c in BAD_GATE_CALLS], ids=[c[0] for c in BAD_GATE_CALLS])
def test_bad_gate_arguments_are_refused_by_name_and_record_nothing(recorded, call, error, name):
    gate, records = recorded
    before = len(records)
    with pytest.raises(error, match=name):
        call(gate)
    assert len(records) == before, "a refused gate call wrote a record"


def test_a_gate_needs_a_test_id_and_a_callable_sink():
    from parity.gates import Gate

    with pytest.raises(TypeError, match="test_id"):
        Gate(None)
    with pytest.raises(TypeError, match="sink"):
        Gate("t::x", sink="results.jsonl")
    assert Gate("t::x", kernel="k", arm="cuda", sink=list().append).equal(X, X, shape=np.array([3]))["passed"]


# --- what a gate must never take or pass -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.array([1 + 5j]), np.array([1 + 5j], np.complex64), mx.array([1 + 5j]),
                                 np.array([5], "timedelta64[s]"), np.array(["2020-01-01"], "datetime64[D]"),
                                 np.array([(1,)], dtype=[("a", np.int32)])],
                         ids=["complex128", "complex64", "mlx complex", "timedelta", "datetime", "record"])
def test_what_holds_no_real_number_is_refused_by_name(recorded, bad):
    """A float64 copy of a complex array drops its imaginary part (and of a duration reads its ticks): the gates
    compared the wrong numbers and passed. Now a TypeError naming actual, and nothing recorded."""
    gate, records = recorded
    one = np.array([1.0])
    for call in (lambda: gate.nmse(bad, one, limit=1e-12, why="exact"),
                 lambda: gate.error_ratio(bad, one, one, floor=0.0, dtype="float32"),
                 lambda: gate.bit_exact(bad, one), lambda: gate.equal(bad, one)):
        with pytest.raises(TypeError, match="^actual must be a real"):
            call()
    assert records == []


def test_equal_never_rounds_through_float64(recorded):
    """NumPy compares int64 with float64 as float64, where 2**53 + 1 == 2**53: the gate compares the values."""
    gate, _ = recorded
    _failing(lambda: gate.equal(np.array([2**53 + 1]), np.array([2.0**53])))
    _failing(lambda: gate.equal(np.array([2**63], np.uint64), np.array([-(2**63)], np.int64)))
    gate.equal(np.array([2**53]), np.array([2.0**53]))
    gate.equal(mx.array([1.5], dtype=mx.bfloat16), np.array([1.5], np.float16))


def test_nmse_of_tiny_values_is_not_zero():
    """Squares below ~1e-308 underflow to 0 in float64: without the common scale 2e-200 against 1e-200 gave 0."""
    assert metrics.nmse(np.array([2e-200]), np.array([1e-200])) == pytest.approx(1.0)
    assert metrics.nmse(np.array([1e-200, 0.0]), np.array([1e-200, 0.0])) == 0.0
    # an all-zero reference is not rescaled by itself: the output's magnitude sets the scale, so a tiny nonzero
    # output is infinitely far from it (not 0 / 0 read as a match)
    assert metrics.nmse(np.array([1e-200]), np.array([0.0])) == float("inf")


@pytest.mark.parametrize("call, error, name", [
    (lambda g, a: g.error_ratio(a, a[:2], a, factor=0), ValueError, "^factor must be positive"),
    (lambda g, a: g.error_ratio(a, a[:2], a, floor=0.0, dtype="garbage"), ValueError, "^dtype must"),
    (lambda g, a: g.error_ratio(a, a, a, floor=0.0, dtype=mx.float16), TypeError, "^dtype must"),
    (lambda g, a: g.error_ratio(a, a[:2], a, dtype="float64"), ValueError, "^dtype must"),
    (lambda g, a: g.max_ulp(a, a[:2], ulps=1, why="one rounding", dtype="float64"), ValueError, "^dtype must"),
], ids=["factor 0", "dtype garbage", "dtype an mx.Dtype", "float64 without a floor", "max_ulp float64"])
def test_bad_arguments_are_refused_before_anything_is_recorded(recorded, call, error, name):
    """A bad factor or dtype is the caller's error, refused before the comparison: it was recorded as a failed gate
    first when the shapes also differed (or filed under the bad dtype when they did not)."""
    gate, records = recorded
    with pytest.raises(error, match=name):
        call(gate, np.ones(3, np.float32))
    assert records == []
    gate.error_ratio(np.ones(3), np.ones(3), np.ones(3), floor=0.0, dtype="float64")  # a float64 label beside a floor
