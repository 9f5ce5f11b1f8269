"""The levels of a file standing alone (``CompressionConfig.standalone``, the default of a
plain ``ckptzip.save``): weights at 32 levels, Adam's first moment at 8 fitted to its step,
the second moment at 4; ``quant`` everywhere where a config sets its own or in a chain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import ckptzip
from ckptzip import StandaloneConfig
from ckptzip.api import read_manifest
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import ConfigError

M, V = "optimizer/state/0/exp_avg", "optimizer/state/0/exp_avg_sq"


def _adam_state(steps: int = 5, optimizer: str = "adam") -> dict[str, Any]:
    """A 128x128 linear layer after a few steps on a fixed regression task."""
    torch.manual_seed(0)
    model = torch.nn.Linear(128, 128)
    opt: torch.optim.Optimizer
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    x, y = torch.randn(64, 128), torch.randn(64, 128)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {"model": model.state_dict(), "optimizer": opt.state_dict()}


def _configs(r: ckptzip.Report) -> dict[str, QuantConfig]:
    return {e.path: e.config for e in r.entries if e.config is not None}


def _step(state: dict[str, Any]) -> torch.Tensor:
    row = state["optimizer"]["state"][0]
    return row["exp_avg"] / (row["exp_avg_sq"].sqrt() + 1e-8)  # type: ignore[no-any-return]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_a_plain_save_stores_a_standalone_files_levels(tmp_path: Path) -> None:
    state = _adam_state()
    cfgs = _configs(ckptzip.save(state, tmp_path / "a.ckz"))
    w, m, v = cfgs["model/weight"], cfgs[M], cfgs[V]
    assert (w.bins, w.rounding, w.log_domain) == (32, "stochastic", False)
    assert (m.bins, m.fit, m.rounding) == (8, "update", "nearest")
    assert (v.bins, v.log_domain, v.prune) == (4, True, 0.0)
    # the manifest records each entry's levels: a reader needs nothing new
    bins = {e.path: e.config["bins"] for e in read_manifest(tmp_path / "a.ckz").tensors if e.config}
    assert bins == {"model/weight": 32, M: 8, V: 4}


def test_the_restored_step_and_weights_are_closer_than_at_quants_levels(tmp_path: Path) -> None:
    """What the levels are for: the Adam step a restore resumes with (``m/(sqrt(v)+eps)``)
    and the weights are nearer the saved ones than with 16 levels everywhere."""
    state = _adam_state()
    ckptzip.save(state, tmp_path / "a.ckz")
    ckptzip.save(state, tmp_path / "b.ckz", config=CompressionConfig(standalone=None))
    alone, before = ckptzip.load(tmp_path / "a.ckz"), ckptzip.load(tmp_path / "b.ckz")
    assert _rel(_step(alone), _step(state)) < 0.8 * _rel(_step(before), _step(state))
    w = state["model"]["weight"]
    assert _rel(alone["model"]["weight"], w) < 0.6 * _rel(before["model"]["weight"], w)


def test_a_first_moment_keeps_its_zeros_and_sgd_momentum_keeps_quants_levels(
    tmp_path: Path,
) -> None:
    state = _adam_state()
    state["optimizer"]["state"][0]["exp_avg"][:40] = 0.0  # rows that never had a gradient
    r = ckptzip.save(state, tmp_path / "a.ckz")
    assert _configs(r)[M].prune >= 40 / 128
    back = ckptzip.load(tmp_path / "a.ckz")["optimizer"]["state"][0]["exp_avg"]
    assert torch.equal(back[:40], torch.zeros(40, 128))
    sgd = _adam_state(optimizer="sgd")
    cfgs = _configs(ckptzip.save(sgd, tmp_path / "s.ckz"))
    # SGD's momentum is its step, with no second moment to fit levels to: quant's levels
    buf = cfgs["optimizer/state/0/momentum_buffer"]
    assert (buf.bins, buf.fit, cfgs["model/weight"].bins) == (16, "values", 32)


@pytest.mark.parametrize(
    "config",
    [
        CompressionConfig(standalone=None),
        CompressionConfig(quant=QuantConfig(bins=16, protect=0.001)),  # a quant of its own
    ],
)
def test_quant_everywhere_when_asked(tmp_path: Path, config: CompressionConfig) -> None:
    cfgs = _configs(ckptzip.save(_adam_state(), tmp_path / "a.ckz", config=config))
    assert {c.bins for c in cfgs.values()} == {16}
    assert cfgs[M].fit == "values"


def test_overrides_and_delta_files_keep_their_configs(tmp_path: Path) -> None:
    state = _adam_state()
    own = QuantConfig(bins=6)
    r = ckptzip.save(
        state, tmp_path / "o.ckz", config=CompressionConfig(overrides=(("model/weight", own),))
    )
    assert _configs(r)["model/weight"].bins == 6
    ckptzip.save(state, tmp_path / "a.ckz")
    d = ckptzip.save(_adam_state(steps=6), tmp_path / "d.ckz", parent=tmp_path / "a.ckz")
    assert {c.bins for c in _configs(d).values()} == {16}  # a delta: quant's levels


def test_the_manager_and_the_dcp_writer_keep_quants_levels(tmp_path: Path) -> None:
    from ckptzip.dcp import Writer

    assert ckptzip.CheckpointManager(tmp_path / "m").config.standalone is None
    assert Writer(tmp_path / "w").config.standalone is None
    assert Writer(tmp_path / "x", error_feedback=False).config.standalone is None


def test_the_config_validates_and_round_trips_through_json() -> None:
    for bad in ({"weight_bins": 1}, {"first_bins": 300}, {"second_bins": True}):
        with pytest.raises(ConfigError, match="must be an integer"):
            StandaloneConfig(**bad)
    with pytest.raises(ConfigError, match="first_fit"):
        StandaloneConfig(first_fit="step")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="StandaloneConfig"):
        CompressionConfig(standalone=32)  # type: ignore[arg-type]
    for c in (
        CompressionConfig(),
        CompressionConfig(standalone=None),
        CompressionConfig(standalone=StandaloneConfig(weight_bins=64, second_bins=8)),
    ):
        assert CompressionConfig.from_json(c.to_json()) == c
    old = CompressionConfig().to_json()
    del old["standalone"]  # a config written before the field: today's default
    assert CompressionConfig.from_json(old).standalone == StandaloneConfig()
    with pytest.raises(ConfigError, match="StandaloneConfig"):
        CompressionConfig.from_json({**old, "standalone": [32]})
