"""ckptzip under torch.distributed.checkpoint: FSDP2 on 2 CPU processes, a crash, a resume.

    python ckptzip/examples/dcp_fsdp.py          # --quick: 40 steps

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
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from _common import Cost, mlp, mse_step, parse_args, print_cost, regression_batch, seconds
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

from ckptzip.dcp import Reader, Writer

WORLD = 2


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = mlp(64, 512)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> float:
    batch = regression_batch(64, 64, seed=step * WORLD + dist.get_rank())  # each rank its batch
    mean = mse_step(model, opt, batch).clone()
    dist.all_reduce(mean)
    return float(mean) / WORLD


def timed(state: dict, writer: object) -> float:
    def save() -> None:
        dcp.save(state, storage_writer=writer)
        dist.barrier()  # done when the slowest rank is

    dist.barrier()
    return seconds(save)


def size(path: Path) -> int:
    """Bytes this save wrote (a delta's hard-linked parent files are not counted)."""
    return (
        sum(
            f.stat().st_size
            for f in path.iterdir()
            if f.name.startswith("__") and f.stat().st_nlink == 1
        )
        + (path / ".metadata").stat().st_size
    )


def run(crash: int | None, root: Path, steps: int, every: int) -> tuple[float, list[Cost]]:
    torch.manual_seed(0)
    model, opt = make()
    costs, step, loss, parent = [], 0, 0.0, None
    while step < steps:
        loss = train_step(model, opt, step)
        step += 1
        if step % every == 0:
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd, "step": step}
            t_dcp = timed(state, dcp.FileSystemWriter(root / f"dcp_{step}"))
            t_ckz = timed(state, Writer(root / f"step_{step}", parent=parent))
            parent = root / f"step_{step}"
            costs.append(Cost(size(root / f"dcp_{step}"), size(parent), t_dcp, t_ckz))
        if step == crash:
            model, opt = make()  # the live state is gone
            msd, osd = get_state_dict(model, opt)
            state = {"model": msd, "optim": osd, "step": 0}
            assert parent is not None
            dcp.load(state, storage_reader=Reader(parent))
            set_state_dict(
                model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"]
            )
            if dist.get_rank() == 0:
                print(f"crash at step {crash}: restored step {state['step']} on {WORLD} processes")
            step, crash = state["step"], None
    return loss, costs


def worker(rank: int, port: int, root: str, plan: tuple[int, int, int]) -> None:
    steps, every, crash = plan
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    exact, _ = run(None, Path(root) / "a", steps, every)
    loss, costs = run(crash, Path(root) / "b", steps, every)
    if rank == 0:
        print(f"final loss {loss:.4f} with a crash and a restore, {exact:.4f} without")
        print_cost(costs, "FileSystemWriter")
    dist.barrier()
    dist.destroy_process_group()
    # FSDP2's DTensors keep the gloo group's threads alive past destroy_process_group, and
    # their teardown inside the interpreter's exit now and then aborted a rank (SIGABRT,
    # "terminate called without an active exception"): with nothing left to do, leave now
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    plan = (40, 10, 25) if parse_args(__doc__).quick else (80, 20, 50)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(free, tmp, plan), nprocs=WORLD)
