"""CheckpointManager(layout="skip"): which parent each delta gets, and everything that follows
the parents (restores, retention, overwrites, damage, error feedback, mixing with chains)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ckptzip
from ckptzip import CheckpointManager, CompressionConfig, QuantConfig
from ckptzip.api import read_manifest
from ckptzip.chains import POSITION_KEY, positions, skip_parent
from ckptzip.errors import CheckpointExistsError, ConfigError, MissingParentError
from ckptzip.manager import describe_directory, step_file_name
from ckptzip.plan import RESIDUAL
from ckptzip.quantize import dequantize

CONFIG = CompressionConfig(quant=QuantConfig(bins=8, protect=0.01), min_numel=64)

# position after the keyframe -> the position of its parent, for keyframe_every=10
SKIP10 = {1: 0, 2: 0, 3: 2, 4: 0, 5: 4, 6: 4, 7: 6, 8: 0, 9: 8}


def _state(step: int, n: int = 600) -> dict[str, Any]:
    base = torch.randn(n, generator=torch.Generator().manual_seed(1234))
    move = torch.randn(n, generator=torch.Generator().manual_seed(step))
    return {"model": {"w": base + 0.01 * step * move, "b": torch.arange(5.0) + step}, "step": step}


def _same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    else:
        assert a == b


def _parents(directory: Path) -> dict[int, int | None]:
    return {e.step: e.parent_step for e in describe_directory(directory)}


def test_skip_parent_is_lowbit_and_lies_on_the_previous_files_chain() -> None:
    assert {n: skip_parent(n) for n in SKIP10} == SKIP10
    for n in range(1, 1000):
        prev, chain = n - 1, set()
        while True:  # the positions restoring n - 1 decodes
            chain.add(prev)
            if prev == 0:
                break
            prev = skip_parent(prev)
        assert skip_parent(n) in chain


def test_skip_layout_parent_graph_positions_and_restores(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=10, layout="skip", config=CONFIG)
    assert mgr.layout == "skip"
    for s in range(23):
        mgr.save(s, _state(s))
    expected = {}
    for s in range(23):
        n = s % 10
        expected[s] = None if n == 0 else s - n + SKIP10[n]
    assert _parents(tmp_path) == expected
    fresh = CheckpointManager(tmp_path)  # a default (chain) manager reads it
    assert max(len(fresh.chain(s)) for s in range(23)) == 4  # 7 -> 6 -> 4 -> 0
    assert fresh.chain(9) == [0, 8, 9] and fresh.chain(17) == [10, 14, 16, 17]
    for s in range(23):
        meta = read_manifest(mgr.path(s)).metadata
        # deltas record their position; keyframes need none (they are position 0)
        assert meta.get(POSITION_KEY) == (None if s % 10 == 0 else str(s % 10))
        # a fresh manager (nothing cached) restores the bits the saving manager restores
        _same(fresh.load(s), mgr.load(s))
    assert [e.status for e in describe_directory(tmp_path)] == ["ok"] * 23
    # loading a middle step decodes its own chain only
    assert CheckpointManager(tmp_path).load(13)["step"] == 13


def test_the_chain_layout_writes_what_it_always_wrote(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=4, config=CONFIG)
    for s in range(6):
        mgr.save(s, _state(s))
    assert _parents(tmp_path) == {0: None, 1: 0, 2: 1, 3: 2, 4: None, 5: 4}
    assert all(POSITION_KEY not in read_manifest(mgr.path(s)).metadata for s in range(6))
    with pytest.raises(ConfigError, match="layout"):
        CheckpointManager(tmp_path, layout="star")  # type: ignore[arg-type]


def test_a_skip_manager_continues_a_chain_and_a_chain_manager_a_skip_run(tmp_path: Path) -> None:
    chain = CheckpointManager(tmp_path, keyframe_every=10, config=CONFIG)
    for s in range(4):  # 0 <- 1 <- 2 <- 3, no positions recorded (as main writes)
        chain.save(s, _state(s))
    skip = CheckpointManager(tmp_path, keyframe_every=10, layout="skip", config=CONFIG)
    for s in range(4, 9):
        skip.save(s, _state(s))
    assert _parents(tmp_path) == {0: None, 1: 0, 2: 1, 3: 2, 4: 0, 5: 4, 6: 4, 7: 6, 8: 0}
    chain = CheckpointManager(tmp_path, keyframe_every=10, config=CONFIG)
    chain.save(9, _state(9))  # against the previous step; the run's chain is 3 files long
    chain.save(10, _state(10))
    assert _parents(tmp_path)[9] == 8 and _parents(tmp_path)[10] == 9
    # positions: recorded, or one after the parent's
    assert positions(chain.store.chain(10)) == [0, 8, 9, 10]
    skip = CheckpointManager(tmp_path, keyframe_every=16, layout="skip", config=CONFIG)
    skip.save(11, _state(11))  # position 11: 11 - lowbit(11) = 10, the previous step
    skip.save(12, _state(12))  # position 12: 12 - 4 = 8
    assert _parents(tmp_path)[11] == 10 and _parents(tmp_path)[12] == 8
    skip = CheckpointManager(tmp_path, keyframe_every=13, layout="skip", config=CONFIG)
    skip.save(13, _state(13))  # position 13 of keyframe_every=13 starts a new keyframe
    assert _parents(tmp_path)[13] is None
    fresh = CheckpointManager(tmp_path)
    for s in range(14):
        assert fresh.load(s)["step"] == s


def test_nonsense_positions_fall_back_to_one_after_the_parent(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=10, config=CONFIG)
    mgr.save(0, _state(0))
    for s, value in ((1, "x"), (2, "1"), (3, "-4"), (4, "7")):
        # a chain-layout save carries the object's metadata through api.save: write by hand
        parent = mgr.path(s - 1)
        ckptzip.save(
            _state(s),
            mgr.path(s),
            parent=parent,
            config=CONFIG,
            metadata={"step": str(s), POSITION_KEY: value},
        )
    # "x" and "-4" are not positions, "1" does not follow its parent's 1: parent + 1
    assert positions(mgr.store.chain(4)) == [0, 1, 2, 3, 7]


def test_retention_keeps_the_skip_parents_kept_steps_need(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=10, keep=2, layout="skip", config=CONFIG)
    listed = []
    for s in range(12):
        mgr.save(s, _state(s))
        listed.append(mgr.steps())
        fresh = CheckpointManager(tmp_path)
        for kept in mgr.steps()[-2:]:
            assert fresh.load(kept)["step"] == kept  # every kept step restores from disk
    # after step 7 (7 -> 6 -> 4 -> 0, 6 -> 4 -> 0): 1, 2, 3 and 5 are gone, 0 and 4 stay
    assert listed[7] == [0, 4, 6, 7]
    # after step 8 (8 -> 0): 4 and 6 are needed by 7 only, which is still kept
    assert listed[8] == [0, 4, 6, 7, 8]
    assert listed[9] == [0, 8, 9]
    assert listed[11] == [9, 10, 11] or listed[11] == [10, 11]
    assert mgr.steps() == [10, 11]


def test_overwrite_and_damage_follow_the_recorded_parents(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path, keyframe_every=10, layout="skip", config=CONFIG)
    for s in range(10):
        mgr.save(s, _state(s))
    # 5 is nobody's parent (6's is 4): it may be replaced; 4 is 5's and 6's parent: it may not
    mgr.save(5, _state(50), overwrite=True)
    assert CheckpointManager(tmp_path).load(5)["step"] == 50
    with pytest.raises(CheckpointExistsError, match="cannot be overwritten"):
        mgr.save(4, _state(4), overwrite=True)
    (tmp_path / step_file_name(8)).unlink()
    fresh = CheckpointManager(tmp_path)
    with pytest.raises(MissingParentError, match=step_file_name(8)):
        fresh.load(9)
    assert fresh.load(7)["step"] == 7  # 7 -> 6 -> 4 -> 0 does not pass through 8
    status = {e.step: e.status for e in describe_directory(tmp_path)}
    assert status[9].startswith("missing parent") and status[7] == "ok"
    with pytest.warns(ckptzip.CkptzipWarning, match="step 9"):
        assert fresh.load()["step"] == 7  # the latest restorable step


def test_asynchronous_skip_saves_restore_as_blocking_ones(tmp_path: Path) -> None:
    sync = CheckpointManager(tmp_path / "sync", keyframe_every=8, layout="skip", config=CONFIG)
    bg = CheckpointManager(tmp_path / "bg", keyframe_every=8, layout="skip", config=CONFIG)
    for s in range(10):
        sync.save(s, _state(s))
        bg.save(s, _state(s), blocking=False)
    bg.close()
    assert _parents(tmp_path / "bg") == _parents(tmp_path / "sync")
    for s in range(10):
        _same(CheckpointManager(tmp_path / "bg").load(s), sync.load(s))


def _drifting(n: int, steps: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, generator=g) * 0.05
    drift = torch.randn(n, generator=g) * 0.002
    out = [x]
    for _ in range(steps):
        x = x + drift + 0.002 * torch.randn(n, generator=g)
        out.append(x)
    return out


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x.double() - y.double()).norm() / x.double().norm())


def test_error_feedback_codes_against_the_skip_parents_reconstruction(tmp_path: Path) -> None:
    mgr = CheckpointManager(
        tmp_path, keyframe_every=10, layout="skip", config=CompressionConfig(residual=RESIDUAL)
    )
    ws = _drifting(6000, 9)
    believed = {}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k, w in enumerate(ws):
            r = mgr.save(k, {"w": w})
            assert r.entries[0].codec == ("quant" if k == 0 else "residual")
            v = mgr._cache.get(r.sha256)["w"]
            believed[k] = v.clone() if isinstance(v, torch.Tensor) else dequantize(v)
    assert CheckpointManager(tmp_path).chain(8) == [0, 8]  # 8 steps of change against 0
    errors = []
    for k, w in enumerate(ws):
        restored = CheckpointManager(tmp_path).load(k)["w"]
        assert torch.equal(restored, believed[k]), k  # what the save coded against
        errors.append(_rel(w, restored))
    # Nothing adds up along a path: 9 (-> 8 -> 0) corrects 8's error as 8 corrected the
    # keyframe's. But a residual against a far parent holds that parent's error and all the
    # change since, in 4 levels: 8 (against the keyframe, error 0.122) comes out near 0.15,
    # where the chain layout's 8th delta, the 8th correction in a row, is near 0.03.
    assert errors[9] < errors[8] < 0.2
    assert max(errors[1:]) < 0.2


def test_error_feedback_model_run_on_a_skip_layout(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 64), torch.randn(128, 64)
    mgr = CheckpointManager(
        tmp_path, model=model, optimizer=opt, keyframe_every=8, layout="skip", error_feedback=True
    )
    exact = {}
    for step in range(8):
        for _ in range(3):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        mgr.save(step, blocking=step % 2 == 0)
        exact[step] = {k: v.clone() for k, v in model.state_dict().items()}
    mgr.close()
    assert _parents(tmp_path) == {0: None, 1: 0, 2: 0, 3: 2, 4: 0, 5: 4, 6: 4, 7: 6}
    for step in (4, 7):
        state = CheckpointManager(tmp_path).load(step)
        for k, v in exact[step].items():
            assert _rel(v, state["model"][k]) < 0.1, (step, k)
    model2 = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 64))
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-3)
    mgr2 = CheckpointManager(
        tmp_path, model=model2, optimizer=opt2, keyframe_every=8, layout="skip", error_feedback=True
    )
    assert mgr2.restore() == 7
    mgr2.save(8)  # position 8 of keyframe_every=8: a keyframe
    mgr2.close()
    assert _parents(tmp_path)[8] is None
