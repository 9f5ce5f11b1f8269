"""ckptzip in a plain PyTorch training loop: CheckpointManager, a crash, a resume.

    python ckptzip/examples/plain_loop.py

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
import time

import torch

import ckptzip

STEPS, EVERY, CRASH = 400, 50, 275


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 256),
        torch.nn.GELU(),
        torch.nn.Linear(256, 256),
        torch.nn.GELU(),
        torch.nn.Linear(256, 1),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)  # the same data order after a resume
    x = torch.randn(64, 32, generator=g)
    return x, torch.sin(x[:, :8].sum(1, keepdim=True))


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> float:
    x, y = batch(step)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.detach())


def torch_save_cost(state: dict, directory: str) -> tuple[float, int]:
    """Seconds and bytes of ``torch.save`` of the same state to a file, fsynced as ckptzip's."""
    path = os.path.join(directory, "torch.pt")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    seconds, size = time.perf_counter() - t0, os.path.getsize(path)
    os.unlink(path)
    return seconds, size


def run(crash: bool, directory: str) -> tuple[float, list[tuple[int, int, float, float]]]:
    torch.manual_seed(0)
    model, opt = make()
    mgr = ckptzip.CheckpointManager(directory, keyframe_every=4, keep=3)
    costs = []
    step, loss = 0, 0.0
    while step < STEPS:
        loss = train_step(model, opt, step)
        step += 1
        if step % EVERY == 0:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
            t_torch, n_torch = torch_save_cost(state, directory)
            report = mgr.save(step, state)
            costs.append((n_torch, report.bytes_out, report.seconds, t_torch))
        if crash and step == CRASH:
            model, opt = make()  # the live state is gone
            state = mgr.load()
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            step = state["step"]
            print(f"crash at step {CRASH}: restored step {step} from {mgr.path(step).name}")
            crash = False
    return loss, costs


with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
    exact_loss, _ = run(False, a)
    loss, costs = run(True, b)
raw_bytes = sum(c[0] for c in costs)
out_bytes = sum(c[1] for c in costs)
save_s = sum(c[2] for c in costs) / len(costs)
torch_s = sum(c[3] for c in costs) / len(costs)
print(f"final loss {loss:.4f} with a crash and a restore, {exact_loss:.4f} without")
print(
    f"cost: {len(costs)} checkpoints, torch.save {raw_bytes:,} B, ckptzip {out_bytes:,} B "
    f"({raw_bytes / out_bytes:.1f}x smaller); save {save_s * 1000:.0f} ms vs torch.save "
    f"{torch_s * 1000:.0f} ms (per checkpoint)"
)
