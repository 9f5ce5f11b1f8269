"""The cyclic garbage collector is paused while a load or a restore runs, and left as the
caller had it afterwards (also after a refused file)."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
import torch

import ckptzip
from ckptzip import api
from ckptzip._collector import collector_paused
from ckptzip.errors import CorruptCheckpointError


def test_the_pause_restores_the_callers_setting_even_after_an_error() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: resumes only at the outermost end
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the caller's choice stays
    finally:
        gc.enable()


def test_a_load_and_a_restore_run_with_the_collector_paused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []
    real = api._materialize

    def materialize(*args: Any, **kw: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kw)

    monkeypatch.setattr(api, "_materialize", materialize)
    state = {"w": torch.randn(300, 400), "b": torch.ones(10)}
    ckptzip.save(state, tmp_path / "c.ckz")
    assert torch.equal(ckptzip.load(tmp_path / "c.ckz")["b"], state["b"])
    mgr = ckptzip.CheckpointManager(tmp_path / "m")
    mgr.save(0, state)
    mgr.save(1, state)
    assert torch.equal(mgr.load(1)["b"], state["b"])
    mgr.close()
    assert seen == [False, False] and gc.isenabled()
    damaged = bytearray((tmp_path / "c.ckz").read_bytes())
    damaged[-1] ^= 1
    (tmp_path / "d.ckz").write_bytes(bytes(damaged))
    with pytest.raises(CorruptCheckpointError):
        ckptzip.load(tmp_path / "d.ckz")
    assert gc.isenabled()


def _cyclic_garbage(run: Any) -> list[Any]:
    """What the cyclic collector finds after ``run()`` (with the collector off while it ran):
    the objects only it would have freed."""
    gc.collect()
    gc.disable()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _ours(garbage: list[Any]) -> list[str]:
    """The garbage ckptzip made: its objects, its functions, and any tensor or array (torch's
    own cycles, such as ``torch.save``'s per-call pickler class, hold none)."""
    names = []
    for o in garbage:
        module = getattr(o, "__module__", None) or type(o).__module__ or ""
        if module.startswith("ckptzip") or isinstance(o, torch.Tensor):
            names.append(f"{type(o).__name__} {getattr(o, '__qualname__', '')}".strip())
    return names


def test_saves_loads_and_chain_restores_leave_no_cyclic_garbage(tmp_path: Path) -> None:
    # nothing ckptzip makes waits for the cyclic collector: recursive closures (flatten's
    # and unflatten's walks, a chain's walk through its links) are cleared after use, so the
    # readers (each file's bytes), manifests and tensors they held go as soon as the call
    # returns, and a restore paused for the collector leaves it nothing to do
    g = torch.Generator().manual_seed(0)
    state = {"w": torch.randn(300, 400, generator=g), "b": torch.ones(10), "n": [1, (2, 3)]}
    ckptzip.save(state, tmp_path / "warm.ckz")  # first calls import what they use
    ckptzip.load(tmp_path / "warm.ckz")
    assert _ours(_cyclic_garbage(lambda: ckptzip.save(state, tmp_path / "c.ckz"))) == []
    assert _ours(_cyclic_garbage(lambda: ckptzip.load(tmp_path / "c.ckz"))) == []
    mgr = ckptzip.CheckpointManager(tmp_path / "m")
    for step in range(4):
        state = {**state, "w": state["w"] + 0.01 * torch.randn(300, 400, generator=g)}
        assert _ours(_cyclic_garbage(lambda: mgr.save(step, state))) == []  # noqa: B023
    mgr.close()

    def restore() -> None:
        with ckptzip.CheckpointManager(tmp_path / "m") as fresh:
            fresh.load(3)

    assert _ours(_cyclic_garbage(restore)) == []
