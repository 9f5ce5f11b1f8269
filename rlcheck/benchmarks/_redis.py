"""A throwaway ``redis-server`` for the tests and benchmarks of policies shared through Redis.

One helper for both (``tests/conftest.py``'s ``redis_port`` fixture and
``benchmarks/shared_policy.py``): a fresh server on a free localhost port, without
persistence, stopped on exit.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RedisServerMissing", "redis_server"]

_START_S = 10.0  # how long a server may take to answer its first ping
_TRIES = 3  # another process may take the free port before the server binds it


class RedisServerMissing(RuntimeError):
    """``redis-server`` is not on the PATH."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_server(workdir: str | None = None) -> Iterator[int]:
    """The port of a fresh ``redis-server`` answering on localhost, stopped on exit.

    Raises :class:`RedisServerMissing` where ``redis-server`` is not installed, and
    ``RuntimeError`` where it did not start in :data:`_TRIES` tries. Needs the ``redis``
    client (rlcheck's dev extra) to see the server answer.
    """
    import redis

    server = shutil.which("redis-server")
    if server is None:
        raise RedisServerMissing(
            "redis-server is not installed (Debian/Ubuntu: apt-get install redis-server)"
        )
    with _directory(workdir) as directory:
        for _ in range(_TRIES):
            port = _free_port()
            options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            proc = subprocess.Popen(
                [server, "--port", str(port), *options, "--dir", directory],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                if _answers(redis.Redis(port=port), proc):
                    yield port
                    return
            finally:
                _stop(proc)
    raise RuntimeError(f"redis-server did not start in {_TRIES} tries")


def _answers(client: object, proc: subprocess.Popen[bytes]) -> bool:
    import redis

    deadline = time.monotonic() + _START_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            client.ping()  # type: ignore[attr-defined]
            return True
        except redis.ConnectionError:
            time.sleep(0.05)
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def _directory(workdir: str | None) -> Iterator[str]:
    """``workdir`` itself, or a temporary directory removed on exit."""
    if workdir is not None:
        yield workdir
        return
    with tempfile.TemporaryDirectory() as directory:
        yield directory
