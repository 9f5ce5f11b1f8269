"""What the examples share: the toy regression task, its MLP, and the line saying what
checkpoints cost. Not part of ckptzip; each example imports it from its own directory.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


def parse_args(doc: str | None) -> argparse.Namespace:
    """The examples' command line: ``--quick`` runs fewer steps (what the tests run)."""
    ap = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps, smaller data")
    return ap.parse_args()


def mlp(inputs: int, hidden: int) -> torch.nn.Sequential:
    """``inputs -> hidden -> hidden -> 1`` with GELU between."""
    return torch.nn.Sequential(
        torch.nn.Linear(inputs, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.GELU(),
        torch.nn.Linear(hidden, 1),
    )


def regression_batch(rows: int, inputs: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets (the sine of the sum of the first 8 inputs) drawn from ``seed``:
    a batch keyed by the step is the same after a resume."""
    x = torch.randn(rows, inputs, generator=torch.Generator().manual_seed(seed))
    return x, torch.sin(x[:, :8].sum(1, keepdim=True))


def mse_step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, batch: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """One optimizer step on ``batch``; the (detached) loss."""
    x, y = batch
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.detach()


def seconds(fn: Callable[[], object]) -> float:
    """Wall time of ``fn()``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@dataclass(frozen=True)
class Cost:
    """One checkpoint written both ways: the baseline writer's and ckptzip's bytes and seconds."""

    baseline_bytes: int
    ckptzip_bytes: int
    baseline_seconds: float
    ckptzip_seconds: float


def print_cost(costs: Sequence[Cost], baseline: str) -> None:
    """One line: total bytes each way, the ratio, and the mean seconds per checkpoint."""
    raw = sum(c.baseline_bytes for c in costs)
    out = sum(c.ckptzip_bytes for c in costs)
    ms = 1000 / len(costs)
    print(
        f"cost: {len(costs)} checkpoints, {baseline} {raw:,} B, ckptzip {out:,} B "
        f"({raw / out:.1f}x smaller); save {sum(c.ckptzip_seconds for c in costs) * ms:.0f} ms "
        f"vs {sum(c.baseline_seconds for c in costs) * ms:.0f} ms (per checkpoint)"
    )
