"""Benchmark: ``ckptzip.dcp`` against DCP's own ``FileSystemWriter``/``FileSystemReader``, one run.

For each world size (``--worlds``, default 2 and 4) it spawns that many CPU processes on gloo,
builds an MLP of ``--params`` parameters (default 50M: ``--layers`` square linear layers),
shards every layer with FSDP2 ``fully_shard``, takes one AdamW step so the optimizer holds
its two moments, and saves ``{"model", "optim"}`` from ``get_state_dict`` with

* ``dcp``: ``FileSystemWriter`` (torch.save per rank, DCP's default);
* ``ckptzip``: ``ckptzip.dcp.Writer`` with the default ``CompressionConfig``;
* ``ckptzip_delta``: after 5 more training steps, a ``Writer(parent=...)`` delta against the
  first ``ckptzip`` save (its parent chain hard-linked, not counted as bytes written), the
  weights as their residual against the parent's reconstruction (error feedback, the default);
* ``ckptzip_delta_nofb``: the same with ``Writer(error_feedback=False)``: bin-index deltas of
  every shard (the default before),
* ``ckptzip_delta_cached``: ``ckptzip_delta`` with ``Writer(cache=recent_files(...))``, the
  cache the first ``ckptzip`` save filled: the parent's tensors are not decoded from disk
  (the same files as ``ckptzip_delta``),

and the state of the second step through ``dcp`` too (``dcp2``), so each ``ckptzip`` row has a
``dcp`` row of the same state. Each save is repeated ``--repeat`` times (default 3), the two
writers alternating (``dcp``, ``ckptzip``, ``dcp``, ``ckptzip`` ...), each into a new directory;
the loads likewise alternate ``FileSystemReader`` (``dcp_load``, ``dcp2_load``) and ``Reader``
(``ckptzip_load``, ``ckptzip_delta_load``), each into the live sharded state dict. ``seconds``
is the best wall time of rank 0, each call between barriers (so it ends when the slowest rank
is done); ``cpu`` is the CPU time (user + system, all threads) of every rank together in that
same call, ``cpu_min`` the least of the calls' CPU times (``min cpu``: its ratio). Bytes
written = sizes of the files each save created. Each process uses one intra-op thread;
``--threads`` is ``Writer``/``Reader``'s threads per rank (default 1, as ``FileSystemWriter``'s
``thread_count`` default). It then records the relative L2 error of the weights each
``Reader`` restored.

    python benchmarks/dcp.py                 # 50M parameters, 2 and 4 processes
    python benchmarks/dcp.py --quick         # 5M parameters, 2 repeats
    python benchmarks/dcp.py --worlds 2 --repeat 5

Writes ``benchmarks/results/dcp.json`` (``dcp-quick.json``; ``--out`` for another) and prints a
table. On a shared machine the seconds are noisy: compare the ratios, which come from calls
alternated in one run, and the CPU time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable
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

from _report import RESULTS, print_table, write_json

import ckptzip
from ckptzip.dcp import Reader, Writer, recent_files


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


def _cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of this process
    return r.ru_utime + r.ru_stime


def _timed(fn: Callable[[], None]) -> tuple[float, float]:
    """Wall seconds (rank 0's, barrier to barrier) and CPU seconds of all ranks of ``fn()``."""
    dist.barrier()
    c0, t0 = _cpu_seconds(), time.perf_counter()
    fn()
    dist.barrier()  # the call ends when the slowest rank is done
    wall, cpu = time.perf_counter() - t0, torch.tensor([_cpu_seconds() - c0], dtype=torch.float64)
    dist.all_reduce(cpu)
    return wall, float(cpu)


def _weights(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {
        k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().clone()
        for k, v in state["model"].items()
    }


def _rel_error(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    num = sum(float((a[k] - b[k]).pow(2).sum()) for k in a)
    den = sum(float(b[k].pow(2).sum()) for k in a)
    return (num / den) ** 0.5


class _Rows:
    """Best wall time per name, and the CPU time of the call that took it."""

    def __init__(self) -> None:
        self.runs: dict[str, list[tuple[float, float]]] = {}
        self.bytes: dict[str, int] = {}

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.runs.setdefault(name, []).append((wall, cpu))

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for name, runs in self.runs.items():
            wall, cpu = min(runs)
            out.append(
                {
                    "writer": name,
                    "seconds": wall,
                    "cpu": cpu,
                    "cpu_min": min(c for _, c in runs),
                    "all_seconds": [w for w, _ in runs],
                    "all_cpu": [c for _, c in runs],
                    "bytes": self.bytes.get(name),
                }
            )
        return out


def _worker(
    rank: int, world: int, port: int, width: int, layers: int, root: str, repeat: int, threads: int
) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        _run(rank, width, layers, Path(root), repeat, threads)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # FSDP2's DTensors keep the gloo group's threads alive past destroy_process_group; their
    # teardown inside the interpreter's exit now and then aborted a rank (SIGABRT): leave now
    sys.stdout.flush()
    os._exit(0)


def _run(rank: int, width: int, layers: int, out: Path, repeat: int, threads: int) -> None:
    model = _model(width, layers)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    _train(model, opt, 1, width)
    rows = _Rows()

    def save(name: str, i: int, writer: Any, state: dict[str, Any], since: set[int] | None):
        rows.add(name, *_timed(lambda: dcp.save(state, storage_writer=writer)))
        if rank == 0 and i == 0:
            rows.bytes[name] = _dir_bytes(out / f"{name}0", since)

    def state_now() -> dict[str, Any]:
        msd, osd = get_state_dict(model, opt)
        return {"model": msd, "optim": osd}

    state = state_now()
    # the parent's tables, kept by its save; room for every cached delta after it
    cache = recent_files(repeat + 1)
    for i in range(repeat):  # alternating, each into a new directory
        save("dcp", i, dcp.FileSystemWriter(out / f"dcp{i}"), state, None)
        kept = cache if i == 0 else None
        save("ckptzip", i, Writer(out / f"ckptzip{i}", threads=threads, cache=kept), state, None)
    truth1 = _weights(state)
    _train(model, opt, 5, width)
    state = state_now()
    parent_inodes = {f.stat().st_ino for f in (out / "ckptzip0").iterdir()}
    for i in range(repeat):
        save("dcp2", i, dcp.FileSystemWriter(out / f"dcp2{i}"), state, None)
        writer = Writer(out / f"ckptzip_delta{i}", parent=out / "ckptzip0", threads=threads)
        save("ckptzip_delta", i, writer, state, parent_inodes)
        writer = Writer(
            out / f"ckptzip_delta_nofb{i}",
            parent=out / "ckptzip0",
            threads=threads,
            error_feedback=False,
        )
        save("ckptzip_delta_nofb", i, writer, state, parent_inodes)
        writer = Writer(
            out / f"ckptzip_delta_cached{i}", parent=out / "ckptzip0", threads=threads, cache=cache
        )
        save("ckptzip_delta_cached", i, writer, state, parent_inodes)
    truth2 = _weights(state)

    errors = {}
    for i in range(repeat):
        for name, reader in (
            ("dcp", dcp.FileSystemReader(out / "dcp0")),
            ("ckptzip", Reader(out / "ckptzip0", threads=threads)),
            ("dcp2", dcp.FileSystemReader(out / "dcp20")),
            ("ckptzip_delta", Reader(out / "ckptzip_delta0", threads=threads)),
            ("ckptzip_delta_nofb", Reader(out / "ckptzip_delta_nofb0", threads=threads)),
        ):
            loaded = state_now()
            load = functools.partial(dcp.load, loaded, storage_reader=reader)
            rows.add(f"{name}_load", *_timed(load))
            if name.startswith("ckptzip") and i == 0:
                errors[name] = _rel_error(_weights(loaded), truth1 if name == "ckptzip" else truth2)
    if rank == 0:
        table = rows.rows()
        for row in table:
            row["weights_rel_error"] = errors.get(row["writer"])
        (out / "rows.json").write_text(json.dumps(table))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# each ckptzip row against the FileSystemWriter/Reader row of the same state
_BASELINES = {
    "ckptzip": "dcp",
    "ckptzip_delta": "dcp2",
    "ckptzip_delta_nofb": "dcp2",
    "ckptzip_delta_cached": "dcp2",
    "ckptzip_load": "dcp_load",
    "ckptzip_delta_load": "dcp2_load",
    "ckptzip_delta_nofb_load": "dcp2_load",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=float, default=50e6, help="parameters (default 50M)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--worlds", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeat", type=int, default=None, help="calls per row (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="Writer/Reader threads per rank")
    ap.add_argument("--quick", action="store_true", help="5M parameters, 2 repeats")
    ap.add_argument("--out", type=Path, default=None, help="results JSON path")
    args = ap.parse_args()
    params = 5e6 if args.quick else args.params
    repeat = args.repeat or (2 if args.quick else 3)
    width = int((params / args.layers) ** 0.5)
    n_params = args.layers * (width * width + width)
    results: dict[str, Any] = {
        "params": n_params,
        "layers": args.layers,
        "width": width,
        "optimizer": "AdamW",
        "repeat": repeat,
        "threads": args.threads,
        "load_average_before": os.getloadavg(),
        "ckptzip": ckptzip.__version__,
        "kernels": ckptzip.kernels.IMPLEMENTATION,
        "runs": [],
    }
    for world in args.worlds:
        root = tempfile.mkdtemp(prefix=f"ckptzip-dcp-{world}-")
        try:
            mp.spawn(
                _worker,
                args=(world, _free_port(), width, args.layers, root, repeat, args.threads),
                nprocs=world,
            )
            rows = json.loads((Path(root) / "rows.json").read_text())
        finally:
            shutil.rmtree(root, ignore_errors=True)
        by = {r["writer"]: r for r in rows}
        for name, base in _BASELINES.items():
            if by[name]["bytes"] is not None:
                by[name]["ratio_vs_dcp"] = by[base]["bytes"] / by[name]["bytes"]
            by[name]["time_vs_dcp"] = by[name]["seconds"] / by[base]["seconds"]
            by[name]["cpu_vs_dcp"] = by[name]["cpu"] / by[base]["cpu"]
            by[name]["cpu_min_vs_dcp"] = by[name]["cpu_min"] / by[base]["cpu_min"]
        results["runs"].append({"world": world, "load_average": os.getloadavg(), "rows": rows})

    rows = [{"procs": run["world"], **r} for run in results["runs"] for r in run["rows"]]
    print_table(
        f"{n_params / 1e6:.1f}M parameters + AdamW state, FSDP2 on CPU/gloo, best of {repeat}",
        rows,
        [
            ("writer", "call", ""),
            ("procs", "procs", "d"),
            ("bytes", "bytes", ",d"),
            ("seconds", "seconds", ".2f"),
            ("cpu", "cpu s", ".2f"),
            ("ratio_vs_dcp", "ratio", ".2f"),
            ("time_vs_dcp", "time", ".2f"),
            ("cpu_vs_dcp", "cpu", ".2f"),
            ("cpu_min_vs_dcp", "min cpu", ".2f"),
            ("weights_rel_error", "w err", ".1%"),
        ],
    )
    print(f"load average before / after each world: {results['load_average_before']} ", end="")
    print([run["load_average"] for run in results["runs"]])
    default = RESULTS / ("dcp-quick.json" if args.quick else "dcp.json")
    write_json(args.out or default, results)


if __name__ == "__main__":
    sys.exit(main())
