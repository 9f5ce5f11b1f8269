"""ckptzip under torch.distributed.checkpoint: FSDP2 on 2 CPU processes, a crash, a resume.

    python ckptzip/examples/dcp_fsdp.py

Spawns 2 processes (gloo), shards a small MLP with ``fully_shard``, trains with AdamW and
saves every 20 steps with ``ckptzip.dcp.Writer`` (each rank compresses its own shards; every
save after the first is a delta against the previous directory). At step 50 the model and
optimizer are thrown away and restored from ``step_40`` with ``ckptzip.dcp.Reader``; training
redoes the lost steps. Every state is also saved with DCP's own ``FileSystemWriter`` to print
what ckptzip costs against it (bytes and seconds per save), and the final loss is compared
with a run without the crash.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from ckptzip.dcp import Reader, Writer

STEPS, EVERY, CRASH, WORLD = 80, 20, 50, 2


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 1),
    )
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> float:
    g = torch.Generator().manual_seed(step * WORLD + dist.get_rank())  # each rank its batch
    x = torch.randn(64, 64, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), torch.sin(x[:, :8].sum(1, keepdim=True)))
    opt.zero_grad()
    loss.backward()
    opt.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    return float(mean) / WORLD


def timed(state: dict, writer: object) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    dcp.save(state, storage_writer=writer)
    dist.barrier()
    return time.perf_counter() - t0


def size(path: Path) -> int:
    return (
        sum(
            f.stat().st_size
            for f in path.iterdir()
            if f.name.startswith("__") and f.stat().st_nlink == 1
        )
        + (path / ".metadata").stat().st_size
    )


def run(crash: bool, root: Path) -> tuple[float, list[tuple[int, int, float, float]]]:
    torch.manual_seed(0)
    model, opt = make()
    costs, step, loss, parent = [], 0, 0.0, None
    while step < STEPS:
        loss = train_step(model, opt, step)
        step += 1
        if step % EVERY == 0:
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd, "step": step}
            t_dcp = timed(state, dcp.FileSystemWriter(root / f"dcp_{step}"))
            t_ckz = timed(state, Writer(root / f"step_{step}", parent=parent))
            parent = root / f"step_{step}"
            costs.append((size(root / f"dcp_{step}"), size(parent), t_ckz, t_dcp))
        if crash and step == CRASH:
            model, opt = make()  # the live state is gone
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd, "step": 0}
            dcp.load(state, storage_reader=Reader(root / "step_40"))
            set_state_dict(
                model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
            )
            step, crash = state["step"], False
            if dist.get_rank() == 0:
                print(f"crash at step {CRASH}: restored step {step} on {WORLD} processes")
    return loss, costs


def worker(rank: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    exact, _ = run(False, Path(root) / "a")
    loss, costs = run(True, Path(root) / "b")
    if rank == 0:
        raw, out = sum(c[0] for c in costs), sum(c[1] for c in costs)
        print(f"final loss {loss:.4f} with a crash and a restore, {exact:.4f} without")
        print(
            f"cost: {len(costs)} checkpoints, FileSystemWriter {raw:,} B, ckptzip {out:,} B "
            f"({raw / out:.1f}x smaller); save {sum(c[2] for c in costs) / len(costs) * 1000:.0f}"
            f" ms vs {sum(c[3] for c in costs) / len(costs) * 1000:.0f} ms (per checkpoint)"
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(free, tmp), nprocs=WORLD)
