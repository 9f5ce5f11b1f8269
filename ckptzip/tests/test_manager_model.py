"""CheckpointManager with a model and optimizer: searched snapshots, restore, training after.

These are the acceptance tests on a real (small) training run: the tolerance holds on
every checkpoint, and a restored optimizer continues training without a loss spike.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ckptzip
from ckptzip.api import read_manifest
from ckptzip.errors import ConfigError
from ckptzip.manager import CheckpointManager, SaveReport, describe_directory
from ckptzip.quantize import dequantize, quantize

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _workloads

TOL = 0.05


class _Tiny:
    """A small classifier with Adam, cheap enough for the default test run (lossy layers:
    32x256 and 256x64)."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 64), nn.ReLU())
        self.model.append(nn.Linear(64, 5))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=2e-3)
        g = torch.Generator().manual_seed(0)
        self.centres = torch.randn(5, 32, generator=g)
        self.heldout = self.batch(10**6, 512)

    def batch(self, step: int, n: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(step)
        y = torch.randint(0, 5, (n,), generator=g)
        return self.centres[y] + 3.0 * torch.randn(n, 32, generator=g), y

    def train_step(self, step: int) -> float:
        x, y = self.batch(step)
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        return float(loss.detach())

    @torch.no_grad()
    def eval_fn(self, model: nn.Module) -> float:
        return float(nn.functional.cross_entropy(model(self.heldout[0]), self.heldout[1]))


def _run_with_checkpoints(
    w: object, tmp_path: Path, steps: int, every: int, error_feedback: bool = True
) -> None:
    """Train with a manager saving every ``every`` steps; check the tolerance on each file."""
    mgr = CheckpointManager(
        tmp_path,
        model=w.model,  # type: ignore[attr-defined]
        optimizer=w.optimizer,  # type: ignore[attr-defined]
        eval_fn=w.eval_fn,  # type: ignore[attr-defined]
        tolerance=TOL,
        error_feedback=error_feedback,
    )
    strategies = []
    for step in range(steps):
        w.train_step(step)  # type: ignore[attr-defined]
        if (step + 1) % every:
            continue
        report = mgr.save(step + 1, extra={"epoch": step // every})
        assert isinstance(report, SaveReport) and report.search is not None
        strategies.append(report.search.strategy)
        # the file itself, loaded into a copy of the model, honours the tolerance
        fresh = copy.deepcopy(w.model)  # type: ignore[attr-defined]
        fresh.load_state_dict(mgr.load(step + 1)["model"])
        exact = w.eval_fn(w.model)  # type: ignore[attr-defined]
        assert w.eval_fn(fresh) <= exact + TOL * abs(exact) + 1e-6  # type: ignore[attr-defined]
        assert report.search.layer_configs["linear"] is not None
        assert report.ratio > 5  # weights and Adam moments both compressed
        meta = read_manifest(mgr.path(step + 1)).metadata
        assert json.loads(meta["search"])["trials"] == report.search.trials
        assert report.to_json()["search"]["strategy"] == report.search.strategy
    # without error feedback every save searches (the first in full, then the neighbourhood of
    # the last choice); with it a delta save stores the weights' residual and searches nothing
    later = {"neighbourhood"} if not error_feedback else {"residual"}
    assert strategies[0] == "full" and later <= set(strategies[1:])
    mgr.close()


@pytest.mark.parametrize("error_feedback", [True, False])
def test_every_checkpoint_of_a_training_run_stays_within_tolerance(
    tmp_path: Path, error_feedback: bool
) -> None:
    _run_with_checkpoints(_Tiny(), tmp_path, steps=160, every=40, error_feedback=error_feedback)


@pytest.mark.slow
def test_every_checkpoint_of_the_mlp_workload_stays_within_tolerance(tmp_path: Path) -> None:
    _run_with_checkpoints(_workloads.make("mlp", 0), tmp_path, steps=240, every=60)


def _resume(make: Callable[[], Any], state: dict, steps: range) -> list[float]:
    w = make()
    w.model.load_state_dict(state["model"])
    # load_state_dict keeps the given tensors (same dtype and device) and Adam updates them
    # in place: a clone keeps ``state`` usable for the next run
    w.optimizer.load_state_dict(_workloads._clone(state["optimizer"]))
    return [w.train_step(s) for s in steps]


def _check_resume(make: Callable[[], Any], tmp_path: Path, trained: int, after: int) -> None:
    """Compressed Adam moments against exact ones, from the same restored weights.

    Both runs start from the weights of the compressed file, so the gap between the two
    loss curves is the optimizer state's compression alone; it must stay within the
    tolerance at every step. A run from zeroed moments shows the moments do matter.
    """
    w = make()
    for step in range(trained):
        w.train_step(step)
    exact_opt = _workloads._clone(w.optimizer.state_dict())
    mgr = CheckpointManager(tmp_path, model=w.model, optimizer=w.optimizer, eval_fn=w.eval_fn)
    report = mgr.save(trained)
    mgr.close()
    loaded = mgr.load(trained)
    lossy = {e.path for e in report.entries if e.config is not None}
    # the largest layer's moments are lossy (first moment pruned, second in the log domain)
    assert {"optimizer/state/2/exp_avg", "optimizer/state/2/exp_avg_sq"} <= lossy
    steps = range(trained, trained + after)
    compressed = _resume(make, loaded, steps)
    exact = _resume(make, {"model": loaded["model"], "optimizer": exact_opt}, steps)
    gap = max(abs(c - e) / e for c, e in zip(compressed, exact, strict=True))
    assert gap < TOL, gap
    cold = _resume(make, {"model": loaded["model"], "optimizer": _zeroed(exact_opt)}, steps)
    cold_gap = max(abs(c - e) / e for c, e in zip(cold, exact, strict=True))
    assert gap < cold_gap, (gap, cold_gap)


def test_restored_optimizer_continues_training_without_a_spike(tmp_path: Path) -> None:
    _check_resume(_Tiny, tmp_path, trained=120, after=25)


@pytest.mark.slow
def test_restored_adam_on_the_mlp_workload_continues_without_a_spike(tmp_path: Path) -> None:
    _check_resume(lambda: _workloads.make("mlp", 0), tmp_path, trained=300, after=40)


def _zeroed(opt_state: dict) -> dict:
    out = _workloads._clone(opt_state)
    for per in out["state"].values():
        for k, v in per.items():
            if k in ("exp_avg", "exp_avg_sq"):
                v.zero_()
    return out


def test_restore_loads_into_the_same_objects_and_returns_the_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    @torch.no_grad()
    def eval_fn(m: nn.Module) -> float:
        return float(nn.functional.cross_entropy(m(x), y))

    mgr = CheckpointManager(tmp_path, model=model, optimizer=opt, eval_fn=eval_fn)
    for _ in range(5):
        step()
    rng = torch.get_rng_state()
    report = mgr.save(5, extra={"epoch": 2, "rng": rng})
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    momentum = opt.state[model[0].weight]["momentum_buffer"].clone()
    for _ in range(5):
        step()
    weight_obj = model[0].weight
    assert mgr.restore() == 5
    assert model[0].weight is weight_obj  # the same objects, loaded in place
    assert mgr.extra["epoch"] == 2 and torch.equal(mgr.extra["rng"], rng)
    for k, v in model.state_dict().items():
        if v.numel() < 4096:
            assert torch.equal(v, saved[k])  # small tensors are stored exactly
        else:
            assert not torch.equal(v, saved[k])  # lossy, but close
            torch.testing.assert_close(v, saved[k], atol=0.05, rtol=0.0)
    # the momentum comes back exactly as its recorded config quantizes it
    restored_m = opt.state[model[0].weight]["momentum_buffer"]
    entry = next(e for e in report.entries if e.path == "optimizer/state/0/momentum_buffer")
    assert entry.config is not None and entry.config.bins == mgr.moments.first_bins
    expected = dequantize(quantize(momentum, entry.config)).reshape(momentum.shape)
    torch.testing.assert_close(restored_m, expected)
    step()  # and training goes on
    mgr.close()


def test_data_free_snapshot_says_so(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(64, 128))
    mgr = CheckpointManager(tmp_path, model=model)
    report = mgr.save(0)
    assert report.search is not None and report.search.mode == "data-free"
    assert "data-free" in report.search.note
    assert set(ckptzip.load(mgr.path(0))) == {"model"}
    mgr.close()


def test_a_search_that_gives_up_warns_naming_the_step(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(64, 128))
    x = torch.randn(8, 64)
    reference = model(x).detach()

    def eval_fn(m: nn.Module) -> float:  # any change at all is a failure
        return 1.0 + float((m(x) - reference).abs().max() > 0)

    mgr = CheckpointManager(tmp_path, model=model, eval_fn=eval_fn, tolerance=0.0)
    with pytest.warns(ckptzip.SearchGaveUpWarning, match=r"checkpoint step 3: no config"):
        report = mgr.save(3)
    assert report.search is not None and "no configuration was feasible" in report.search.note
    recorded = json.loads(read_manifest(mgr.path(3)).metadata["search"])
    assert recorded["note"] == report.search.note
    mgr.close()


def test_the_search_allows_at_most_the_gain_since_the_last_or_restored_save(
    tmp_path: Path,
) -> None:
    # every save searches only without error feedback (with it, a delta save searches nothing)
    tiny = _Tiny()
    mgr = CheckpointManager(tmp_path, model=tiny.model, optimizer=tiny.optimizer,
                            eval_fn=tiny.eval_fn, error_feedback=False)  # fmt: skip
    baselines, limits = [], []
    for step in range(30):
        tiny.train_step(step)
        if step % 10 == 9:
            search = mgr.save(step + 1).search
            assert search is not None and search.baseline is not None
            baselines.append(search.baseline)
            limits.append(search.limit)
    mgr.close()
    assert limits[0] == pytest.approx(baselines[0] * (1 + TOL))  # nothing earlier: the cap
    gain = (baselines[0] - baselines[2]) / 2
    assert limits[2] == pytest.approx(baselines[2] + min(TOL * baselines[2], max(gain, 0.0)))
    # a restarted process restores step 20 and saves step 30 again: the gain is measured
    # from the baseline step 20's search recorded
    fresh = _Tiny()
    mgr = CheckpointManager(tmp_path, model=fresh.model, optimizer=fresh.optimizer,
                            eval_fn=fresh.eval_fn, error_feedback=False)  # fmt: skip
    assert mgr.restore(20) == 20
    for step in range(20, 30):
        fresh.train_step(step)
    search = mgr.save(30, overwrite=True).search
    assert search is not None and search.baseline is not None
    gain = max(baselines[1] - search.baseline, 0.0)
    assert search.limit == pytest.approx(search.baseline + min(TOL * search.baseline, gain))
    mgr.close()


def test_every_step_of_a_chain_restores_what_its_search_evaluated(tmp_path: Path) -> None:
    # the delta codec keeps a parent's levels only for tensors the search did not give: the
    # search's quality is what a restore of each step gives back
    # (bin-index deltas: error_feedback=False; a residual save evaluates no quantized weights)
    tiny = _Tiny()
    mgr = CheckpointManager(tmp_path, model=tiny.model, optimizer=tiny.optimizer,
                            eval_fn=tiny.eval_fn, keyframe_every=10,
                            error_feedback=False)  # fmt: skip
    evaluated = {}
    for step in range(40):
        tiny.train_step(step)
        if step % 5 == 4:
            search = mgr.save(step + 1).search
            assert search is not None
            evaluated[step + 1] = search.quality
    mgr.close()
    assert [e.kind for e in describe_directory(tmp_path)][1:] == ["delta"] * 7
    fresh = _Tiny()
    for step, quality in evaluated.items():
        fresh.model.load_state_dict(mgr.load(step)["model"])
        assert fresh.eval_fn(fresh.model) == quality, step


def test_manager_misuse_is_rejected(tmp_path: Path) -> None:
    model = nn.Linear(4, 2)
    with pytest.raises(ConfigError, match="model="):
        CheckpointManager(tmp_path, eval_fn=lambda m: 0.0)
    with pytest.raises(ConfigError, match="Module"):
        CheckpointManager(tmp_path, model="nope")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tolerance"):
        CheckpointManager(tmp_path, model=model, tolerance=-1.0)
    for bad in (0.0, 1.0, True):
        with pytest.raises(ConfigError, match="error_budget"):
            CheckpointManager(tmp_path, model=model, error_budget=bad)  # type: ignore[arg-type]
    plain = CheckpointManager(tmp_path)
    with pytest.raises(ConfigError, match="model="):
        plain.save(0)
    with pytest.raises(ConfigError, match="model="):
        plain.restore()
    plain.save(1, {"w": torch.ones(2)})
    with pytest.raises(ConfigError, match="extra="):
        plain.save(2, {"w": torch.ones(2)}, extra={"epoch": 1})
    withmodel = CheckpointManager(tmp_path, model=model)
    with pytest.raises(ConfigError, match="not a model snapshot"):
        withmodel.restore(1)
    withmodel.close()


def test_gradients_are_tracked_before_the_second_save(tmp_path: Path) -> None:
    """Without checkpoint_every, the first gap sets the window for the next save."""
    w = _Tiny()
    mgr = CheckpointManager(
        tmp_path, model=w.model, optimizer=w.optimizer, eval_fn=w.eval_fn, window=5
    )
    for step in range(20):
        w.train_step(step)
    assert mgr._tracker is not None and not mgr._tracker.active
    mgr.save(20)
    flags = []
    for step in range(20, 40):
        flags.append(mgr._tracker.active)
        w.train_step(step)
    assert flags == [False] * 15 + [True] * 5  # the 5 steps before the expected save at 40
    assert set(mgr._tracker.scores()) == {n for n, _ in w.model.named_parameters()}
    report = mgr.save(40)  # the search gets those scores (the sensitivity metric is open)
    assert report.search is not None and report.search.layer_configs["linear"] is not None
    mgr.close()
