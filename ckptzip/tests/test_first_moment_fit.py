"""The first moment's levels fitted to Adam's step (``QuantConfig.fit="update"``) and error
feedback's moment policy (``plan.FEEDBACK_MOMENTS``)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

import ckptzip
from ckptzip import CheckpointManager, CompressionConfig, MomentPolicy, QuantConfig
from ckptzip._types import QuantizedTensor, StepWeights
from ckptzip.errors import ConfigError
from ckptzip.plan import (
    FEEDBACK_MOMENTS,
    fit_weights,
    second_moment_path,
    step_weights,
    zero_fraction,
)
from ckptzip.quantize import dequantize, quantize

M_PATH, V_PATH = "optimizer/state/0/exp_avg", "optimizer/state/0/exp_avg_sq"


def _moments(n: int = 20_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """An Adam-like pair: heavy-tailed ``v`` over many decades, ``m`` of its scale."""
    g = torch.Generator().manual_seed(seed)
    v = torch.exp(torch.randn(n, generator=g) * 3.0 - 12.0)
    m = torch.randn(n, generator=g) * v.sqrt() * 0.5
    return m, v


def _step_error(mh: torch.Tensor, m: torch.Tensor, v: torch.Tensor) -> float:
    d = v.sqrt() + 1e-8
    return float(((mh - m) / d).norm() / (m / d).norm())


def test_the_update_fit_lowers_the_steps_error_and_keeps_the_selections() -> None:
    m, v = _moments()
    values = quantize(m, QuantConfig(bins=4, protect=0.001))
    cfg = QuantConfig(bins=4, protect=0.001, fit="update")
    w = fit_weights(M_PATH, cfg, {V_PATH: v})
    assert w is not None and w.shape == m.shape
    update = quantize(m, cfg, fit_weights=w)
    # the same entries protected, only the levels differ
    assert (update.protected_positions == values.protected_positions).all()
    assert not (update.levels.size == values.levels.size and (update.levels == values.levels).all())
    # the error of Adam's step m/(sqrt(v)+eps) falls several-fold
    e_values = _step_error(dequantize(values), m, v)
    e_update = _step_error(dequantize(update), m, v)
    assert e_update < 0.5 * e_values, (e_update, e_values)
    # without weights, or in the log domain, the fit is the values' one
    assert (quantize(m, cfg).levels == values.levels).all()
    sq = QuantConfig(bins=8, log_domain=True)
    a, b = quantize(v, sq), quantize(v, sq, fit_weights=torch.ones_like(v))
    assert (a.levels == b.levels).all()


def test_fit_weights_pick_the_second_moment_next_to_an_adam_first_moment() -> None:
    _, v = _moments(100)
    cfg = QuantConfig(fit="update")
    leaves = {V_PATH: v, "optimizer/state/1/exp_avg_sq": v * 4}
    w = fit_weights(M_PATH, cfg, leaves)
    assert w is not None
    assert torch.allclose(w, 1.0 / (v.double().sqrt() + 1e-8).pow(2).float())
    amsgrad = {**leaves, "optimizer/state/0/max_exp_avg_sq": v * 9}
    w9 = fit_weights(M_PATH, cfg, amsgrad)
    assert w9 is not None and torch.allclose(w9, w / 9, rtol=1e-2)
    assert fit_weights(M_PATH, QuantConfig(), leaves) is None  # fit="values"
    assert fit_weights("optimizer/state/0/momentum_buffer", cfg, leaves) is None  # SGD
    assert fit_weights("optimizer/state/2/exp_avg", cfg, leaves) is None  # no v at hand
    assert second_moment_path("exp_avg") == ["max_exp_avg_sq", "exp_avg_sq"]


def _same(a: QuantizedTensor, b: QuantizedTensor) -> bool:
    return (
        a.levels.tobytes() == b.levels.tobytes()
        and a.indices.tobytes() == b.indices.tobytes()
        and a.protected_positions.tobytes() == b.protected_positions.tobytes()
        and torch.allclose(a.protected_values, b.protected_values, 0.0, 0.0, equal_nan=True)
        and a.rel_error == b.rel_error
    )


@pytest.mark.parametrize(
    "cfg",
    [
        QuantConfig(bins=8, fit="update"),
        QuantConfig(bins=4, protect=0.001, fit="update"),
        QuantConfig(bins=8, prune=0.3, protect=0.0005, fit="update"),
        QuantConfig(bins=16, prune=0.9, fit="update"),
        QuantConfig(bins=16, protect=0.001, fit="update", rounding="stochastic"),
        QuantConfig(bins=256, prune=0.05, fit="update"),
    ],
)
@pytest.mark.parametrize("case", ["float32", "ties", "bfloat16", "float64", "nan", "odd v"])
def test_step_weights_give_the_levels_their_tensor_gives(cfg: QuantConfig, case: str) -> None:
    # the sketched path sums the weights in its own pass (kernels.fit_sums); the weight
    # tensor takes the ranking path: the same quantization, bit for bit
    m, v = _moments(30_000, seed=2)
    m[::9] = 0.0
    if case == "ties":  # many equal magnitudes: the cuts fall inside runs of ties
        m = (m * 1e4).round() / 1e4
    elif case == "bfloat16":
        m = m.bfloat16()
    elif case == "float64":  # not the sketched path's: the tensor after all
        m, v = m.double(), v.double()
    elif case == "nan":
        m[[5, 700]] = torch.tensor([math.nan, math.inf])
    elif case == "odd v":
        v[[1, 2, 3, 4, 5]] = torch.tensor([0.0, -1.0, math.nan, math.inf, 1e-45])
    sw = step_weights(M_PATH, cfg, {V_PATH: v})
    w = fit_weights(M_PATH, cfg, {V_PATH: v})
    assert isinstance(sw, StepWeights) and w is not None
    assert _same(quantize(m, cfg, fit_weights=sw), quantize(m, cfg, fit_weights=w))
    # a float64 second moment as well
    sw64 = StepWeights(v.double(), sw.eps)
    assert _same(quantize(m, cfg, fit_weights=sw64), quantize(m, cfg, fit_weights=w))


def test_step_weights_of_the_wrong_shape_are_refused() -> None:
    m, v = _moments(100)
    with pytest.raises(ConfigError, match="fit_weights of shape"):
        quantize(m, QuantConfig(fit="update"), fit_weights=StepWeights(v[:50], 1e-8))


def test_configs_validate_and_round_trip_with_older_json_unchanged() -> None:
    assert "fit" not in QuantConfig().to_json()  # older configs' JSON unchanged
    cfg = QuantConfig(bins=4, fit="update")
    assert QuantConfig.from_json(cfg.to_json()) == cfg
    assert QuantConfig.from_json({"bins": 4}).fit == "values"
    with pytest.raises(ConfigError, match="fit="):
        QuantConfig(fit="sign")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="log_domain"):
        QuantConfig(fit="update", log_domain=True)
    policy = MomentPolicy(first_fit="update", first_protect=0.01)
    first = policy.first(QuantConfig(), zeros=0.0)
    assert first is not None and first.fit == "update" and first.protect == 0.01
    assert policy.second().fit == "values" and policy.second().protect == policy.protect
    assert MomentPolicy().first(QuantConfig()) == QuantConfig(bins=8, prune=0.0)
    with pytest.raises(ConfigError, match="first_fit"):
        MomentPolicy(first_fit="sign")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="first_protect"):
        MomentPolicy(first_protect=0.6)


def test_a_saved_first_moment_round_trips_to_the_update_fit(tmp_path: Path) -> None:
    m, v = _moments(8192, seed=1)
    cfg = QuantConfig(bins=4, fit="update")
    state = {"optimizer": {"state": {0: {"exp_avg": m, "exp_avg_sq": v}}}}
    config = CompressionConfig(min_numel=1000, overrides=(("*/exp_avg", cfg),))
    ckptzip.save(state, tmp_path / "a.ckpt", config=config)
    got = ckptzip.load(tmp_path / "a.ckpt")["optimizer"]["state"][0]["exp_avg"]
    want = dequantize(quantize(m, cfg, fit_weights=fit_weights(M_PATH, cfg, {V_PATH: v})))
    assert torch.equal(got, want)  # what the codec stored is the update fit, bit for bit
    plain = dequantize(quantize(m, QuantConfig(bins=4)))
    assert _step_error(got, m, v) < 0.5 * _step_error(plain, m, v)


def _adam_run(tmp_path: Path, **kwargs: object) -> tuple[CheckpointManager, nn.Module, object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 64), torch.randn(128, 64)
    for _ in range(5):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()

    def eval_fn(mm: nn.Module) -> float:
        with torch.no_grad():
            return float(nn.functional.mse_loss(mm(x), y))

    mgr = CheckpointManager(tmp_path, model=model, optimizer=opt, eval_fn=eval_fn, **kwargs)
    return mgr, model, opt


def test_error_feedback_stores_the_first_moment_with_its_own_policy(tmp_path: Path) -> None:
    mgr, _, opt = _adam_run(tmp_path / "fb", error_feedback=True)
    assert mgr.moments == FEEDBACK_MOMENTS
    assert FEEDBACK_MOMENTS.first_bins == 4 and FEEDBACK_MOMENTS.first_fit == "update"
    mgr.save(1)
    mgr.close()
    restored = CheckpointManager(tmp_path / "fb").load(1)["optimizer"]["state"]
    live = opt.state_dict()["state"]  # type: ignore[attr-defined]
    checked = 0
    for i, st in live.items():
        m, v = st["exp_avg"], st["exp_avg_sq"]
        cfg = FEEDBACK_MOMENTS.first(QuantConfig(), zero_fraction(m))
        if m.numel() < CompressionConfig().min_numel or cfg is None:
            continue
        w = fit_weights(f"optimizer/state/{i}/exp_avg", cfg, {f"optimizer/state/{i}/exp_avg_sq": v})
        want = dequantize(quantize(m, cfg, fit_weights=w))
        assert torch.equal(restored[i]["exp_avg"], want), i
        checked += 1
    assert checked >= 2
    # without error feedback, or with moments given, the policy is the caller's / the default
    off, *_ = _adam_run(tmp_path / "off", error_feedback=False)
    assert off.moments == MomentPolicy()
    mine = MomentPolicy(first_bins=6)
    given, *_ = _adam_run(tmp_path / "given", error_feedback=True, moments=mine)
    assert given.moments == mine
    for mm in (off, given):
        mm.close()
