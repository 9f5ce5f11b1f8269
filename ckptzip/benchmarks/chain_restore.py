"""Benchmark: what a longer chain costs a restore (``CheckpointManager(keyframe_every=N)``).

A workload is trained with the manager at its defaults (error feedback, the search with
``eval_fn``), one save every ``--every`` steps, ``--saves`` saves, once per ``--keyframes``
value, each into its own directory. Then a fresh process restores each directory's step
``k`` (``CheckpointManager(d).load(k)``: decoding the chain from its keyframe) for every
``--at`` step, the directories alternating, best of ``--repeat``; the CPU time of the process
(every thread) and the wall time of the load alone are reported, with the bytes written.

Run ``python benchmarks/chain_restore.py`` (``llm``, 20 saves, keyframes every 10 and 20,
restores of steps 9 and 19: about 2 minutes on a shared 2-core machine). Writes
``benchmarks/results/chain_restore-<model>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads
import torch

import ckptzip


def build(
    model: str, seed: int, directory: Path, keyframe_every: int, saves: int, every: int
) -> int:
    """Train ``model`` and save ``saves`` times into ``directory``; the bytes written."""
    w = _workloads.make(model, seed)
    mgr = ckptzip.CheckpointManager(
        directory,
        model=w.model,
        optimizer=w.optimizer,
        eval_fn=w.val_fn,
        keyframe_every=keyframe_every,
        window=every,
        checkpoint_every=every,
    )
    step = 0
    for save in range(saves):
        for _ in range(every):
            w.train_step(step)
            step += 1
        mgr.save(save)
    mgr.close()
    return sum(p.stat().st_size for p in directory.glob("*.ckz"))


def load_once(directory: str, step: int) -> dict[str, float]:
    """This process's CPU time and the wall time of one restore (run in a fresh process)."""
    torch.set_num_threads(1)
    c0, t0 = time.process_time(), time.perf_counter()
    ckptzip.CheckpointManager(directory).load(step)
    return {"cpu": time.process_time() - c0, "wall": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llm", choices=sorted(_workloads.WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--saves", type=int, default=20)
    ap.add_argument("--every", type=int, default=10, help="training steps between saves")
    ap.add_argument("--keyframes", type=int, nargs="+", default=[10, 20])
    ap.add_argument("--at", type=int, nargs="+", default=[9, 19], help="saves to restore")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--load", nargs=2, metavar=("DIR", "STEP"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.load:
        print(json.dumps(load_once(args.load[0], int(args.load[1]))))
        return 0
    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="chain-restore-") as tmp:
        written = {}
        for kf in args.keyframes:
            d = Path(tmp) / f"kf{kf}"
            written[kf] = build(args.model, args.seed, d, kf, args.saves, args.every)
        best: dict[tuple[int, int], dict[str, float]] = {}
        for _ in range(args.repeat):
            for at in args.at:
                for kf in args.keyframes:
                    out = subprocess.run(
                        [sys.executable, __file__, "--load", str(Path(tmp) / f"kf{kf}"), str(at)],
                        check=True,
                        capture_output=True,
                        text=True,
                        env={**os.environ, "OMP_NUM_THREADS": "1"},
                    ).stdout
                    t = json.loads(out.strip().splitlines()[-1])
                    key = (kf, at)
                    if key not in best or t["cpu"] < best[key]["cpu"]:
                        best[key] = t
        for (kf, at), t in sorted(best.items()):
            rows.append(
                {
                    "keyframe_every": kf,
                    "restored save": at,
                    "deltas decoded": at % kf,
                    "cpu_s": t["cpu"],
                    "wall_s": t["wall"],
                    "bytes written": written[kf],
                }
            )
    _report.print_table(
        f"{args.model}: restoring a chain's save, best of {args.repeat} (fresh process each)",
        rows,
        [("keyframe_every", "keyframe_every", ""), ("restored save", "save", ""),
         ("deltas decoded", "deltas", ""), ("cpu_s", "CPU s", ".3f"),
         ("wall_s", "wall s", ".3f"), ("bytes written", "bytes (all saves)", ",")],
    )  # fmt: skip
    out = _report.results_path(args.out, f"chain_restore-{args.model}.json")
    _report.write_json(out, {"meta": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
