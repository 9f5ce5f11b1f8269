"""Shared fixtures: a real Redis server for the tests of policies shared through a
database (``redis-server`` on localhost, on a free port, started and stopped by the one
helper the benchmarks use too, ``benchmarks/_redis.py``); the Hypothesis backend's
statistics of a test's runs, and a backend that never steps aside."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _redis import RedisServerMissing, redis_server

from rlcheck.hypothesis_backend import BackendStats, RLCheckProvider, collect_stats


@pytest.fixture
def stats() -> Iterator[BackendStats]:
    """The rlcheck backend's statistics of every run the test makes."""
    with collect_stats() as collected:
        yield collected


@pytest.fixture
def always_guided(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case on the provider: no run steps aside after its first cases (a module of
    tests about guidance uses it for all of its tests; a test of stepping aside sets
    ``probe_cases`` back)."""
    monkeypatch.setattr(RLCheckProvider, "probe_cases", 0)


@pytest.fixture(scope="session")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a fresh ``redis-server`` (no persistence), stopped after the session.

    Skipped where ``redis-server`` is not installed, except in CI (``CI`` set), where
    ``.ci/run`` installs it: there its absence fails the tests."""
    pytest.importorskip("redis", reason="the redis client is in rlcheck's dev extra")
    workdir = str(tmp_path_factory.mktemp("redis"))
    try:
        with redis_server(workdir) as port:  # raises only on entry, before the yield
            yield port
    except RedisServerMissing as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc}; .ci/run installs it (apt redis-server)")
        pytest.skip(str(exc))
    except RuntimeError as exc:
        pytest.fail(str(exc))
