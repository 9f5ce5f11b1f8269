"""Benchmark: how long checkpointing holds training up, ckptzip against ``torch.save``.

On an MLP of at least 50M parameters with AdamW state (about 600 MB in fp32), side by side in
one run on the same disk (a temp directory):

1. ``torch.save`` of ``{"model": ..., "optimizer": ...}``, and a blocking ``ckptzip.save`` of
   the same state (default lossy config; ``--threads`` compression threads);
2. the stall training sees with ``CheckpointManager.save(step, blocking=False)`` (model and
   optimizer given): the ``save`` call plus any wait of the next ``optimizer.step`` for the
   background copy (``SaveReport.stall``), against ``torch.save``'s time (target <= 5 %);
3. the wall time of a short training run checkpointing every ``--every`` steps through the
   manager (asynchronous, configuration search with a held-out ``eval_fn`` included),
   against the same run checkpointing with ``torch.save`` (target <= 1.05x).

The compression runs on the same cores as training: on a machine with few cores (and other
jobs) it slows training down even though it never blocks it; the table says how much.

``python benchmarks/stall.py`` (or ``--quick``: 50M parameters, fewer steps); prints a table
and writes ``benchmarks/results/stall.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, print_table, write_json

import ckptzip
from ckptzip import CheckpointManager


def build(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(512, width), nn.GELU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers.append(nn.Linear(width, 16))
    return nn.Sequential(*layers)


class Run:
    """A model, AdamW and a fixed stream of synthetic batches."""

    def __init__(self, width: int, depth: int, batch: int) -> None:
        torch.manual_seed(0)
        self.model = build(width, depth)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.batch = batch
        self.gen = torch.Generator().manual_seed(1)
        g = torch.Generator().manual_seed(2)
        self.heldout = (torch.randn(64, 512, generator=g), torch.randn(64, 16, generator=g))

    def step(self) -> None:
        x = torch.randn(self.batch, 512, generator=self.gen)
        y = torch.randn(self.batch, 16, generator=self.gen)
        loss = nn.functional.mse_loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def eval_fn(self, model: nn.Module) -> float:
        with torch.no_grad():
            return float(nn.functional.mse_loss(model(self.heldout[0]), self.heldout[1]))

    def state(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.opt.state_dict()}

    @property
    def params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def _torch_save(state: Any, path: Path) -> float:
    t0 = time.perf_counter()
    torch.save(state, path)
    return time.perf_counter() - t0


def save_times(run: Run, directory: Path, threads: int | None) -> dict[str, float]:
    state = run.state()
    t_torch = min(_torch_save(state, directory / f"t{i}.pt") for i in range(2))
    t0 = time.perf_counter()
    report = ckptzip.save(state, directory / "c.ckz", threads=threads)
    t_ckz = time.perf_counter() - t0
    return {
        "torch_save_s": t_torch,
        "ckptzip_save_s": t_ckz,
        "ckptzip_vs_torch": t_ckz / t_torch,
        "ratio": report.ratio,
    }


def async_stall(run: Run, directory: Path) -> dict[str, float]:
    """The stall of one asynchronous manager save, measured around real training steps."""
    with CheckpointManager(
        directory, model=run.model, optimizer=run.opt, eval_fn=run.eval_fn, window=None
    ) as mgr:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            run.step()
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        mgr.save(1, blocking=False)
        call = time.perf_counter() - t0
        steps_during = 0
        while mgr._running():  # train on while the save runs, as a job would
            run.step()
            steps_during += 1
        report = mgr.wait()
    assert report is not None and report.stall is not None
    return {
        "async_call_s": call,
        "async_stall_s": report.stall,
        "async_background_s": report.seconds,
        "steps_during_save": steps_during,
        "step_s": min(times),
    }


def training_run(run: Run, directory: Path, steps: int, every: int, kind: str) -> dict[str, float]:
    t0 = time.perf_counter()
    if kind == "torch":
        for s in range(1, steps + 1):
            run.step()
            if s % every == 0:
                torch.save(run.state(), directory / f"step-{s}.pt")
        return {"wall_s": time.perf_counter() - t0, "bytes": _size(directory, ".pt")}
    stalls = []
    with CheckpointManager(
        directory,
        model=run.model,
        optimizer=run.opt,
        eval_fn=run.eval_fn,
        checkpoint_every=every,
        window=min(every, 50),
    ) as mgr:
        for s in range(1, steps + 1):
            run.step()
            if s % every == 0:
                t1 = time.perf_counter()
                done = mgr.wait()  # the previous save (normally long finished)
                if done is not None and done.stall is not None:
                    stalls.append(done.stall + time.perf_counter() - t1)
                mgr.save(s, blocking=False)
        last = mgr.wait()
        if last is not None and last.stall is not None:
            stalls.append(last.stall)
    return {
        "wall_s": time.perf_counter() - t0,
        "bytes": _size(directory, ".ckz"),
        "max_stall_s": max(stalls) if stalls else 0.0,
    }


def _size(directory: Path, suffix: str) -> int:
    return sum(p.stat().st_size for p in directory.iterdir() if p.suffix == suffix)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=3072)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--threads", type=int, default=None, help="compression threads")
    ap.add_argument("--quick", action="store_true", help="fewer training steps")
    ap.add_argument("--json", type=Path, default=RESULTS / "stall.json")
    args = ap.parse_args()
    if args.quick:
        args.steps, args.every = 30, 15
    run = Run(args.width, args.depth, args.batch)
    assert run.params >= 50_000_000, f"{run.params} parameters: make the model larger"
    for _ in range(2):
        run.step()  # AdamW state exists
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("CKPTZIP_BENCH_DIR")) as tmp:
        root = Path(tmp)
        for name in ("saves", "async", "torch", "ckptzip"):
            (root / name).mkdir()
        saves = save_times(run, root / "saves", args.threads)
        stall = async_stall(run, root / "async")
        t_run = training_run(run, root / "torch", args.steps, args.every, "torch")
        c_run = training_run(run, root / "ckptzip", args.steps, args.every, "ckptzip")
    stall_fraction = stall["async_stall_s"] / saves["torch_save_s"]
    slowdown = c_run["wall_s"] / t_run["wall_s"]
    rows = [
        {"what": "torch.save (s)", "value": saves["torch_save_s"], "target": None},
        {"what": "ckptzip.save blocking (s)", "value": saves["ckptzip_save_s"], "target": None},
        {"what": "  / torch.save", "value": saves["ckptzip_vs_torch"], "target": 1.0},
        {"what": "save(blocking=False) stall (s)", "value": stall["async_stall_s"], "target": None},
        {"what": "  / torch.save", "value": stall_fraction, "target": 0.05},
        {"what": "background save (s)", "value": stall["async_background_s"], "target": None},
        {
            "what": f"run, torch.save every {args.every} (s)",
            "value": t_run["wall_s"],
            "target": None,
        },
        {"what": f"run, ckptzip every {args.every} (s)", "value": c_run["wall_s"], "target": None},
        {"what": "  ckptzip / torch.save", "value": slowdown, "target": 1.05},
    ]
    print_table(
        f"checkpoint stall: {run.params / 1e6:.1f}M parameters + AdamW, {args.steps} steps, "
        f"one training step {stall['step_s']:.3f} s, ratio {saves['ratio']:.1f}x",
        rows,
        [("what", "measure", ""), ("value", "value", ".3f"), ("target", "target", ".2f")],
    )
    write_json(
        args.json,
        {
            "params": run.params,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "saves": saves,
            "async": stall,
            "stall_fraction_of_torch_save": stall_fraction,
            "run_torch": t_run,
            "run_ckptzip": c_run,
            "run_slowdown": slowdown,
            "load_average": os.getloadavg(),
        },
    )


if __name__ == "__main__":
    main()
