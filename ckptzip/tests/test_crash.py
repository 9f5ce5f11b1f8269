"""Crash safety of CheckpointManager: SIGKILL mid-save, and a full disk.

RELIABILITY.md ckptzip rows 5, 6 and 10: a killed save never leaves a half checkpoint that is
listed or loaded, the latest finished step always restores, temp files are cleaned up; a
write failing with ENOSPC raises a clear StorageError, leaves no temp file and does not touch
the previous step.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _attack import scaled
from _checks import writer_lock_held

from ckptzip import CheckpointManager, CompressionConfig, QuantConfig, storage
from ckptzip.errors import StorageError
from ckptzip.manager import describe_directory, step_file_name

CONFIG = CompressionConfig(quant=QuantConfig(bins=8, protect=0.01), min_numel=64)


def _state(step: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(step)
    return {
        "w": torch.linspace(-1, 1, 3000) + 0.01 * step * torch.randn(3000, generator=g),
        "marker": torch.full((16,), step, dtype=torch.int64),
        "step": step,
    }


def _temps(directory: Path) -> list[str]:
    return [n for n in os.listdir(directory) if storage.is_temp_name(n)]


def _check_directory(directory: Path) -> int | None:
    """Every listed step restores with its own content; returns the latest step."""
    mgr = CheckpointManager(directory, keyframe_every=4, keep=3, config=CONFIG)
    steps = mgr.steps()
    for s in steps:
        obj = mgr.load(s)
        assert obj["step"] == s
        assert torch.equal(obj["marker"], torch.full((16,), s, dtype=torch.int64))
    assert all(e.status == "ok" for e in describe_directory(directory))
    with mgr.store.writing():  # the next writer removes crashed saves' temps
        pass
    assert _temps(directory) == []
    return steps[-1] if steps else None


class _FileWrapper:
    """A file object ``f`` with its ``write`` replaced by a subclass's: everything else, the
    context manager closing it included, is ``f``'s."""

    def __init__(self, f: Any) -> None:
        self._f = f

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _FileWrapper:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


class _DieMidWrite(_FileWrapper):
    """A file whose ``write`` writes part of its data, then SIGKILLs the process."""

    def __init__(self, f: Any, fraction: float) -> None:
        super().__init__(f)
        self._fraction = fraction

    def write(self, data: bytes) -> int:
        view = memoryview(data).cast("B")
        self._f.write(view[: int(len(view) * self._fraction)])
        self._f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")


def _saver(
    directory: Path, start: int, die_in_save: int | None, fraction: float, blocking: bool
) -> None:
    """Save steps from ``start`` on, forever; with ``die_in_save=k``, die inside the k-th
    save's write of its temp file (after ``fraction`` of the first write's bytes)."""
    try:
        torch.set_num_threads(1)
        if die_in_save is not None:
            saves = [0]
            real_open = open

            def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
                f = real_open(file, mode, *args, **kwargs)
                if "x" in mode or "w" in mode:  # a temp file being written
                    saves[0] += 1
                    if saves[0] > die_in_save:
                        return _DieMidWrite(f, fraction)
                return f

            storage.open = open_  # type: ignore[attr-defined]  # the module's builtin lookup
        mgr = CheckpointManager(directory, keyframe_every=4, keep=3, config=CONFIG)
        step = start
        while True:
            if blocking:
                mgr.save(step, _state(step))
            else:  # the write runs in the worker thread; the next save waits for it
                mgr.save(step, _state(step), blocking=False)
            step += 1
    finally:
        os._exit(0)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("blocking", [True, False], ids=["blocking", "async"])
def test_sigkill_during_saves_never_leaves_a_half_checkpoint(
    tmp_path: Path, blocking: bool
) -> None:
    # Forking (instead of starting a fresh interpreter each time) keeps each of the many
    # kills cheap: the child starts saving within milliseconds.
    rng = random.Random(20261129)
    directory = tmp_path / "run"
    directory.mkdir()
    # Calibrate the kill delays on one timed save, so kills land all over a save's phases
    # (quantizing, writing the temp file, publishing, retention).
    CheckpointManager(directory, keyframe_every=4, keep=3, config=CONFIG).save(0, _state(0))
    # Time what a forked saver does first: open the directory with a fresh manager (no decoded
    # parent cached) and save a delta step. Timing a warm manager's save instead made the
    # delays too short for the saver to get anywhere on a quiet machine.
    t0 = time.perf_counter()
    CheckpointManager(directory, keyframe_every=4, keep=3, config=CONFIG).save(1, _state(1))
    one_save = time.perf_counter() - t0
    latest: int | None = 1
    kills = 0
    landed_mid_save = 0
    # Asynchronous saves share every code path below the worker thread: fewer kills suffice.
    total, mid_write_needed = (scaled(60), 5) if blocking else (scaled(24), 3)
    while kills < total:
        # Every third kill is aimed: the saver kills itself part-way through writing a temp
        # file (on a quiet machine the write is too small a part of a save for random timing
        # to hit it often); the others land at random moments of any phase.
        aimed = kills % 3 == 2
        pid = os.fork()
        if pid == 0:
            die = rng.randrange(3) if aimed else None
            _saver(directory, (latest or 0) + 1, die, rng.random(), blocking)
        if aimed:
            deadline = time.monotonic() + 60
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:  # a save that never writes: fail loudly
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    raise AssertionError("the aimed saver did not die while writing")
                time.sleep(0.005)
        else:
            time.sleep(rng.uniform(0.0, 3.0 * one_save))
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        kills += 1
        landed_mid_save += bool(_temps(directory))
        now = _check_directory(directory)
        assert now is not None and (latest is None or now >= latest)
        latest = now
    assert latest is not None and latest > 5  # the saver made progress between kills
    assert landed_mid_save >= mid_write_needed, (
        f"only {landed_mid_save} kills landed while a file was written"
    )
    print(f"{kills} kills, {landed_mid_save} mid-write, reached step {latest}", file=sys.stderr)


class _FullDisk(_FileWrapper):
    """A file object that accepts ``budget`` bytes, then fails like a full disk."""

    def __init__(self, f: Any, budget: int) -> None:
        super().__init__(f)
        self._budget = budget

    def write(self, data: bytes) -> int:
        n = len(memoryview(data).cast("B"))
        if n > self._budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget -= n
        return int(self._f.write(data))


@pytest.mark.parametrize("budget", [0, 64, 1024])
def test_enospc_during_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=4, config=CONFIG)
    mgr.save(1, _state(1))
    before = (tmp_path / step_file_name(1)).read_bytes()

    real_open = open

    def full_disk_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = real_open(path, mode, *args, **kwargs)
        return _FullDisk(f, budget) if "x" in mode or "w" in mode else f

    monkeypatch.setattr(storage, "open", full_disk_open, raising=False)
    with pytest.raises(StorageError, match="no space left") as info:
        mgr.save(2, _state(2))
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()

    assert _temps(tmp_path) == []
    assert mgr.steps() == [1]
    assert (tmp_path / step_file_name(1)).read_bytes() == before
    assert mgr.load()["step"] == 1
    mgr.save(2, _state(2))  # once space is back, saving works and chains onto step 1
    assert mgr.load(2)["step"] == 2 and mgr.chain(2) == [1, 2]


def test_enospc_on_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Some file systems report a full disk only when the data is flushed.
    mgr = CheckpointManager(tmp_path, config=CONFIG)
    mgr.save(1, _state(1))

    def failing_fsync(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(storage.os, "fsync", failing_fsync)
    with pytest.raises(StorageError, match="no space left"):
        mgr.save(2, _state(2))
    monkeypatch.undo()
    assert _temps(tmp_path) == [] and mgr.steps() == [1]
    assert mgr.load()["step"] == 1


# -- a crashed writer never blocks its restarted job (RELIABILITY.md ckptzip row 21) -----------


class _Alarm:
    """Fail (instead of hanging the suite) when a block takes longer than ``seconds``."""

    def __init__(self, seconds: int) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        def expired(signum: int, frame: Any) -> None:
            raise TimeoutError(f"still blocked after {self.seconds} s")

        self._old = signal.signal(signal.SIGALRM, expired)
        signal.alarm(self.seconds)

    def __exit__(self, *exc: object) -> None:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self._old)


def _writer_killed_inside_a_save(directory: Path, tmp_path: Path, *, forks_a_worker: bool) -> Path:
    """Fork a writer that saves step 1, then dies (SIGKILL) inside the save of step 2, while
    it holds the lock; with ``forks_a_worker`` it first forks a long-lived child (what a
    DataLoader worker started during an asynchronous save is), whose pid it writes into the
    file returned."""
    inside, worker = tmp_path / "inside", tmp_path / "worker-pid"
    pid = os.fork()
    if pid == 0:
        try:
            mgr = CheckpointManager(directory, keyframe_every=4, config=CONFIG)
            mgr.save(1, _state(1))

            def publish_and_hang(self: Any, name: str, write: Any, *, overwrite: bool) -> int:
                if forks_a_worker:
                    child = os.fork()
                    if child == 0:
                        time.sleep(120)  # a worker that outlives the writer
                        os._exit(0)
                    worker.write_text(str(child))
                inside.touch()
                time.sleep(600)
                raise AssertionError("unreachable")

            storage.LocalStorage.publish = publish_and_hang  # type: ignore[method-assign]
            mgr.save(2, _state(2))
        finally:
            os._exit(1)
    deadline = time.monotonic() + 120
    while not inside.exists():
        assert time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0)
        time.sleep(0.01)
    holder = storage.LocalStorage(directory).holder()
    assert holder is not None and holder["pid"] == pid  # the lock records who holds it
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return worker


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("forks_a_worker", [False, True], ids=["writer", "writer-with-worker"])
def test_restarted_job_saves_at_once_after_a_writer_killed_inside_a_save(
    tmp_path: Path, forks_a_worker: bool
) -> None:
    directory = tmp_path / "run"
    worker = _writer_killed_inside_a_save(directory, tmp_path, forks_a_worker=forks_a_worker)
    try:
        t0 = time.monotonic()
        with _Alarm(60):
            mgr = CheckpointManager(directory, keyframe_every=4, config=CONFIG)
            mgr.save(2, _state(2))
        assert time.monotonic() - t0 < 15
        assert mgr.steps() == [1, 2] and mgr.load()["step"] == 2
        assert _temps(directory) == []
    finally:
        if worker.exists():  # the orphaned worker, by the pid it was given
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(worker.read_text()), signal.SIGKILL)


def test_a_running_writer_holding_the_lock_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = CheckpointManager(tmp_path, config=CONFIG)
    mgr.save(1, _state(1))
    with writer_lock_held(mgr.store):
        monkeypatch.setattr(storage.LocalStorage, "lock_wait", 0.3)
        with _Alarm(30), pytest.raises(StorageError, match=rf"pid {os.getpid()} .* still running"):
            CheckpointManager(tmp_path, config=CONFIG).save(2, _state(2))
    CheckpointManager(tmp_path, config=CONFIG).save(2, _state(2))  # free again
