"""Crafted directories and files against the storage layer, the chain store, the CLI and the
Trainer copy. Each test is one case that got through before: a lock file that is a link,
JSON nested past the recursion limit in a commit marker or lease, step names and skip
positions in non-ASCII digits, text from a file printed as rich markup or terminal escapes,
and a ``Trainer`` file copied through a link.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from _crafted import seal, split
from click.testing import CliRunner

import ckptzip
from ckptzip import api, chains
from ckptzip.chains import positions, step_of
from ckptzip.cli import main as cli
from ckptzip.errors import (
    CorruptCheckpointError,
    NotRegularFileError,
    ParentUnusableWarning,
)
from ckptzip.storage import LOCK_NAME, FsspecStorage, LocalStorage

DEEP = b"[" * 100_000  # deeper than json's recursion limit


def _weights(step: int) -> dict[str, Any]:
    """Weights a step apart are far apart, beyond the error of lossy compression."""
    return {"w": torch.linspace(0, 1, 5000) + step}


def _saved(directory: str | Path, steps: range, **kw: Any) -> ckptzip.CheckpointManager:
    mgr = ckptzip.CheckpointManager(str(directory), **kw)
    for s in steps:
        mgr.save(s, _weights(s))
    mgr.wait()
    return mgr


def _take_lock(directory: Path) -> None:
    with LocalStorage(directory).lock():
        pass


def _edit_manifest(path: Path, edit: Any) -> None:
    """Rewrite a file's manifest with ``edit(doc)`` and seal it again (a crafted file)."""
    doc, body = split(path.read_bytes())
    edit(doc)
    path.write_bytes(seal(doc, body))


# -- 1. the writer lock is never opened through a link ------------------------------------------


def test_a_lock_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "outside.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / LOCK_NAME).symlink_to(victim)
    with pytest.raises(NotRegularFileError, match="symbolic link") as caught:
        _take_lock(run)
    assert LOCK_NAME in str(caught.value)
    mgr = ckptzip.CheckpointManager(str(run), keyframe_every=1)
    with pytest.raises(NotRegularFileError):
        mgr.save(1, _weights(0))
        mgr.wait()
    assert victim.read_text() == "precious"


def test_a_dangling_lock_symlink_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    target = tmp_path / "created_by_ckptzip.txt"
    (tmp_path / LOCK_NAME).symlink_to(target)
    with pytest.raises(NotRegularFileError, match="symbolic link"):
        _take_lock(tmp_path)
    assert not target.exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_lock_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / LOCK_NAME)
    with pytest.raises(NotRegularFileError, match="FIFO"):
        _take_lock(tmp_path)
    assert LocalStorage(tmp_path).holder() is None  # reading it does not block either


def test_a_lock_record_read_for_messages_is_not_read_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text('{"pid": 1, "host": "h"}')
    (tmp_path / LOCK_NAME).symlink_to(tmp_path / "elsewhere.json")
    assert LocalStorage(tmp_path).holder() is None


# -- 2. JSON nested past the recursion limit is damage, not a crash -------------------------------


def test_a_deeply_nested_local_lock_record_counts_as_unreadable(tmp_path: Path) -> None:
    (tmp_path / LOCK_NAME).write_bytes(DEEP)
    assert LocalStorage(tmp_path).holder() is None
    _take_lock(tmp_path)  # and the lock is taken as over any stale record


@pytest.fixture
def memory_url() -> Any:
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    root = f"/ckptzip-redteam-{os.getpid()}"
    yield f"memory://{root}/run", fs, f"{root}/run"
    if fs.exists(root):
        fs.rm(root, recursive=True)


def test_a_deeply_nested_commit_marker_makes_its_step_damaged_and_load_falls_back(
    memory_url: Any,
) -> None:
    url, fs, root = memory_url
    _saved(url, range(1, 3), keyframe_every=1).close()
    fs.pipe_file(f"{root}/{chains.step_file_name(2)}.commit", DEEP)
    mgr = ckptzip.CheckpointManager(url, keyframe_every=1)
    with pytest.raises(CorruptCheckpointError, match="commit marker"):
        mgr.load(2)
    with pytest.warns(ckptzip.errors.CkptzipWarning, match="step 2"):
        restored = mgr.load()
    assert torch.allclose(restored["w"], _weights(1)["w"], atol=0.1)  # step 1, not 2


def test_a_deeply_nested_lease_counts_as_free(memory_url: Any) -> None:
    url, fs, root = memory_url
    _saved(url, range(1, 2), keyframe_every=1).close()
    fs.pipe_file(f"{root}/{LOCK_NAME}", DEEP)
    assert FsspecStorage(url).holder() is None
    _saved(url, range(2, 3), keyframe_every=1).close()
    assert ckptzip.CheckpointManager(url).steps() == [1, 2]


# -- 3. and 4. digits are ASCII digits, few enough for int() -------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "step-०००००००५.ckz",  # Devanagari digits
        "step-0000000²5.ckz",  # a superscript
        "step-" + "1" * 200 + ".ckz",  # a step far past any a manager saves
    ],
)
def test_step_names_in_non_ascii_digits_or_too_many_digits_are_not_steps(
    tmp_path: Path, name: str
) -> None:
    assert step_of(name) is None
    assert step_of("step-" + "1" * 5000 + ".ckz") is None  # int() refuses 4300+ digits
    mgr = _saved(tmp_path, range(1, 3), keyframe_every=1)
    (tmp_path / name).write_bytes(b"x")
    assert mgr.steps() == [1, 2]
    mgr.save(3, _weights(3))  # not "already exists", nor a crash
    mgr.wait()
    assert mgr.steps() == [1, 2, 3] and step_of("step-00000005.ckz") == 5


@pytest.mark.parametrize("bad", ["²", "٣", "9" * 5000, "-1", " 2", ""])
def test_a_skip_position_that_is_not_a_short_ascii_number_is_ignored(
    tmp_path: Path, bad: str
) -> None:
    _saved(tmp_path, range(1, 3), keyframe_every=8, layout="skip").close()
    path = tmp_path / chains.step_file_name(2)
    _edit_manifest(path, lambda doc: doc["metadata"].__setitem__(chains.POSITION_KEY, bad))
    mgr = ckptzip.CheckpointManager(str(tmp_path), keyframe_every=8, layout="skip")
    chain = mgr.store.chain(2)
    assert positions(chain) == [0, 1]  # the parent's position plus one, as for any bad value
    mgr.save(3, _weights(3))
    mgr.wait()
    assert mgr.steps() == [1, 2, 3]
    assert torch.allclose(mgr.load(3)["w"], _weights(3)["w"], atol=0.1)


def test_an_unforeseen_bad_value_in_a_parent_makes_a_keyframe_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _saved(tmp_path, range(1, 3), keyframe_every=8, layout="skip").close()

    def broken(chain: list[chains.Link]) -> list[int]:
        raise ValueError("a value no check foresaw")

    monkeypatch.setattr(chains, "positions", broken)
    mgr = ckptzip.CheckpointManager(str(tmp_path), keyframe_every=8, layout="skip")
    with pytest.warns(ParentUnusableWarning, match="no check foresaw"):
        mgr.save(3, _weights(3))
        mgr.wait()
    assert api.read_manifest(tmp_path / chains.step_file_name(3)).parent is None


# -- 5. text from a file is printed as text ------------------------------------------------------

HOSTILE = "[/bold][link=https://example.invalid]x[/link]\x1b]0;title\x07\x1b[2J\x9b31m\u202e"


def test_inspect_prints_markup_and_control_characters_from_a_file_literally(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hostile.ckz"
    ckptzip.save({HOSTILE: torch.ones(4)}, path, metadata={"note": HOSTILE})
    result = CliRunner().invoke(cli, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    assert result.exception is None
    assert "[/bold][link=https://example.invalid]x[/link]" in result.output
    assert "\\x1b]0;title\\x07\\x1b[2J\\x9b31m\\u202e" in result.output
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in result.output


def test_inspect_of_a_directory_prints_a_crafted_parent_name_literally(tmp_path: Path) -> None:
    _saved(tmp_path, range(1, 3), keyframe_every=5).close()
    path = tmp_path / chains.step_file_name(2)
    _edit_manifest(path, lambda doc: doc["parent"].__setitem__("name", "[/]\x1b[2J"))
    result = CliRunner().invoke(cli, ["inspect", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "[/]" in result.output and "\x1b" not in result.output


def test_compress_and_verify_print_a_hostile_file_name_literally(tmp_path: Path) -> None:
    src = tmp_path / "[bold]x[link=y]z.pt"
    torch.save({"w": torch.ones(4)}, src)
    result = CliRunner().invoke(cli, ["compress", str(src)])
    assert result.exit_code == 0, result.output
    assert "[bold]x[link=y]z.pt" in result.output
    result = CliRunner().invoke(cli, ["verify", f"{src}.ckz"])
    assert result.exit_code == 0 and "[bold]x[link=y]z.pt.ckz: OK" in result.output


# -- 6. a Trainer checkpoint's files are copied, never through a link ----------------------------


def test_materialize_refuses_a_symlinked_file_and_copies_nothing_through_it(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    from ckptzip.integrations.transformers import materialize

    secret = tmp_path / "id_rsa"
    secret.write_text("SECRET KEY")
    checkpoint = tmp_path / "checkpoint-1"
    checkpoint.mkdir()
    ckptzip.save({"w": torch.ones(3)}, checkpoint / "model.safetensors.ckz")
    (checkpoint / "trainer_state.json").write_text("{}")
    (checkpoint / "config.json").symlink_to(secret)
    out = tmp_path / "out"
    with pytest.raises(NotRegularFileError, match=r"config\.json"):
        materialize(checkpoint, out)
    assert not any("SECRET" in p.read_text(errors="replace") for p in out.glob("*.json"))
    (checkpoint / "config.json").unlink()
    (checkpoint / "config.json").write_text("{}")
    materialize(checkpoint, out)  # regular files copy as before
    assert (out / "config.json").read_text() == "{}"
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "trainer_state.json",
    ]
