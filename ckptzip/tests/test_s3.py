"""CheckpointManager on a real S3 API: moto's server on localhost, s3fs as the client.

The server is started by the fixture on 127.0.0.1 at a free port; credentials are dummies.
Covers the commit-marker protocol of :class:`ckptzip.storage.FsspecStorage`: an upload
interrupted midway (data put but never committed, or the put itself failing) is never
listed and is cleaned up by the next writer; a reader listing and loading while a writer
commits only ever sees finished steps.
"""

from __future__ import annotations

import socket
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ckptzip import CheckpointManager, CompressionConfig, QuantConfig, storage
from ckptzip.chains import step_file_name
from ckptzip.errors import CheckpointNotFoundError, CkptzipWarning, StorageError
from ckptzip.manager import describe_directory

moto_server = pytest.importorskip("moto.server")
s3fs = pytest.importorskip("s3fs")
fsspec = pytest.importorskip("fsspec")

CONFIG = CompressionConfig(quant=QuantConfig(bins=8, protect=0.01), min_numel=64)
BUCKET = "ckptzip-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port())
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch, request: Any) -> str:
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    # fsspec's per-protocol defaults: every s3:// URL opened by ckptzip talks to the server
    monkeypatch.setitem(fsspec.config.conf, "s3", {"client_kwargs": {"endpoint_url": s3_server}})
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_server})
    if not fs.exists(BUCKET):
        fs.mkdir(BUCKET)
    return f"s3://{BUCKET}/{request.node.name}"


def _state(step: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(step)
    return {
        "w": torch.linspace(-1, 1, 800) + 0.01 * step * torch.randn(800, generator=g),
        "step": step,
    }


def test_save_retain_and_load_on_s3(s3: str) -> None:
    mgr = CheckpointManager(s3, keyframe_every=3, keep=2, config=CONFIG)
    for s in range(1, 6):
        mgr.save(s, _state(s))
    fresh = CheckpointManager(s3, config=CONFIG)
    assert fresh.steps() == [4, 5]
    assert fresh.load()["step"] == 5 and fresh.load(4)["step"] == 4
    assert [e.status for e in describe_directory(s3)] == ["ok", "ok"]
    mgr.save(6, _state(6), blocking=False)
    mgr.close()
    assert CheckpointManager(s3).latest_step() == 6


def test_upload_interrupted_midway_is_never_listed(
    s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = CheckpointManager(s3, keyframe_every=3, config=CONFIG)
    mgr.save(1, _state(1))
    real = storage.FsspecStorage._put

    def die_before_commit(self: storage.FsspecStorage, name: str, data: bytes) -> None:
        if name.endswith(storage.COMMIT_SUFFIX):
            raise StorageError("connection reset: the writer died before its commit")
        real(self, name, data)

    monkeypatch.setattr(storage.FsspecStorage, "_put", die_before_commit)
    with pytest.raises(StorageError):
        mgr.save(2, _state(2))
    monkeypatch.setattr(storage.FsspecStorage, "_put", real)
    fs = s3fs.S3FileSystem(client_kwargs=fsspec.config.conf["s3"]["client_kwargs"])
    data = f"{s3.removeprefix('s3://')}/{step_file_name(2)}"
    assert fs.exists(data)  # the object is there ...
    reader = CheckpointManager(s3, config=CONFIG)
    assert reader.steps() == [1] and reader.load()["step"] == 1  # ... but never counted
    with pytest.raises(CheckpointNotFoundError):
        reader.load(2)

    def die_in_upload(self: storage.FsspecStorage, name: str, data: bytes) -> None:
        real(self, name, data[: len(data) // 2])  # half the bytes reach the store
        raise StorageError("connection reset during the upload")

    monkeypatch.setattr(storage.FsspecStorage, "_put", die_in_upload)
    with pytest.raises(StorageError):
        CheckpointManager(s3, keyframe_every=3, config=CONFIG).save(3, _state(3))
    monkeypatch.setattr(storage.FsspecStorage, "_put", real)
    assert CheckpointManager(s3).steps() == [1]
    writer = CheckpointManager(s3, keyframe_every=3, config=CONFIG)
    writer.save(4, _state(4))  # a new writer removes both leftovers
    fs.invalidate_cache()
    assert not fs.exists(data) and not fs.exists(data.replace("00002", "00003"))
    assert writer.steps() == [1, 4] and writer.load(4)["step"] == 4


def test_reader_listing_while_a_writer_commits(s3: str) -> None:
    writer = CheckpointManager(s3, keyframe_every=3, config=CONFIG)
    writer.save(0, _state(0))
    done = threading.Event()
    problems: list[BaseException] = []
    seen: set[int] = set()

    def read() -> None:
        reader = CheckpointManager(s3, config=CONFIG)
        while not done.is_set():
            try:
                for s in reader.steps():
                    assert reader.load(s)["step"] == s
                    seen.add(s)
            except BaseException as exc:  # collected, asserted below
                problems.append(exc)
                return

    t = threading.Thread(target=read)
    t.start()
    try:
        for s in range(1, 7):
            writer.save(s, _state(s))
    finally:
        done.set()
        t.join(60)
    assert not problems, problems
    assert seen and writer.steps() == list(range(7))


def test_cli_on_s3(s3: str, tmp_path: Path) -> None:
    from test_cli import cli_round_trip_on, state

    pt = tmp_path / "ckpt.pt"
    torch.save(state(), pt)
    cli_round_trip_on(s3, pt, tmp_path)


# -- a crashed writer's lease (RELIABILITY.md ckptzip row 21) ----------------------------------

_KILLED_WRITER = """
import os, sys, time, torch, fsspec
fsspec.config.conf["s3"] = {"client_kwargs": {"endpoint_url": sys.argv[1]}}
from ckptzip import CheckpointManager, CompressionConfig, storage
real = storage.FsspecStorage.publish

def publish_then_hang(self, name, write, *, overwrite):
    if name.startswith("step-00000002"):
        open(sys.argv[3], "w").close()  # inside the save, lease held: the parent kills us
        time.sleep(600)
    return real(self, name, write, overwrite=overwrite)

storage.FsspecStorage.publish = publish_then_hang
mgr = CheckpointManager(sys.argv[2], config=CompressionConfig(min_numel=64))
mgr.save(1, {"w": torch.linspace(-1, 1, 800), "step": 1})
mgr.save(2, {"w": torch.linspace(-1, 1, 800), "step": 2})
"""


@pytest.mark.slow
def test_restarted_job_takes_over_the_lease_of_a_killed_writer(
    s3: str, s3_server: str, tmp_path: Path
) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    inside = tmp_path / "inside-save"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, s3_server, s3, str(inside)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        deadline = time.monotonic() + 300
        while not inside.exists():
            assert child.poll() is None, "the writer died before its second save"
            assert time.monotonic() < deadline, "the writer never reached its second save"
            time.sleep(0.05)
        lease = storage.FsspecStorage(s3).holder()
        assert lease is not None and lease["pid"] == child.pid  # it holds the lease ...
    finally:
        child.send_signal(signal.SIGKILL)  # ... and dies inside the save
        child.wait()
    t0 = time.monotonic()
    with pytest.warns(CkptzipWarning, match=rf"took over .*pid {child.pid} .* has exited"):
        CheckpointManager(s3, config=CONFIG).save(2, _state(2))
    assert time.monotonic() - t0 < 15  # seconds, not the lease's lifetime
    assert CheckpointManager(s3).steps() == [1, 2]


def test_lease_of_a_writer_elsewhere_expires_without_its_heartbeat(
    s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import time

    monkeypatch.setattr(storage.FsspecStorage, "lease_seconds", 2.0)
    fs = s3fs.S3FileSystem(client_kwargs=fsspec.config.conf["s3"]["client_kwargs"])
    dead = {"owner": "x", "host": "another-machine", "pid": 7, "renewed": time.time()}
    dead["expires"] = dead["renewed"] + 2.0  # what a dead remote writer leaves behind
    fs.pipe_file(f"{s3.removeprefix('s3://')}/{storage.LOCK_NAME}", json.dumps(dead).encode())
    t0 = time.monotonic()
    with pytest.warns(CkptzipWarning, match="pid 7 on host 'another-machine' expired"):
        CheckpointManager(s3, config=CONFIG).save(1, _state(1))
    assert time.monotonic() - t0 < 10


def test_a_running_writer_keeps_its_lease_by_heartbeat(
    s3: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    monkeypatch.setattr(storage.FsspecStorage, "lease_seconds", 1.0)
    first = CheckpointManager(s3, config=CONFIG)
    first.save(1, _state(1))
    held, release, released = threading.Event(), threading.Event(), []

    def slow_writer() -> None:  # a save taking three lease lifetimes
        with first.store.writing():
            held.set()
            release.wait(30)
            time.sleep(3.0)
            released.append(time.monotonic())

    t = threading.Thread(target=slow_writer)
    t.start()
    try:
        assert held.wait(30)
        release.set()
        second = storage.FsspecStorage(s3)
        second.lease_wait = 0.5
        with (
            pytest.raises(StorageError, match=r"another writer holds the lease .* pid \d+"),
            second.lock(),
        ):
            pass
        second.lease_wait = 30.0
        with second.lock():
            got = time.monotonic()
    finally:
        release.set()
        t.join()
    assert released and got >= released[0]  # never two holders at once


def test_a_writer_that_lost_its_lease_publishes_nothing(s3: str) -> None:
    import json

    mgr = CheckpointManager(s3, config=CONFIG)
    mgr.save(1, _state(1))
    fs = s3fs.S3FileSystem(client_kwargs=fsspec.config.conf["s3"]["client_kwargs"])
    real = storage.FsspecStorage.publish

    def stolen(self: storage.FsspecStorage, name: str, write: Any, *, overwrite: bool) -> int:
        other = {"owner": "another-job", "host": "h", "pid": 1, "expires": 4e9}
        fs.pipe_file(f"{s3.removeprefix('s3://')}/{storage.LOCK_NAME}", json.dumps(other).encode())
        return real(self, name, write, overwrite=overwrite)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(storage.FsspecStorage, "publish", stolen)
        with pytest.raises(StorageError, match=r"lost the lease .* nothing was published"):
            mgr.save(2, _state(2))
    assert CheckpointManager(s3).steps() == [1]


# -- the store going away (RELIABILITY.md ckptzip row 22) ---------------------------------------


def test_endpoint_down_every_call_raises_a_typed_storage_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    import ckptzip
    from ckptzip.cli import main

    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port())
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    # one attempt per call: the driver's own retries only make the test slower
    conf = {
        "client_kwargs": {"endpoint_url": endpoint},
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
    }
    monkeypatch.setitem(fsspec.config.conf, "s3", conf)
    s3fs.S3FileSystem(**conf).mkdir("ckptzip-down")
    url = "s3://ckptzip-down/run"
    mgr = CheckpointManager(url, config=CONFIG)
    mgr.save(1, _state(1))
    server.stop()  # the endpoint goes away mid-run

    calls = {
        "save": lambda: mgr.save(2, _state(2)),
        "steps": lambda: CheckpointManager(url).steps(),
        "load": lambda: CheckpointManager(url).load(),
        "ckptzip.load": lambda: ckptzip.load(f"{url}/{step_file_name(1)}"),
        "ckptzip.save": lambda: ckptzip.save(_state(3), f"{url}/other.ckz", config=CONFIG),
    }
    for what, call in calls.items():
        with pytest.raises(StorageError) as info:
            call()
        message = str(info.value)
        assert url in message and "cannot reach the store" in message, (what, message)
        assert "check the endpoint URL" in message, (what, message)
    r = CliRunner().invoke(main, ["inspect", url])
    assert r.exit_code == 1 and "cannot reach the store" in r.output, r.output


class _FaultyFs:
    """An fsspec filesystem whose ``fail_at``-th call (counting from 0) raises botocore's
    ``EndpointConnectionError``, as a store that drops off the network at that moment."""

    def __init__(self, fs: Any, fail_at: int | None) -> None:
        self._fs, self.fail_at, self.calls = fs, fail_at, 0

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._fs, name)
        if not callable(real) or name == "invalidate_cache":
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            n, self.calls = self.calls, self.calls + 1
            if n == self.fail_at:
                from botocore.exceptions import EndpointConnectionError

                raise EndpointConnectionError(endpoint_url=f"{name}: injected fault")
            return real(*args, **kwargs)

        return call


@pytest.mark.slow
def test_a_fault_at_every_store_call_of_a_save(s3: str) -> None:
    """The store fails at the 1st, 2nd, ... call of a save (listing, parent read, lease,
    upload, commit marker, retention): each save raises StorageError or succeeds, and every
    step listed afterwards restores with its own content; the next save always works."""
    mgr = CheckpointManager(s3, keyframe_every=3, keep=2, config=CONFIG)
    mgr.save(1, _state(1))
    counter = _FaultyFs(mgr.store.storage._fs, None)  # type: ignore[attr-defined]
    mgr.store.storage._fs = counter  # type: ignore[attr-defined]
    mgr.save(2, _state(2))
    calls_per_save = counter.calls
    assert calls_per_save >= 8
    step, outcomes = 3, {"raised": 0, "warned": 0, "silent": 0}
    for fail_at in range(calls_per_save + 2):
        counter.fail_at, counter.calls = fail_at, 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                mgr.save(step, _state(step))
                # after the commit a fault only stops retention, which says so
                outcomes["warned" if caught else "silent"] += 1
            except StorageError as exc:
                assert s3 in str(exc) and "cannot reach the store" in str(exc), exc
                outcomes["raised"] += 1
        counter.fail_at = None
        reader = CheckpointManager(s3, config=CONFIG)
        for s in reader.steps():
            assert reader.load(s)["step"] == s
        if step not in reader.steps():
            mgr.save(step, _state(step), overwrite=step in reader.store.storage.names())
        assert CheckpointManager(s3, config=CONFIG).load()["step"] == step
        step += 1
    # the last two fault positions lie past the save's calls; the lease's release is the
    # only call whose failure is harmless and unreported (the lease then just expires)
    print(f"{calls_per_save + 2} fault positions: {outcomes}", file=sys.stderr)
    assert outcomes["raised"] >= 3 and outcomes["silent"] <= 3, outcomes
