"""A moment policy that follows the momentum: ``plan.momentum_coherence`` and
``MomentPolicy(quiet=...)``, per weight and per save, through the manager's chain."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from ckptzip import CheckpointManager
from ckptzip.config import QuantConfig
from ckptzip.errors import ConfigError
from ckptzip.plan import FEEDBACK_MOMENTS, MomentPolicy, moment_configs, momentum_coherence
from ckptzip.quantize import dequantize

QUIET = MomentPolicy(first_bins=3, first_fit="step", second_bins=8)
POLICY = MomentPolicy(first_bins=4, first_fit="update", quiet=QUIET)


def _adam(grad: Callable[[int], torch.Tensor], steps: int, n: int = 4096) -> torch.optim.Adam:
    w = nn.Parameter(torch.zeros(n))
    opt = torch.optim.Adam([w], betas=(0.9, 0.999))
    for t in range(steps):
        w.grad = grad(t)
        opt.step()
    return opt


def _coherence(opt: torch.optim.Optimizer) -> float | None:
    (p,) = opt.param_groups[0]["params"]
    return momentum_coherence(opt.state[p], opt.param_groups[0]["betas"])


@pytest.mark.parametrize("steps", [1, 2, 5, 30, 200])
def test_uncorrelated_gradients_give_about_one_at_every_step(steps: int) -> None:
    g = torch.Generator().manual_seed(steps)
    r = _coherence(_adam(lambda t: torch.randn(4096, generator=g), steps))
    assert r is not None and abs(r - 1.0) < 0.1, r


def test_agreeing_gradients_give_more_and_cancelling_ones_less() -> None:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4096, generator=g)
    steady = _coherence(_adam(lambda t: base, 50))
    flipping = _coherence(_adam(lambda t: base * (-1) ** t, 50))
    assert steady is not None and steady > 2.0, steady  # 1 / sqrt(0.1 / 1.9): about 4.4
    assert flipping is not None and flipping < 0.5, flipping


def test_no_coherence_without_adams_state() -> None:
    w = nn.Parameter(torch.zeros(8))
    sgd = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    w.grad = torch.ones(8)
    sgd.step()
    assert momentum_coherence(sgd.state[w], sgd.param_groups[0].get("betas")) is None
    opt = _adam(lambda t: torch.ones(8), 1, n=8)
    (p,) = opt.param_groups[0]["params"]
    assert momentum_coherence(opt.state[p], None) is None
    assert momentum_coherence({**opt.state[p], "exp_avg_sq": torch.zeros(8)}, (0.9, 0.999)) is None


def test_the_policy_is_validated_eagerly() -> None:
    with pytest.raises(ConfigError, match=r"quiet=.*a MomentPolicy"):
        MomentPolicy(quiet=QuantConfig())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="one level of nesting"):
        MomentPolicy(quiet=POLICY)
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ConfigError, match="quiet_below"):
            MomentPolicy(quiet_below=bad)
    # the error-feedback default stores quiet momenta compactly; MomentPolicy() alone does not
    assert FEEDBACK_MOMENTS.quiet is not None and MomentPolicy().quiet is None


def test_moment_configs_choose_per_weight_from_the_state_being_saved() -> None:
    g = torch.Generator().manual_seed(0)
    steady, flipping = nn.Parameter(torch.zeros(4096)), nn.Parameter(torch.zeros(4096))
    opt = torch.optim.Adam([steady, flipping])
    base = torch.randn(4096, generator=g)
    for t in range(40):
        steady.grad, flipping.grad = base.clone(), base * (-1) ** t
        opt.step()
    cfgs = moment_configs(opt, lambda p: QuantConfig(), POLICY)
    assert cfgs["optimizer/state/0/exp_avg"] == POLICY.first(QuantConfig())
    assert cfgs["optimizer/state/0/exp_avg_sq"] == POLICY.second()
    assert cfgs["optimizer/state/1/exp_avg"] == QUIET.first(QuantConfig())
    assert cfgs["optimizer/state/1/exp_avg_sq"] == QUIET.second()
    # without a quiet policy nothing changes, and nothing is computed for it
    assert moment_configs(opt, lambda p: QuantConfig(), MomentPolicy(quiet_below=1.0)) == (
        moment_configs(opt, lambda p: QuantConfig(), MomentPolicy())
    )


def test_a_chain_whose_weights_turn_quiet_restores_what_its_saves_believed(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(96, 96), nn.Linear(96, 48))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    mgr = CheckpointManager(
        tmp_path, model=model, optimizer=opt, error_feedback=True, moments=POLICY, keyframe_every=4
    )
    g = torch.Generator().manual_seed(1)
    fixed = {p: torch.randn(p.shape, generator=g) for p in model.parameters()}
    codecs, believed = {}, {}
    for step in range(1, 8):
        for k in range(4):
            # agreeing gradients for the first saves, then the first layer's flip sign
            flip = -1.0 if step > 2 and k % 2 else 1.0
            for i, p in enumerate(model.parameters()):
                p.grad = fixed[p] * (flip if i == 0 else 1.0)
            opt.step()
        r = mgr.save(step)
        codecs[step] = {e.path: e.codec for e in r.entries}
        table = mgr._cache.get(r.sha256)
        believed[step] = {p: v for p, v in table.items() if "/exp_avg" in p}
    mgr.close()
    first = "optimizer/state/0/exp_avg"
    assert codecs[1][first] == "quant" and codecs[7][first] == "step", codecs
    assert codecs[7]["optimizer/state/2/exp_avg"] != "step"  # still agreeing: the default
    for step, tensors in believed.items():
        state = CheckpointManager(tmp_path).load(step)["optimizer"]["state"]
        for path, v in tensors.items():
            i, key = path.split("/")[2:4]
            got = state[int(i)][key]
            if not isinstance(v, torch.Tensor):  # a quantized entry, kept as its bins
                v = dequantize(v).reshape(got.shape)
            assert torch.equal(got, v), (step, path)
