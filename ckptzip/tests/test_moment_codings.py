"""benchmarks/moment_codings.py measures what it says: the policy's bytes and Adam-step errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _workloads
import moment_codings as mc

from ckptzip.errors import ConfigError


def _states() -> tuple[dict, dict]:
    _, (first, second) = _workloads.states_at("mlp", 0, [4, 6])
    return first, second


def test_a_variant_names_a_moment_policy_and_the_prototypes() -> None:
    policy, row, factored = mc.parse("m3p50r:v8f")
    assert (policy.first_bins, policy.first_prune, policy.second_bins) == (3, 0.5, 8)
    assert row and factored
    assert mc.parse("m8:v16")[1:] == (False, False)
    with pytest.raises(SystemExit):
        mc.parse("m8")
    with pytest.raises(ConfigError):  # the policy's own rule: a pruned moment needs 3 levels
        mc.parse("m2p50:v8")


@pytest.mark.slow
def test_fewer_levels_write_fewer_bytes_and_err_more_and_factoring_narrows_the_error() -> None:
    states = _states()
    fine, coarse, factored = (
        mc.measure(states, v, (0.9, 0.999), 1e-8) for v in ("m8:v16", "m3p50:v4", "m8:v4f")
    )
    for key in ("exp_avg", "exp_avg_sq"):
        assert coarse[f"{key}_keyframe"] > fine[f"{key}_keyframe"] > 1
        assert coarse[f"{key}_chain"] > 1 and fine[f"{key}_delta"] > 1
    assert coarse["v_error"] > fine["v_error"] > 0
    assert fine["m_error"] > 0
    # the same levels on a narrower range: a smaller step-size error; exp_avg untouched
    assert factored["v_error"] < coarse["v_error"]
    assert factored["exp_avg_keyframe"] == fine["exp_avg_keyframe"]


def test_the_factored_scale_leaves_no_row_or_column_trend_in_the_log_domain() -> None:
    v = _states()[0]["optimizer"]["state"][2]["exp_avg_sq"]  # the 512 x 512 layer's
    tiny = torch.finfo(v.dtype).tiny  # dead units' exact zeros: the prototype clamps them too
    residual = (v.clamp_min(tiny) / mc._scale(v, factored=True)).log()
    assert float(residual.mean(0).abs().max()) < 1e-3
    assert float(residual.mean(1).abs().max()) < 1e-3
    rows = v / mc._scale(v, factored=False)
    assert torch.allclose(rows.square().mean(1), torch.ones(v.shape[0]), atol=1e-4)
