"""benchmarks/restore_cost.py quantizes exactly the part a variant names."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import _workloads
import restore_cost as rc


def test_one_moment_variants_touch_that_moment_alone() -> None:
    w, (state,) = _workloads.states_at("mlp", 0, [3])
    big = [i for i, row in state["optimizer"]["state"].items() if row["exp_avg"].numel() >= 4096]
    assert big
    for name in ("m3p5", "m8", "m0", "v8"):
        st, worst = rc._variant(state, w.model, name)
        assert worst == 0.0  # the weights are untouched
        assert all(torch.equal(st["model"][k], v) for k, v in state["model"].items())
        for i in big:
            new, old = st["optimizer"]["state"][i], state["optimizer"]["state"][i]
            moved = {k for k in ("exp_avg", "exp_avg_sq") if not torch.equal(new[k], old[k])}
            assert moved == ({"exp_avg_sq"} if name == "v8" else {"exp_avg"}), (name, moved)
            m = new["exp_avg"]
            if name == "m0":
                assert not bool(m.any())
            elif name == "m3p5":  # half pruned, three levels: zero and one per sign
                assert float((m == 0).float().mean()) >= 0.5 and _on_levels(m, 3)
            elif name == "v8":
                assert _on_levels(new["exp_avg_sq"], 8)


def _on_levels(x: torch.Tensor, levels: int) -> bool:
    """All but the protected entries (MomentPolicy.protect, 0.05 %) take ``levels`` values."""
    _, counts = x.unique(return_counts=True)
    return int(counts.sort(descending=True).values[:levels].sum()) >= 0.999 * x.numel()
