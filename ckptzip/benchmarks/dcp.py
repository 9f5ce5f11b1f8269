"""Benchmark: ``ckptzip.dcp.Writer`` against DCP's own ``FileSystemWriter``, same state, one run.

For each world size (``--worlds``, default 2 and 4) it spawns that many CPU processes on gloo,
builds an MLP of ``--params`` parameters (default 50M: ``--layers`` square linear layers),
shards every layer with FSDP2 ``fully_shard``, takes one AdamW step so the optimizer holds
its two moments, and saves ``{"model", "optim"}`` from ``get_state_dict`` with

* ``dcp``: ``FileSystemWriter`` (torch.save per rank, DCP's default);
* ``ckptzip``: ``ckptzip.dcp.Writer`` with the default ``CompressionConfig``;
* ``ckptzip_delta``: after 5 more training steps, a ``Writer(parent=...)`` delta against the
  ``ckptzip`` save (its parent chain hard-linked, not counted as bytes written),

and the same state once more through ``dcp`` for the second step, so each ``ckptzip`` row has a
``dcp`` row of the same state. Bytes written = sizes of the files each save created; seconds =
wall time of ``dcp.save`` on rank 0, between barriers (every rank compresses its own shards
in parallel). Each process uses one intra-op thread and one ckptzip encoding thread, as
``FileSystemWriter`` writes with one. It then loads the ``ckptzip`` and ``ckptzip_delta``
checkpoints back (``Reader``) and records the relative L2 error of the
restored weights.

    python benchmarks/dcp.py            # 50M parameters, 2 and 4 processes
    python benchmarks/dcp.py --quick    # 5M parameters

Writes ``benchmarks/results/dcp.json`` (``dcp-quick.json``) and prints a table. On a shared
machine the seconds are noisy; the two writers of one row always ran on the same state,
back to back.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, best_of, print_table, write_json

import ckptzip
from ckptzip.dcp import Reader, Writer


def _model(width: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.GELU()]
    model = torch.nn.Sequential(*blocks)
    for block in model:
        if isinstance(block, torch.nn.Linear):
            fully_shard(block)
    fully_shard(model)
    return model


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, width: int) -> None:
    for step in range(steps):
        g = torch.Generator().manual_seed(step * 100 + dist.get_rank())
        x = torch.randn(32, width, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _dir_bytes(path: Path, since: set[int] | None = None) -> int:
    """Bytes of the files in ``path`` (hard links to files of other saves excluded)."""
    total = 0
    for f in path.iterdir():
        st = f.stat()
        if since is None or st.st_ino not in since:
            total += st.st_size
    return total


def _timed_save(state: dict[str, Any], writer: Any) -> float:
    def save() -> None:
        dcp.save(state, storage_writer=writer)
        dist.barrier()  # the save ends when the slowest rank has written

    dist.barrier()
    return best_of(save, 1)[1]


def _weights(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
        for k, v in state["model"].items()
    }


def _rel_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    num = sum(float((a[k] - b[k]).pow(2).sum()) for k in a)
    den = sum(float(b[k].pow(2).sum()) for k in a)
    return (num / den) ** 0.5


def _worker(rank: int, world: int, port: int, width: int, layers: int, root: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    out = Path(root)
    model = _model(width, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    _train(model, opt, 1, width)
    rows: list[dict[str, Any]] = []

    def save(name: str, writer: Any, state: dict[str, Any], since: set[int] | None) -> None:
        seconds = _timed_save(state, writer)
        if rank == 0:
            rows.append(
                {"writer": name, "seconds": seconds, "bytes": _dir_bytes(out / name, since)}
            )

    state = {"model": get_state_dict(model, opt)[0], "optim": get_state_dict(model, opt)[1]}
    save("dcp", dcp.FileSystemWriter(out / "dcp"), state, None)
    save("ckptzip", Writer(out / "ckptzip", threads=1), state, None)
    truth1 = _weights(state)
    _train(model, opt, 5, width)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    save("dcp2", dcp.FileSystemWriter(out / "dcp2"), state, None)
    parent_inodes = {f.stat().st_ino for f in (out / "ckptzip").iterdir()}
    save(
        "ckptzip_delta",
        Writer(out / "ckptzip_delta", parent=out / "ckptzip", threads=1),
        state,
        parent_inodes,
    )
    truth2 = _weights(state)

    errors = {}
    for name, truth in (("ckptzip", truth1), ("ckptzip_delta", truth2)):
        msd, osd = get_state_dict(model, opt)
        loaded = {"model": msd, "optim": osd}
        dcp.load(loaded, storage_reader=Reader(out / name))
        errors[name] = _rel_error(_weights(loaded), truth)
    if rank == 0:
        for row in rows:
            row["weights_rel_error"] = errors.get(row["writer"])
        (out / "rows.json").write_text(json.dumps(rows))
    dist.barrier()  # leave together: gloo can abort a rank whose peer left mid-teardown
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=float, default=50e6, help="parameters (default 50M)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--quick", action="store_true", help="5M parameters")
    args = ap.parse_args()
    params = 5e6 if args.quick else args.params
    width = int((params / args.layers) ** 0.5)
    n_params = args.layers * (width * width + width)
    results: dict[str, Any] = {
        "params": n_params,
        "layers": args.layers,
        "width": width,
        "optimizer": "AdamW",
        "load_average": os.getloadavg(),
        "ckptzip": ckptzip.__version__,
        "runs": [],
    }
    for world in args.worlds:
        root = tempfile.mkdtemp(prefix=f"ckptzip-dcp-{world}-")
        try:
            mp.spawn(_worker, args=(world, _free_port(), width, args.layers, root), nprocs=world)
            rows = json.loads((Path(root) / "rows.json").read_text())
        finally:
            shutil.rmtree(root, ignore_errors=True)
        by = {r["writer"]: r for r in rows}
        for name, base in (("ckptzip", "dcp"), ("ckptzip_delta", "dcp2")):
            by[name]["ratio_vs_dcp"] = by[base]["bytes"] / by[name]["bytes"]
            by[name]["time_vs_dcp"] = by[name]["seconds"] / by[base]["seconds"]
        results["runs"].append({"world": world, "rows": rows})

    rows = [{"procs": run["world"], **r} for run in results["runs"] for r in run["rows"]]
    print_table(
        f"{n_params / 1e6:.1f}M parameters + AdamW state, FSDP2 on CPU/gloo",
        rows,
        [
            ("writer", "writer", ""),
            ("procs", "procs", "d"),
            ("bytes", "bytes", ",d"),
            ("seconds", "seconds", ".2f"),
            ("ratio_vs_dcp", "ratio", ".2f"),
            ("time_vs_dcp", "time", ".1f"),
            ("weights_rel_error", "w err", ".1%"),
        ],
    )
    write_json(RESULTS / ("dcp-quick.json" if args.quick else "dcp.json"), results)


if __name__ == "__main__":
    sys.exit(main())
