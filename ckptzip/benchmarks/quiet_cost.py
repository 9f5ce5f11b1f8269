"""Benchmark: what the quiet-momenta default costs a manager's saves and restores, in time.

``plan.FEEDBACK_MOMENTS`` stores the moments of a weight whose momentum is quiet
(``plan.momentum_coherence`` below 0.5) as Adam's step at 3 levels and the second moment at 8
(``plan.QUIET_MOMENTS``); before December 2026 it did not (``quiet=None``). This trains one
workload of the restore protocol (``_workloads``; ``llm`` by default, where most momenta are
quiet after a few dozen steps), then runs two ``CheckpointManager``s side by side on the same
model and optimizer, one per policy, each saving the same steps (a keyframe, then deltas:
``keyframe_every`` of them, blocking), the order of the two alternating from save to save; and
finally restores the last step of each chain in a fresh manager, alternating again. It prints
the CPU seconds of each save and restore and the ratio of the two policies, measured in one
run, and writes them as JSON::

    python benchmarks/quiet_cost.py                      # llm, train 100 steps, 10 saves
    python benchmarks/quiet_cost.py --workload bytetf --steps 60
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads

import ckptzip
from ckptzip.plan import FEEDBACK_MOMENTS

POLICIES = {
    "quiet (default)": FEEDBACK_MOMENTS,
    "quiet=None (before)": dataclasses.replace(FEEDBACK_MOMENTS, quiet=None),
}


def measure(workload: str, seed: int, steps: int, saves: int, every: int) -> dict[str, Any]:
    """CPU seconds of each save and of the last step's restore, per policy (see module)."""
    torch.manual_seed(seed)
    w = _workloads.make(workload, seed)
    for step in range(steps):
        w.train_step(step)
    dirs = {name: tempfile.mkdtemp(prefix="quiet-cost-") for name in POLICIES}
    managers = {
        name: ckptzip.CheckpointManager(
            dirs[name], model=w.model, optimizer=w.optimizer, eval_fn=w.eval_fn, moments=policy
        )
        for name, policy in POLICIES.items()
    }
    save_cpu: dict[str, list[float]] = {name: [] for name in POLICIES}
    ratios: dict[str, list[float]] = {name: [] for name in POLICIES}
    names = list(POLICIES)
    step = steps
    for i in range(saves):
        for name in names if i % 2 == 0 else names[::-1]:
            c0 = time.process_time()
            report = managers[name].save(step)
            save_cpu[name].append(time.process_time() - c0)
            assert report is not None
            ratios[name].append(report.ratio)
        for _ in range(every):
            w.train_step(step)
            step += 1
    for m in managers.values():
        m.close()
    restore_cpu: dict[str, list[float]] = {name: [] for name in POLICIES}
    for i in range(3):
        for name in names if i % 2 == 0 else names[::-1]:
            fresh = ckptzip.CheckpointManager(dirs[name])
            c0 = time.process_time()
            fresh.load()
            restore_cpu[name].append(time.process_time() - c0)
    return {"save_cpu": save_cpu, "restore_cpu": restore_cpu, "ratio": ratios}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="llm", choices=sorted(_workloads.WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=100, help="training steps before the saves")
    ap.add_argument("--saves", type=int, default=10)
    ap.add_argument("--every", type=int, default=10, help="training steps between saves")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    got = measure(args.workload, args.seed, args.steps, args.saves, args.every)
    base = "quiet=None (before)"
    rows = []
    for name in POLICIES:
        first, rest = got["save_cpu"][name][0], got["save_cpu"][name][1:]
        row = {
            "policy": name,
            "keyframe_save": first,
            "delta_save_median": statistics.median(rest) if rest else None,
            "restore_best": min(got["restore_cpu"][name]),
            "ratio_mean": statistics.fmean(got["ratio"][name]),
        }
        rows.append(row)
    by = {r["policy"]: r for r in rows}
    for r in rows:
        for k in ("keyframe_save", "delta_save_median", "restore_best"):
            b = by[base][k]
            r[f"{k}_x"] = None if r[k] is None or not b else r[k] / b
    _report.print_table(
        f"{args.workload}, {args.steps} steps trained, {args.saves} saves {args.every} apart "
        "(CPU seconds, one thread; x: over the policy before, same run)",
        rows,
        [
            ("policy", "policy", ""),
            ("keyframe_save", "keyframe save s", ".3f"),
            ("keyframe_save_x", "x", ".2f"),
            ("delta_save_median", "delta save s (median)", ".3f"),
            ("delta_save_median_x", "x", ".2f"),
            ("restore_best", "restore s (best of 3)", ".3f"),
            ("restore_best_x", "x", ".2f"),
            ("ratio_mean", "mean file ratio", ".1f"),
        ],
    )
    out = _report.results_path(args.out, f"quiet_cost-{args.workload}.json")
    _report.write_json(out, {"args": vars(args), "rows": rows, "raw": got})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
