"""ckptzip in a plain PyTorch training loop: CheckpointManager, a crash, a resume.

    python ckptzip/examples/plain_loop.py          # --quick: 120 steps

Trains a small MLP regressor with AdamW, checkpoints every 50 steps through a
:class:`ckptzip.CheckpointManager` (a full file every 4 saves, deltas between), throws the
model and optimizer away at step 275 as a crash would, restores the latest step into fresh
objects, redoes the lost steps and trains on. Prints what the checkpoints cost against
``torch.save`` of the same states (bytes and seconds) and the final loss against a run
without the crash.
"""

from __future__ import annotations

import os
import tempfile

import torch
from _common import Cost, mlp, mse_step, parse_args, print_cost, regression_batch, seconds

import ckptzip


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = mlp(32, 256)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def torch_save_cost(state: dict, directory: str) -> tuple[float, int]:
    """Seconds and bytes of ``torch.save`` of the same state to a file, fsynced as ckptzip's."""
    path = os.path.join(directory, "torch.pt")

    def save() -> None:
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())

    t = seconds(save)
    size = os.path.getsize(path)
    os.unlink(path)
    return t, size


def run(crash: int | None, directory: str, steps: int, every: int) -> tuple[float, list[Cost]]:
    torch.manual_seed(0)
    model, opt = make()
    mgr = ckptzip.CheckpointManager(directory, keyframe_every=4, keep=3)
    costs = []
    step, loss = 0, 0.0
    while step < steps:
        loss = float(mse_step(model, opt, regression_batch(64, 32, seed=step)))
        step += 1
        if step % every == 0:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
            t_torch, n_torch = torch_save_cost(state, directory)
            report = mgr.save(step, state)
            costs.append(Cost(n_torch, report.bytes_out, t_torch, report.seconds))
        if step == crash:
            model, opt = make()  # the live state is gone
            state = mgr.load()
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            step = state["step"]
            print(f"crash at step {crash}: restored step {step} from {mgr.path(step).name}")
            crash = None
    return loss, costs


if __name__ == "__main__":
    steps, every, crash = (120, 20, 90) if parse_args(__doc__).quick else (400, 50, 275)
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        exact_loss, _ = run(None, a, steps, every)
        loss, costs = run(crash, b, steps, every)
    print(f"final loss {loss:.4f} with a crash and a restore, {exact_loss:.4f} without")
    print_cost(costs, "torch.save")
