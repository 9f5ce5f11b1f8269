"""Case study: binary search trees, RL guide vs random (RLCheck's Python benchmark).

The generator builds a tree by choices: a node's value (0..10), then whether it has a left
child, then whether it has a right child, down to depth ``MAX_DEPTH`` (nodes at depths
0..4, as in RLCheck's Python case study). A tree is valid when the BST invariant holds
(values strictly increase in order, so no duplicates). Random generation makes mostly
invalid trees and few distinct valid ones; the RL guide learns to make new valid trees.

Run (from the repository root)::

    .venv/bin/python rlcheck/benchmarks/bst.py            # 100 000 trials x 3 seeds
    .venv/bin/python rlcheck/benchmarks/bst.py --quick    # 10 000 trials x 1 seed
    .venv/bin/python rlcheck/benchmarks/bst.py --seconds 3  # same time, not same trials
    .venv/bin/python rlcheck/benchmarks/bst.py --repeat 3   # fastest of 3 timings per run

It prints one row per (guide, state abstraction, seed), the mean over seeds, the RL/random
ratio of unique valid trees and of throughput, and writes JSON (and optionally a PNG).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rlcheck
from rlcheck import Gen, Guide

MAX_DEPTH = 4
"""Deepest node depth (root = 0): up to 31 nodes, at most 11 of them in a valid tree."""
MAX_VALUE = 10

Tree = tuple[int, "Tree | None", "Tree | None"]


def bst(g: Gen, depth: int = 0) -> Tree:
    """A random binary tree with values 0..10, built by (value, has-left, has-right)."""
    value = g.integer(0, MAX_VALUE, label="value")
    left = right = None
    if depth < MAX_DEPTH and g.boolean(label="has_left"):
        with g.scope("LEFT"):
            left = bst(g, depth + 1)
    if depth < MAX_DEPTH and g.boolean(label="has_right"):
        with g.scope("RIGHT"):
            right = bst(g, depth + 1)
    return (value, left, right)


def bst_size(tree: Tree | None, low: int = -1, high: int = MAX_VALUE + 1) -> int:
    """Number of nodes of ``tree`` if it is a BST with values in (low, high), else -1.

    One traversal gives both the verdict and the size.
    """
    if tree is None:
        return 0
    value, left, right = tree
    if not low < value < high:
        return -1
    n_left = bst_size(left, low, value)
    if n_left < 0:
        return -1
    n_right = bst_size(right, value, high)
    if n_right < 0:
        return -1
    return 1 + n_left + n_right


def is_bst(tree: Tree) -> bool:
    """The validity check: the BST invariant (strict, so values are distinct)."""
    return bst_size(tree) >= 0


class SizeTrackingCheck:
    """``is_bst`` that also remembers the largest valid tree seen."""

    def __init__(self) -> None:
        self.max_size = 0

    def __call__(self, tree: Tree) -> bool:
        size = bst_size(tree)
        if size > self.max_size:
            self.max_size = size
        return size >= 0


def configs() -> dict[str, Callable[[int], Guide]]:
    """The compared configurations: name -> guide factory taking a seed.

    The state window is k = 4 choices, except ``rl/labelled-k5``: on the ancestor path a
    scope label takes a slot of the window, so k = 5 keeps about as many choices in view
    as the unlabelled k = 4 state while adding the label (and does best here).
    """
    return {
        "random": lambda seed: rlcheck.RandomGuide(seed=seed),
        "rl/sequence": lambda seed: rlcheck.RLGuide("sequence", k=4, seed=seed),
        "rl/ancestor": lambda seed: rlcheck.RLGuide("ancestor", k=4, seed=seed),
        "rl/labelled": lambda seed: rlcheck.RLGuide("labelled", k=4, seed=seed),
        "rl/labelled-k5": lambda seed: rlcheck.RLGuide("labelled", k=5, seed=seed),
    }


def run_one(
    name: str, guide: Guide, seed: int, trials: int | None, seconds: float | None = None
) -> tuple[dict[str, Any], Any]:
    check = SizeTrackingCheck()
    cpu = time.process_time()
    result = rlcheck.run(bst, check, guide=guide, trials=trials, seconds=seconds, seed=seed)
    cpu = time.process_time() - cpu
    row = {
        "config": name,
        "seed": seed,
        "trials": result.trials,
        "valid": result.valid,
        "unique_valid": result.unique_valid,
        "max_valid_size": check.max_size,
        "seconds": round(result.seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "trials_per_s": round(result.trials_per_second, 1),
        "trials_per_cpu_s": round(result.trials / cpu, 1) if cpu > 0 else None,
    }
    return row, result


def _keep_fastest(row: dict[str, Any], again: dict[str, Any]) -> None:
    """Fold a repeated run into ``row``: the same seed gives the same inputs (checked), so
    only the timing differs; the fastest run is the one least slowed by other processes."""
    for field in ("trials", "valid", "unique_valid", "max_valid_size"):
        if row[field] != again[field]:
            raise RuntimeError(f"{row['config']} seed {row['seed']}: {field} differs on a rerun")
    for field in ("seconds", "cpu_seconds"):
        row[field] = min(row[field], again[field])
    for field in ("trials_per_s", "trials_per_cpu_s"):
        row[field] = max(row[field] or 0, again[field] or 0)
    row["repeats"] = row.get("repeats", 1) + 1


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean over seeds per configuration, with ratios to random."""
    by_config: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_config.setdefault(row["config"], []).append(row)
    summary = []
    for name, group in by_config.items():
        summary.append(
            {
                "config": name,
                "seeds": len(group),
                "valid": statistics.mean(r["valid"] for r in group),
                "unique_valid": statistics.mean(r["unique_valid"] for r in group),
                "unique_valid_min": min(r["unique_valid"] for r in group),
                "unique_valid_max": max(r["unique_valid"] for r in group),
                "max_valid_size": statistics.mean(r["max_valid_size"] for r in group),
                "trials_per_s": statistics.mean(r["trials_per_s"] for r in group),
                "trials_per_cpu_s": statistics.mean(r["trials_per_cpu_s"] or 0 for r in group),
            }
        )
    base = next((s for s in summary if s["config"] == "random"), None)
    for s in summary:
        if base is not None and base["unique_valid"] > 0:
            s["unique_valid_vs_random"] = s["unique_valid"] / base["unique_valid"]
            s["throughput_vs_random"] = s["trials_per_s"] / base["trials_per_s"]
            s["cpu_throughput_vs_random"] = s["trials_per_cpu_s"] / base["trials_per_cpu_s"]
    return summary


_HEADER = (
    f"{'guide/state':<15} {'seed':>4} {'trials':>8} {'valid':>7} {'unique':>7} "
    f"{'max size':>8} {'trials/s':>9}"
)


def _format_row(r: dict[str, Any]) -> str:
    return (
        f"{r['config']:<15} {r['seed']:>4} {r['trials']:>8} {r['valid']:>7} "
        f"{r['unique_valid']:>7} {r['max_valid_size']:>8} {r['trials_per_s']:>9.0f}"
    )


def _print_summary(summary: list[dict[str, Any]]) -> None:
    print(
        f"\n{'mean over seeds':<15} {'unique':>8} {'(min-max)':>13} {'valid':>8} "
        f"{'max size':>8} {'trials/s':>9} {'x random':>8} {'speed':>6} {'cpu speed':>9}"
    )
    nan = float("nan")
    for s in summary:
        spread = f"{s['unique_valid_min']}-{s['unique_valid_max']}"
        print(
            f"{s['config']:<15} {s['unique_valid']:>8.0f} {spread:>13} {s['valid']:>8.0f} "
            f"{s['max_valid_size']:>8.1f} {s['trials_per_s']:>9.0f} "
            f"{s.get('unique_valid_vs_random', nan):>7.1f}x "
            f"{s.get('throughput_vs_random', nan):>5.2f}x "
            f"{s.get('cpu_throughput_vs_random', nan):>8.2f}x"
        )
    print(
        "(x random: unique valid trees relative to random; speed: trials per second relative"
        " to random, wall-clock; cpu speed: the same per CPU second)"
    )


def _load_average() -> float | None:
    """The host's 1-minute load average (other processes competing for its cores)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10 000 trials, one seed")
    parser.add_argument("--trials", type=int, help="trials per run (default 100 000)")
    parser.add_argument(
        "--seconds", type=float, help="a time budget per run instead of a number of trials"
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds (default 0 1 2)")
    parser.add_argument("--configs", nargs="+", help=f"subset of: {' '.join(configs())}")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each configuration this many times and keep the fastest timing (counts "
        "are identical: same seed, same inputs); steadier throughput on a shared machine",
    )
    parser.add_argument("--json", type=Path, help="output JSON (default under results/)")
    parser.add_argument(
        "--plot", type=Path, help="PNG of unique valid trees over trials (seed 0 runs)"
    )
    args = parser.parse_args(argv)

    if args.repeat < 1 or (args.seconds and args.repeat > 1):
        parser.error("--repeat takes a positive count, and only with a trial budget")
    trials = None if args.seconds else args.trials or (10_000 if args.quick else 100_000)
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    factories = configs()
    names = args.configs or list(factories)
    unknown = sorted(set(names) - set(factories))
    if unknown:
        parser.error(f"unknown configs {unknown}; choose from {list(factories)}")
    default_name = (
        "bst_time.json" if args.seconds else "bst_quick.json" if args.quick else "bst.json"
    )
    out = args.json or Path(__file__).parent / "results" / default_name

    load_at_start = _load_average()
    budget = f"{args.seconds} s" if args.seconds else f"{trials} trials"
    print(f"BST case study: {budget} per run, seeds {seeds}")
    print("(throughput is wall-clock on a shared machine: compare rows of one run only)\n")
    print(_HEADER)
    rows: list[dict[str, Any]] = []
    first_results: dict[str, Any] = {}
    by_run: dict[tuple[str, int], dict[str, Any]] = {}
    for repeat in range(args.repeat):
        # Seeds outermost: every configuration sees the same stretch of machine load in turn.
        for seed in seeds:
            for name in names:
                row, result = run_one(name, factories[name](seed), seed, trials, args.seconds)
                first = by_run.get((name, seed))
                if first is None:
                    by_run[name, seed] = row
                    rows.append(row)
                    first_results.setdefault(name, result)
                else:
                    _keep_fastest(first, row)
                print(_format_row(row) + (f"  (repeat {repeat + 1})" if repeat else ""), flush=True)
    summary = summarise(rows)
    _print_summary(summary)

    out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "benchmark": "bst",
        "command": " ".join(["bst.py", *(argv if argv is not None else sys.argv[1:])]),
        "trials": trials,
        "seconds": args.seconds,
        "seeds": seeds,
        "repeat": args.repeat,
        "max_depth": MAX_DEPTH,
        "python": platform.python_version(),
        "machine": platform.machine(),
        # Throughput depends on the host and on what else runs there: say what it was.
        "cpu_count": os.cpu_count(),
        "load_average_1min": {"start": load_at_start, "end": _load_average()},
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
        "summary": summary,
    }
    out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"\nwrote {out}")
    if args.plot:
        from rlcheck.plot import plot_unique_valid

        plot_unique_valid(first_results, args.plot, x="seconds" if args.seconds else "trials")
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
