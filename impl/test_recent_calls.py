"""``impl.recent_calls``: the memo of validated calls, and the public kernel functions that use it.

A remembered call must behave exactly as a checked one: the checks run once per argument signature,
and a bad argument raises the same error whether or not a valid call with otherwise equal arguments
came before. The compiled arms do not run on this machine, so the public functions are driven with a
stand-in compiled arm (``resolve_arm`` -> "cuda", the compiled call -> a recorder): what is tested is the
Python in front of the kernels, which is the same on every device.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
import pytest

import impl.kvq4_decode as kvq4
import impl.multi_query as mq
import impl.paged_attention as paged
from impl.block_table import BlockTable
from impl.recent_calls import RecentCalls, array_key, scalar_key
from properties.strategies.decode import build_kvq4_case, build_multi_query_case
from properties.strategies.paged import PagedQuantization, build_paged_case


# --- the memo itself ----------------------------------------------------------


def test_lookup_finds_what_was_remembered_and_forgets_the_oldest():
    recent = RecentCalls(2)
    assert recent.lookup(lambda: "a") == ("a", None)
    assert recent.remember("a", 1) == 1 and recent.remember("b", 2) == 2
    assert recent.lookup(lambda: "a") == ("a", 1)
    recent.remember("c", 3)  # past size: the oldest remembered key goes (a hit does not reorder)
    assert len(recent) == 2 and recent.lookup(lambda: "a") == ("a", None)
    assert recent.lookup(lambda: "c") == ("c", 3)


def test_a_key_that_cannot_be_built_is_none_and_keeps_nothing():
    recent = RecentCalls(4)

    def raises():
        raise ValueError("arm='metal' is not available here")

    for build in (raises, lambda: (array_key(np.zeros(3)),), lambda: ([1, 2],)):  # no key / not an mx.array / unhashable
        key, value = recent.lookup(build)
        assert key is None and value is None
        recent.remember(key, "never")
    assert len(recent) == 0


def test_keys_tell_bool_from_int_and_arrays_by_shape_and_dtype():
    assert scalar_key(True) != scalar_key(1) and scalar_key(1.0) != scalar_key(1)
    assert hash(True) == hash(1)  # why the type is part of the key
    a, b = mx.zeros((2, 3), mx.float16), mx.zeros((2, 3), mx.bfloat16)
    assert array_key(a) == ((2, 3), mx.float16) != array_key(b)
    with pytest.raises(ValueError, match="size"):
        RecentCalls(0)


# --- the public functions in front of a stand-in compiled arm ------------------


@dataclass
class StandIn:
    """A public function driven on a stand-in compiled arm: its valid arguments, bad variants of them, and
    counts of the checks it ran and the compiled calls it asked for."""

    module: object
    call: callable  # (**overrides) -> the public function's result
    bad: dict  # name -> overrides that the checks refuse
    args: dict  # the valid arguments
    fresh: tuple  # (overrides: a new array of the same shape and dtype, its position in the compiled call's inputs, it)
    checks: list = field(default_factory=list)
    compiled: list = field(default_factory=list)


def _multi_query() -> tuple:
    case = build_multi_query_case(np.random.default_rng(0), dtype="bfloat16", h=4, kvh=2, L=2, n=40, d=64)
    args = dict(q=case.q_mx, keys=case.k_mx, values=case.v_mx, scale=case.scale, splits=None)
    bad = {"scale bool": dict(scale=True), "scale nan": dict(scale=math.nan), "splits bool": dict(splits=True),
           "splits 0": dict(splits=0), "q float16": dict(q=case.q_mx.astype(mx.float16)),
           "keys NumPy": dict(keys=np.zeros(case.k_mx.shape, np.float32)),
           "values shape": dict(values=case.v_mx[:, :, :-1])}
    q2 = case.q_mx * 1  # a new array of the same shape and dtype
    return mq, ("_compiled_call",), lambda **o: mq.multi_query_causal(**(args | o)), bad, args, (dict(q=q2), 0, q2)


def _kvq4(body: str) -> tuple:
    case = build_kvq4_case(np.random.default_rng(0), dtype="bfloat16", h=4, kvh=2, n=100)
    args = dict(q=case.q_mx, keys=case.keys, values=case.values, scale=case.scale, block=None, body=body)
    bad = {"scale bool": dict(scale=True), "block bool": dict(block=True), "block 0": dict(block=0),
           "body": dict(body="fast"), "bits": dict(keys=case.keys._replace(bits=8)),
           "q float16": dict(q=case.q_mx.astype(mx.float16)),
           "values N": dict(values=kvq4.QuantizedKV(*(p[:, :, :-1] for p in case.values[:3])))}
    keys2 = case.keys._replace(packed=case.keys.packed + 0)
    return (kvq4, ("_compiled_direct", "_compiled_pair"), lambda **o: kvq4.kvq4_decode(**(args | o)), bad, args,
            (dict(keys=keys2), 1, keys2.packed))


def _paged(bits: int | None) -> tuple:
    quant = None if bits is None else PagedQuantization(bits, 32)
    case = build_paged_case(np.random.default_rng(0), dtype="bfloat16", hq=4, hkv=2, n=1, dk=64, dv=64,
                            block_size=16, length=40, quant=quant)
    table = BlockTable.of(case.table)
    args = dict(q=mx.array(case.q).astype(mx.bfloat16), storage=case.storage, block_table=table,
                length=case.length, scale=case.scale, partition=None)
    bad = {"length bool": dict(length=True), "length past the table": dict(length=case.length + 40),
           "scale bool": dict(scale=True), "partition bool": dict(partition=True),
           "q rows": dict(q=mx.zeros((1, 4, 9, 64), mx.bfloat16)),
           "table outside the pool": dict(block_table=BlockTable.of([case.num_blocks] * len(case.table))),
           # a storage whose planes are the remembered call's but whose stated geometry is not: its key must hold
           # the scalars too, not only the arrays
           "storage head_dim": dict(storage=dataclasses.replace(case.storage, head_dim=65)),
           "storage v_head_dim": dict(storage=dataclasses.replace(case.storage, v_head_dim=65)),
           "storage block_size": dict(storage=dataclasses.replace(case.storage, block_size=17))}
    storage2 = dataclasses.replace(case.storage, keys=case.storage.keys + 0)
    return (paged, ("_compiled_pair",), lambda **o: paged.paged_attention(**(args | o)), bad, args,
            (dict(storage=storage2), 1, storage2.keys))


CALLERS = {"multi_query": _multi_query, "kvq4 direct": lambda: _kvq4("direct"), "kvq4 seed": lambda: _kvq4("seed"),
           "paged bf16": lambda: _paged(None), "paged KV4": lambda: _paged(4)}


def drive(caller: str, monkeypatch, request) -> StandIn:
    """``CALLERS[caller]`` on the stand-in compiled arm, counting its checks and compiled-call requests."""
    module, compiled_names, call, bad, args, fresh = CALLERS[caller]()
    s = StandIn(module, call, bad, args, fresh)
    validate = module._validate
    monkeypatch.setattr(module, "_validate", lambda *a, **k: s.checks.append(1) or validate(*a, **k))
    monkeypatch.setattr(module, "resolve_arm", lambda arm: "cuda")
    monkeypatch.setattr(module, "_RECENT", RecentCalls(4))  # restored, with the real compiled calls, by monkeypatch
    for name in compiled_names:
        monkeypatch.setattr(module, name, lambda *key: s.compiled.append(key) or (lambda *inputs: ("ran", inputs)))
    if module is paged:  # _plan caches the compiled pair it asked for: none of the stand-ins may outlive the test
        paged._plan.cache_clear()
        request.addfinalizer(paged._plan.cache_clear)
    return s


@pytest.fixture(params=list(CALLERS))
def stand_in(request, monkeypatch) -> StandIn:
    return drive(request.param, monkeypatch, request)


def test_a_repeated_call_skips_the_checks_and_runs_with_its_own_arrays(stand_in):
    """The second call (same signature, a new array in place of one input) is not checked again and hands the
    compiled call its own arrays, not the remembered call's."""
    overrides, position, array = stand_in.fresh
    first, second = stand_in.call(), stand_in.call(**overrides)
    assert len(stand_in.checks) == 1 and len(stand_in.compiled) == 1
    assert first[0] == second[0] == "ran" and len(first[1]) == len(second[1])
    assert second[1][position] is array and first[1][position] is not array


@pytest.mark.parametrize("remembered", [False, True], ids=["fresh", "after a valid call"])
def test_bad_arguments_raise_whatever_was_remembered(stand_in, remembered):
    expected = {}
    for name, overrides in stand_in.bad.items():
        with pytest.raises((TypeError, ValueError)) as caught:
            stand_in.call(**overrides)
        expected[name] = (type(caught.value), str(caught.value))
    if remembered:
        stand_in.call()
        for name, overrides in stand_in.bad.items():
            with pytest.raises((TypeError, ValueError)) as caught:
                stand_in.call(**overrides)
            assert (type(caught.value), str(caught.value)) == expected[name], name
    assert len(stand_in.module._RECENT) == int(remembered)  # a refused call remembers nothing


@pytest.mark.parametrize("caller, name, valid", [("multi_query", "splits", 1), ("kvq4 direct", "block", 1)])
def test_a_remembered_int_never_lets_a_bool_through(caller, name, valid, request, monkeypatch):
    """True == 1 and hash(True) == hash(1): after a call with ``name=1`` is remembered, ``name=True`` must still
    meet the check that refuses a bool."""
    s = drive(caller, monkeypatch, request)
    s.call(**{name: valid})
    with pytest.raises(TypeError, match=name):
        s.call(**{name: True})


@pytest.mark.parametrize("caller", ["kvq4 direct", "paged bf16"])
def test_unkeyed_arguments_take_the_checks_every_call(caller, request, monkeypatch):
    """A plain tuple of planes (kvq4) and a list for a table (paged) are not keyed: checked on every call."""
    s = drive(caller, monkeypatch, request)
    if s.module is paged:
        unkeyed = dict(block_table=[int(b) for b in s.args["block_table"].host])
    else:
        unkeyed = dict(keys=tuple(s.args["keys"][:3]), values=tuple(s.args["values"][:3]))
    for _ in range(3):
        assert s.call(**unkeyed)[0] == "ran"
    assert len(s.checks) == 3 and len(s.module._RECENT) == 0


def test_the_graph_arm_remembers_nothing():
    case = build_multi_query_case(np.random.default_rng(2), dtype="float32", h=2, kvh=1, L=1, n=16, d=16)
    before = len(mq._RECENT)
    mx.eval(mq.multi_query_causal(case.q_mx, case.k_mx, case.v_mx, scale=case.scale, arm="graph"))
    assert len(mq._RECENT) == before
