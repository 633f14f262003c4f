"""pytest plugin: run one shard of the suite (``-p scripts.shard --num-shards N --shard-id I``).

``make test SHARD_ID=I NUM_SHARDS=N`` (and ``make gate``) load it; a CI job
matrix runs shards 0..N-1 on N machines.

A test belongs to shard ``sha256(node id) mod N``. That is deterministic (no
salted ``hash()``, no dependence on collection order or on which other tests
exist), so every xdist worker of a shard keeps the same tests, the shards of
one run are disjoint and cover the suite, and a test stays in its shard when
others are added: shard I of a pull request compares with shard I of the base
branch. Shards balance test counts, not time (about N equal parts of a
multinomial draw); parametrizations of one test may land in different shards.
"""

from __future__ import annotations

import hashlib

import pytest


def shard_of(nodeid: str, num_shards: int) -> int:
    """The shard (0 <= shard < num_shards) that runs ``nodeid``."""
    if not isinstance(nodeid, str):
        raise TypeError(f"nodeid must be a str, got {type(nodeid).__name__}")
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards must be an int >= 1, got {num_shards!r}")
    digest = hashlib.sha256(nodeid.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % num_shards


def pytest_addoption(parser):
    group = parser.getgroup("mlxgate-shard", "run one shard of the suite (scripts/shard.py)")
    group.addoption("--num-shards", type=int, default=1, metavar="N",
                    help="split the collected tests into N shards by a stable hash of their node ids")
    group.addoption("--shard-id", type=int, default=0, metavar="I", help="the shard to run, 0 <= I < N")


def shard_options(config) -> tuple[int, int]:
    num, shard = config.getoption("--num-shards"), config.getoption("--shard-id")
    if num < 1:
        raise pytest.UsageError(f"--num-shards must be >= 1, got {num}")
    if not 0 <= shard < num:
        raise pytest.UsageError(f"--shard-id must be in [0, {num}) for --num-shards {num}, got {shard}")
    return shard, num


def pytest_configure(config):
    shard_options(config)  # bad options stop the run before collection


def pytest_report_header(config):
    shard, num = shard_options(config)
    if num > 1:
        return [f"mlxgate: shard {shard} of {num} (--shard-id {shard} --num-shards {num}; sha256 of the node id)"]
    return None


def pytest_collection_modifyitems(config, items):
    shard, num = shard_options(config)
    if num == 1:
        return
    keep, drop = [], []
    for item in items:
        (keep if shard_of(item.nodeid, num) == shard else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
