"""The moment search judged by training after a restore (``probe_fn``).

What must hold: a save with a probe leaves training bit for bit where a save without one
leaves it (parameters, gradients, buffers, optimizer state, RNG states, the sensitivity
tracker); the chosen moment policy is the one the file stores; a probe that raises is a
clear error and still puts everything back; the probe search runs at the first save and
every ``keyframe_every`` saves.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from ckptzip import CheckpointManager, MomentPolicy, ProbeError
from ckptzip.errors import ConfigError
from ckptzip.search import moment_ladder, search


class _Run:
    """A small model with dropout and batch norm (global RNG and buffers) trained by AdamW."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(
            nn.Linear(16, 128),
            nn.BatchNorm1d(128),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(128, 64),
            nn.ReLU(),
            nn.Linear(64, 4),
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(1)
        self.centres = torch.randn(4, 16, generator=g)
        self.heldout = self.batch(10**6, 256)

    def batch(self, step: int, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(step)
        y = torch.randint(0, 4, (n,), generator=g)
        return self.centres[y] + 2.0 * torch.randn(n, 16, generator=g), y

    def train_step(self, step: int) -> None:
        self.model.train()
        x, y = self.batch(step)
        x = x + 0.01 * torch.randn_like(x)  # draws from the global RNG, as augmentation does
        self.optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(self.model(x), y).backward()
        self.optimizer.step()

    @torch.no_grad()
    def eval_fn(self, model: nn.Module) -> float:
        was = model.training
        model.eval()
        loss = float(nn.functional.cross_entropy(model(self.heldout[0]), self.heldout[1]))
        model.train(was)
        return loss

    def probe(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        model.train()
        for i in range(3):
            x, y = self.batch(5 * 10**6 + i)
            x = x + 0.01 * torch.randn_like(x)
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

    def manager(self, directory: Path, **kwargs: Any) -> CheckpointManager:
        """A manager on this run's model, optimizer and ``eval_fn``, probing with
        :meth:`probe` unless ``kwargs`` name another ``probe_fn``."""
        kwargs.setdefault("probe_fn", self.probe)
        return CheckpointManager(
            directory, model=self.model, optimizer=self.optimizer, eval_fn=self.eval_fn, **kwargs
        )


def _everything(run: _Run) -> list[torch.Tensor]:
    out = [t.detach().clone() for t in run.model.state_dict().values()]
    out += [p.grad.clone() for p in run.model.parameters() if p.grad is not None]
    for s in run.optimizer.state.values():
        out += [v.clone() for v in s.values() if isinstance(v, torch.Tensor)]
    out.append(torch.get_rng_state())
    out.append(torch.tensor(np.random.get_state()[1].astype(np.int64)))
    out.append(torch.tensor(random.getstate()[1], dtype=torch.int64))
    return out


def _train_and_save(tmp_path: Path, probe: bool) -> tuple[_Run, list[torch.Tensor], int]:
    run = _Run()
    np.random.seed(3)
    random.seed(3)
    mgr = run.manager(
        tmp_path,
        probe_fn=run.probe if probe else None,
        keyframe_every=2,
        checkpoint_every=10,
        window=5,
    )
    for step in range(30):
        run.train_step(step)
        if (step + 1) % 10 == 0:
            report = mgr.save(step + 1)
            assert report.search is not None
            assert (report.search.probe is not None) == (probe and step + 1 in (10, 30))
    assert mgr._tracker is not None
    tracker_step = mgr._tracker.step
    mgr.close()
    return run, _everything(run), tracker_step


def test_a_save_with_a_probe_leaves_training_bit_identical(tmp_path: Path) -> None:
    _, plain, plain_step = _train_and_save(tmp_path / "plain", probe=False)
    _, probed, probed_step = _train_and_save(tmp_path / "probe", probe=True)
    assert plain_step == probed_step == 30
    assert len(plain) == len(probed)
    for a, b in zip(plain, probed, strict=True):
        assert torch.equal(a, b)


def test_the_chosen_moment_policy_is_the_one_stored(tmp_path: Path) -> None:
    run = _Run()
    for step in range(20):
        run.train_step(step)
    before = _everything(run)
    result = search(
        run.model,
        eval_fn=run.eval_fn,
        optimizer=run.optimizer,
        probe_fn=run.probe,
        tolerance=0.05,
    )
    after = _everything(run)
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    probe = result.probe
    assert probe is not None and result.moments == probe.moments
    assert probe.ladder == moment_ladder(MomentPolicy())
    assert 1 <= probe.trials <= 3 and probe.seconds > 0
    assert probe.level == probe.ladder.index(probe.moments)
    if probe.quality is not None:
        assert probe.quality <= probe.reference * (1 + probe.tolerance)
    first = result.config.quant_for("optimizer/state/4/exp_avg")  # 128x64
    second = result.config.quant_for("optimizer/state/4/exp_avg_sq")
    assert first is not None and first.bins == probe.moments.first_bins
    assert second is not None and second.bins == probe.moments.second_bins
    assert result.to_json()["probe"]["trials"] == probe.trials


def test_a_probe_that_raises_is_reported_and_nothing_changes(tmp_path: Path) -> None:
    run = _Run()
    for step in range(10):
        run.train_step(step)
    before = _everything(run)
    calls = []

    def broken(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        calls.append(1)
        run.probe(model, optimizer)  # trains first, so there is something to undo
        raise RuntimeError("out of batches")

    mgr = run.manager(tmp_path, probe_fn=broken)
    with pytest.raises(ProbeError, match="out of batches"):
        mgr.save(10)
    assert calls and mgr.steps() == []
    assert all(torch.equal(a, b) for a, b in zip(before, _everything(run), strict=True))
    mgr.close()


def test_probe_misuse_is_rejected(tmp_path: Path) -> None:
    run = _Run()
    with pytest.raises(ConfigError, match="probe_fn"):
        CheckpointManager(tmp_path, model=run.model, eval_fn=run.eval_fn, probe_fn=run.probe)
    with pytest.raises(ConfigError, match="probe_fn"):
        search(run.model, optimizer=run.optimizer, probe_fn=run.probe)
    mgr = run.manager(tmp_path)
    run.train_step(0)
    with pytest.raises(ConfigError, match="blocking"):
        mgr.save(1, blocking=False)
    mgr.close()


def _searches(run: _Run, mgr: CheckpointManager, steps: int) -> list[tuple[str, bool]]:
    """Train ``steps`` steps saving every 10: each save's (search strategy, probed)."""
    seen = []
    for step in range(steps):
        run.train_step(step)
        if (step + 1) % 10 == 0:
            search = mgr.save(step + 1).search
            assert search is not None
            seen.append((search.strategy, search.probe is not None))
    mgr.close()
    return seen


def test_research_every_searches_in_full_again_and_probes_with_it(tmp_path: Path) -> None:
    run = _Run()
    seen = _searches(run, run.manager(tmp_path, research_every=2, error_feedback=False), 40)
    assert [probed for _, probed in seen] == [True, False, True, False]
    assert seen[0][0] == seen[2][0] == "full"  # the second: the neighbourhood, unless it failed
    with pytest.raises(ConfigError, match="research_every"):
        CheckpointManager(tmp_path, research_every=0)


def test_under_error_feedback_research_every_searches_at_the_first_keyframe_due(
    tmp_path: Path,
) -> None:
    # a delta save stores the weights' residual and searches nothing, so the full search (and
    # its probe) that research_every asks for waits for the next keyframe
    run = _Run()
    seen = _searches(run, run.manager(tmp_path, research_every=3, keyframe_every=2), 60)
    strategies = [strategy for strategy, _ in seen]
    assert strategies[1::2] == ["residual"] * 3  # the deltas
    # keyframes at saves 0, 2, 4: 2 saves after the first is too early, 4 is due
    assert strategies[0] == strategies[4] == "full" and strategies[2] != "full"
    # the probe runs every keyframe_every saves regardless (a keyframe's moments are new)
    assert [probed for _, probed in seen] == [True, False, True, False, True, False]
