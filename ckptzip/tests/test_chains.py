"""The chain store under CheckpointManager: nothing lost, iterative chains, identity, readers.

One test per defect of the manager before the chain store (each failed on that code):
retention deleting what kept steps need, URL directories written to local disk, long chains
hitting the recursion limit, a parent hashed and decoded through two opens, exclusive locks
for readers, swapped step files, FIFOs hanging readers, surprising step semantics, and a
save raising after it published.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from _checks import writer_lock_held

import ckptzip
from ckptzip import CheckpointManager, CompressionConfig, QuantConfig, storage
from ckptzip.chains import MAX_CHAIN_LENGTH, step_file_name
from ckptzip.errors import (
    CheckpointNotFoundError,
    CkptzipWarning,
    ConfigError,
    NotRegularFileError,
    StepMismatchError,
    StorageError,
)
from ckptzip.manager import describe_directory

CONFIG = CompressionConfig(quant=QuantConfig(bins=8, protect=0.01), min_numel=64)


def _state(step: int, n: int = 600) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1234)
    base = torch.randn(n, generator=g)
    move = torch.randn(n, generator=torch.Generator().manual_seed(step))
    return {"w": base + 0.01 * step * move, "step": step}


def _five(tmp_path: Path) -> CheckpointManager:
    mgr = CheckpointManager(tmp_path, keyframe_every=10, keep=2, config=CONFIG)
    for s in range(1, 6):
        mgr.save(s, _state(s))
    return mgr


class _FailingReads:
    """Make ``LocalStorage.read`` of one name fail ``times`` times (then read normally)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, times: int | None) -> None:
        self.left = times
        real = storage.LocalStorage.read

        def read(this: storage.LocalStorage, n: str) -> bytes:
            if n == name and (self.left is None or self.left > 0):
                if self.left is not None:
                    self.left -= 1
                raise StorageError(f"cannot read {n!r}: Permission denied")
            return real(this, n)

        monkeypatch.setattr(storage.LocalStorage, "read", read)


# -- nothing lost ----------------------------------------------------------------------------


@pytest.mark.parametrize("failure", ["unreadable", "transient", "corrupt", "missing"])
def test_retention_never_deletes_what_a_kept_step_may_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: str
) -> None:
    mgr = _five(tmp_path)
    three = tmp_path / step_file_name(3)
    original = three.read_bytes()
    if failure == "unreadable":
        _FailingReads(monkeypatch, step_file_name(3), None)
    elif failure == "transient":
        _FailingReads(monkeypatch, step_file_name(3), 1)
    elif failure == "corrupt":
        three.write_bytes(original[:100])
    else:
        three.unlink()
    with pytest.warns(CkptzipWarning, match="deleted nothing"):
        report = mgr.save(6, _state(6))  # a success: the save itself is fine
    assert report.step == 6
    assert mgr.steps() == ([1, 2, 4, 5, 6] if failure == "missing" else [1, 2, 3, 4, 5, 6])
    monkeypatch.undo()
    if failure != "missing":
        three.write_bytes(original)
        for s in range(1, 7):  # every step that was restorable still is
            assert mgr.load(s)["step"] == s
    else:
        assert mgr.steps() == [1, 2, 4, 5, 6]
        for s in (1, 2, 6):
            assert mgr.load(s)["step"] == s


def test_retention_deletes_what_it_can_prove_unneeded(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=3, keep=2, config=CONFIG)
    for s in range(1, 8):
        mgr.save(s, _state(s))
    # chains: 1-2-3, 4-5-6, 7: kept 6 and 7 need 4, 5, 6 and 7
    assert mgr.steps() == [4, 5, 6, 7]


def test_warning_is_given_once_per_problem(tmp_path: Path) -> None:
    mgr = _five(tmp_path)
    (tmp_path / step_file_name(4)).unlink()  # 5 cannot be restored; it stays kept
    with pytest.warns(CkptzipWarning):
        mgr.save(6, _state(6))
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mgr.save(7, _state(7))  # the same problem (step 5): said already
    assert [w for w in caught if issubclass(w.category, CkptzipWarning)] == []


# -- URL directories ---------------------------------------------------------------------------


def test_url_directory_is_never_written_locally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsspec = pytest.importorskip("fsspec")
    monkeypatch.chdir(tmp_path)
    url = f"memory://ckptzip-chains-{os.getpid()}/run1"
    try:
        mgr = CheckpointManager(url, keyframe_every=3, keep=2, config=CONFIG)
        for s in range(1, 5):
            mgr.save(s, _state(s))
        assert os.listdir(tmp_path) == []  # no ./memory:/... tree
        fresh = CheckpointManager(url, keyframe_every=3, keep=2, config=CONFIG)
        assert fresh.steps() == [1, 2, 3, 4] and fresh.load()["step"] == 4
        assert str(fresh.path(4)) == f"{url}/{step_file_name(4)}"
        assert [e.status for e in describe_directory(url)] == ["ok"] * 4
        fresh.save(5, _state(5))  # 4-5 is the chain now: 1-2-3 are no longer needed
        assert fresh.steps() == [4, 5]
    finally:
        fsspec.filesystem("memory").rm(f"/ckptzip-chains-{os.getpid()}", recursive=True)


def test_uncommitted_object_is_never_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    fsspec = pytest.importorskip("fsspec")
    url = f"memory://ckptzip-commit-{os.getpid()}/run"
    fs = fsspec.filesystem("memory")
    try:
        mgr = CheckpointManager(url, config=CONFIG)
        mgr.save(1, _state(1))
        # an upload that never committed (the writer died before its marker)
        fs.pipe_file(f"/ckptzip-commit-{os.getpid()}/run/{step_file_name(2)}", b"half")
        assert mgr.steps() == [1] and mgr.load()["step"] == 1
        with pytest.raises(CheckpointNotFoundError):
            mgr.load(2)
        CheckpointManager(url, config=CONFIG).save(3, _state(3))  # a new writer cleans up
        assert not fs.exists(f"/ckptzip-commit-{os.getpid()}/run/{step_file_name(2)}")
    finally:
        fs.rm(f"/ckptzip-commit-{os.getpid()}", recursive=True)


# -- chains -----------------------------------------------------------------------------------


def test_keyframe_every_is_bounded(tmp_path: Path) -> None:
    CheckpointManager(tmp_path, keyframe_every=MAX_CHAIN_LENGTH)
    with pytest.raises(ConfigError, match=str(MAX_CHAIN_LENGTH)):
        CheckpointManager(tmp_path, keyframe_every=MAX_CHAIN_LENGTH + 1)


@pytest.mark.slow
def test_longest_chain_loads_in_a_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Durability is not under test here: skipping fsync makes building 1000 files cheap.
    monkeypatch.setattr(storage.os, "fsync", lambda fd: None)
    exact = CompressionConfig(exact=("*",))
    mgr = CheckpointManager(tmp_path, keyframe_every=MAX_CHAIN_LENGTH, config=exact)
    for s in range(MAX_CHAIN_LENGTH):
        mgr.save(s, {"w": torch.full((4,), float(s)), "step": s})
    assert len(mgr.chain(MAX_CHAIN_LENGTH - 1)) == MAX_CHAIN_LENGTH
    code = (
        "import sys, time, ckptzip; t = time.perf_counter(); "
        "s = ckptzip.CheckpointManager(sys.argv[1]).load(); "
        "print(s['step'], time.perf_counter() - t)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    step, seconds = out.stdout.split()
    assert int(step) == MAX_CHAIN_LENGTH - 1
    assert float(seconds) < 30, f"the longest chain took {seconds} s to load"
    print(f"{MAX_CHAIN_LENGTH}-file chain loaded in {float(seconds):.2f} s", file=sys.stderr)


def test_parent_is_decoded_from_the_bytes_that_were_hashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=5, config=CONFIG)
    for s in (1, 2):
        mgr.save(s, _state(s))
    expected = CheckpointManager(tmp_path, config=CONFIG).load(2)
    other = tmp_path / "other"
    other.mkdir()
    CheckpointManager(other, config=CONFIG).save(1, {**_state(1), "w": _state(1)["w"] * 5})
    replacement = (other / step_file_name(1)).read_bytes()
    real = storage.LocalStorage.read

    def read_then_swap(this: storage.LocalStorage, name: str) -> bytes:
        data = real(this, name)
        if name == step_file_name(1):  # a concurrent writer replaces the parent right now
            (tmp_path / name).write_bytes(replacement)
        return data

    monkeypatch.setattr(storage.LocalStorage, "read", read_then_swap)
    got = CheckpointManager(tmp_path, config=CONFIG).load(2)
    assert torch.equal(got["w"], expected["w"])  # the bytes checked are the bytes decoded


# -- readers ----------------------------------------------------------------------------------


def test_readers_never_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from ckptzip.cli import main

    mgr = CheckpointManager(tmp_path, keyframe_every=3, config=CONFIG)
    for s in range(3):
        mgr.save(s, _state(s))

    def no_lock(this: Any) -> Any:
        raise AssertionError("a reader took the writer lock")

    monkeypatch.setattr(storage.LocalStorage, "lock", no_lock)  # as on read-only media
    reader = CheckpointManager(tmp_path, config=CONFIG)
    assert reader.load()["step"] == 2 and reader.latest_step() == 2
    assert [e.status for e in reader.describe()] == ["ok"] * 3
    out = CliRunner().invoke(main, ["inspect", str(tmp_path)])
    assert out.exit_code == 0, out.output


def test_loading_while_a_writer_holds_the_lock(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=3, config=CONFIG)
    mgr.save(1, _state(1))
    with writer_lock_held(mgr.store):
        t0 = time.perf_counter()
        assert CheckpointManager(tmp_path).load()["step"] == 1
        assert time.perf_counter() - t0 < 10  # not waiting for the writer


def test_swapped_step_files_are_refused(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=1, config=CONFIG)
    for s in (1, 2):
        mgr.save(s, _state(s))
    a, b = tmp_path / step_file_name(1), tmp_path / step_file_name(2)
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    with pytest.raises(StepMismatchError, match="records step 2"):
        mgr.load(1)
    with pytest.raises(CheckpointNotFoundError, match="StepMismatchError"):
        mgr.load()  # neither restores as itself


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs os.mkfifo")
def test_fifo_under_a_checkpoint_name_is_refused_at_once(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ckptzip.cli import main

    mgr = CheckpointManager(tmp_path, config=CONFIG)
    mgr.save(1, _state(1))
    fifo = tmp_path / step_file_name(2)
    os.mkfifo(fifo)
    results: list[Any] = []

    def attempt() -> None:
        for call in (
            lambda: mgr.load(2),
            lambda: ckptzip.load(fifo),
            lambda: ckptzip.verify(fifo),
        ):
            try:
                call()
                results.append("no error")
            except NotRegularFileError as exc:
                results.append(exc)
        results.append(CliRunner().invoke(main, ["inspect", str(tmp_path)]).output)

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "a reader blocked on the FIFO"
    assert all(isinstance(r, NotRegularFileError) for r in results[:3]), results
    assert "FIFO" in str(results[0])
    assert "unreadable" in results[3]
    with pytest.warns(CkptzipWarning, match="FIFO"):
        assert mgr.load()["step"] == 1


# -- step semantics -------------------------------------------------------------------------


def test_an_older_step_saved_is_kept(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=3, keep=2, config=CONFIG)
    for s in (10, 20):
        mgr.save(s, _state(s))
    report = mgr.save(5, _state(5))
    assert Path(report.path).is_file() and mgr.load(5)["step"] == 5
    assert 5 in mgr.steps()


def test_latest_is_the_latest_restorable_step(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=2, config=CONFIG)
    for s in (1, 2, 3, 4):
        mgr.save(s, _state(s))
    (tmp_path / step_file_name(3)).unlink()  # 4 is a delta against 3
    assert mgr.steps() == [1, 2, 4]
    assert mgr.latest_step() == 2
    with pytest.warns(CkptzipWarning, match="step 4"):
        assert mgr.load()["step"] == 2
    assert [s for s, _ in mgr.skipped] == [4] and "MissingParentError" in mgr.skipped[0][1]


def test_nothing_raises_after_the_publish(tmp_path: Path) -> None:
    point = collections.namedtuple("point", "x y")  # torch.save cannot pickle this class
    mgr = CheckpointManager(tmp_path, config=CONFIG)
    report = mgr.save(1, {"p": point(torch.ones(3), 2)})
    assert report.bytes_in > 0
    assert mgr.load(1)["p"][1] == 2
    with pytest.raises(ckptzip.CheckpointExistsError):
        mgr.save(1, {"p": 1})


def test_every_reader_works_on_a_read_only_file_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """load, restore, describe, ``ckptzip inspect`` and ``ckptzip verify`` on media where any
    write fails with EROFS (as root, chmod would not stop a write: the calls are refused)."""
    import builtins
    import errno

    from click.testing import CliRunner

    from ckptzip.cli import main

    model = torch.nn.Linear(40, 30)
    mgr = CheckpointManager(tmp_path, keyframe_every=3, config=CONFIG, model=model)
    for s in range(3):
        mgr.save(s, extra={"s": s})
    real_open, real_os_open = builtins.open, os.open
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    def ro_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if any(c in mode for c in "wxa+"):
            refuse()
        return real_open(file, mode, *args, **kwargs)

    def ro_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & writes:
            refuse()
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", ro_open)
    monkeypatch.setattr(os, "open", ro_os_open)
    for name in ("makedirs", "mkdir", "unlink", "remove", "rename", "replace", "link"):
        monkeypatch.setattr(os, name, refuse)
    reader = CheckpointManager(tmp_path, config=CONFIG, model=torch.nn.Linear(40, 30))
    assert reader.load()["extra"]["s"] == 2 and reader.restore() == 2
    assert [e.status for e in reader.describe()] == ["ok"] * 3
    newest = str(tmp_path / step_file_name(2))
    assert ckptzip.load(newest)["extra"]["s"] == 2
    ckptzip.verify(newest, decode=True)
    for args in (["inspect", str(tmp_path)], ["inspect", newest], ["verify", "--decode", newest]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 0, r.output
    with pytest.raises(ckptzip.StorageError, match=r"read-only|writable"):
        reader.save(3)  # writing is what fails, with the package's error
