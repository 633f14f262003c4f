"""scripts/shard.py: shards partition the suite, deterministically, and the Makefile passes SHARD_ID/NUM_SHARDS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scripts.shard import shard_of

ROOT = Path(__file__).resolve().parents[1]
NODE_IDS = st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=50, unique=True)


@given(NODE_IDS, st.integers(1, 9))
def test_shards_partition_any_set_of_node_ids(nodeids, num):
    shards = [[n for n in nodeids if shard_of(n, num) == i] for i in range(num)]
    assert sorted(sum(shards, [])) == sorted(nodeids)  # disjoint and covering


def test_shards_balance_test_counts():
    # 4000 ids into 4 shards: each count is Binomial(4000, 1/4): mean 1000, sd sqrt(4000*3/16) = 27.4;
    # 6 sd (165) bounds a fair hash with probability > 1 - 1e-8 per shard.
    counts = [0] * 4
    for i in range(4000):
        counts[shard_of(f"parity/test_x.py::test_case[{i}-float16]", 4)] += 1
    assert all(abs(c - 1000) < 6 * 27.4 for c in counts), counts


def test_shard_of_does_not_depend_on_the_process():
    # Python's str hash is salted per process; the shard must not be.
    ids = [f"properties/test_p.py::test_{i}" for i in range(50)]
    code = f"from scripts.shard import shard_of; print([shard_of(n, 7) for n in {ids!r}])"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert out.strip() == str([shard_of(n, 7) for n in ids])


def test_bad_arguments_are_refused_by_name():
    with pytest.raises(ValueError, match="num_shards"):
        shard_of("a", 0)
    with pytest.raises(ValueError, match="num_shards"):
        shard_of("a", True)
    with pytest.raises(TypeError, match="nodeid"):
        shard_of(3, 2)


SAMPLE = '''
import pytest


@pytest.mark.parametrize("i", range(24))
def test_case(i):
    pass


def test_other():
    pass
'''


def collect(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "scripts.shard", *args], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def test_pytest_runs_each_test_in_exactly_one_shard(tmp_path):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    whole = {line for line in collect(tmp_path).stdout.splitlines() if "::" in line}
    assert len(whole) == 25
    shards = []
    for shard in range(3):
        run = collect(tmp_path, "--num-shards", "3", "--shard-id", str(shard))
        assert run.returncode == 0, run.stdout + run.stderr
        shards.append({line for line in run.stdout.splitlines() if "::" in line})
        assert shards[-1] == {n for n in whole if shard_of(n, 3) == shard}
    assert set().union(*shards) == whole and sum(map(len, shards)) == len(whole)


@pytest.mark.parametrize("args", [("--num-shards", "3", "--shard-id", "3"), ("--num-shards", "0")])
def test_bad_shard_options_stop_the_run(tmp_path, args):
    (tmp_path / "test_sample.py").write_text(textwrap.dedent(SAMPLE))
    run = collect(tmp_path, *args)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR and "--" in run.stderr, run.stderr


def make_dry_run(*variables: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("SHARD_ID", "NUM_SHARDS", "MAKEFLAGS")}
    return subprocess.run(["make", "-n", "test", *variables], cwd=ROOT, capture_output=True, text=True,
                          check=True, env=env, timeout=60).stdout


def test_makefile_passes_the_shard_variables():
    assert "-p scripts.shard --num-shards 4 --shard-id 3" in make_dry_run("SHARD_ID=3", "NUM_SHARDS=4")
    assert "--shard-id 0" in make_dry_run("NUM_SHARDS=2")
    assert "scripts.shard" not in make_dry_run()


def test_a_shard_id_without_a_shard_count_is_refused():
    # unrefused, SHARD_ID=1 alone would run every test: each job of a matrix whose count is misspelled runs all
    env = {k: v for k, v in os.environ.items() if k not in ("SHARD_ID", "NUM_SHARDS", "MAKEFLAGS")}
    result = subprocess.run(["make", "-n", "test", "SHARD_ID=1"], cwd=ROOT, capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode != 0 and "SHARD_ID=1 needs NUM_SHARDS" in result.stderr
