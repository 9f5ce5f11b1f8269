"""Shared fixtures: a real Redis server for the tests of policies shared through a
database (``redis-server`` on localhost, on a free port, started and stopped here)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The port of a fresh ``redis-server`` (no persistence), stopped after the session.

    Skipped where ``redis-server`` is not installed, except in CI (``CI`` set), where
    ``.ci/run`` installs it: there its absence fails the tests."""
    pytest.importorskip("redis", reason="the redis client is in rlcheck's dev extra")
    server = shutil.which("redis-server")
    if server is None:
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed; .ci/run installs it (apt redis-server)")
        pytest.skip("redis-server is not installed (Debian/Ubuntu: apt-get install redis-server)")
    import redis

    workdir: Path = tmp_path_factory.mktemp("redis")
    for _ in range(3):  # another process may take the free port before the server does
        port = _free_port()
        proc = subprocess.Popen(
            [
                server,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        else:
            proc.kill()
            proc.wait()
            continue
        try:
            yield port
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return
    pytest.fail("redis-server did not start")
