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
