"""Benchmark: how quiet each weight's momentum is over training (``plan.momentum_coherence``).

Train each workload exactly and, at every checkpoint of the fault-tolerant protocol (every 10
steps of 200), compute :func:`ckptzip.plan.momentum_coherence` for every weight whose moments
the manager may quantize (at least 4096 elements): Adam's bias-corrected momentum against the
size uncorrelated gradients of the same second moment would give it (1: as noise makes it;
well below 1: the gradients cancel within the momentum's horizon). Printed per checkpoint:
the smallest, median and largest value over the weights (each weight's in the JSON) and the
share of the moments' entries a ``MomentPolicy(quiet=..., quiet_below=R)`` would store by its
quiet policy.

Run ``python benchmarks/momentum_coherence.py --models llm chargru bytetf --seeds 0 1 2``
(a few minutes on one core: it trains each model and seed once). Writes
``benchmarks/results/momentum_coherence.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads

from ckptzip.plan import MomentPolicy, momentum_coherence

MIN_NUMEL = 4096  # the manager's min_numel: the moments of smaller weights stay exact


def coherences(w: _workloads.Workload) -> list[tuple[str, float, int]]:
    """``(name, momentum_coherence, numel)`` of every weight of ``w`` with at least
    MIN_NUMEL elements."""
    names = {id(p): n for n, p in w.model.named_parameters()}
    out = []
    for group in w.optimizer.param_groups:
        for p in group["params"]:
            if p.numel() < MIN_NUMEL:
                continue
            r = momentum_coherence(w.optimizer.state[p], group.get("betas"))
            if r is not None:
                out.append((names.get(id(p), "?"), r, p.numel()))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["llm", "chargru", "bytetf"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--below", type=float, default=MomentPolicy().quiet_below)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    rows: list[dict[str, Any]] = []
    for model in args.models:
        for seed in args.seeds:
            w = _workloads.make(model, seed)
            for step in range(args.steps):
                w.train_step(step)
                if (step + 1) % args.every:
                    continue
                found = coherences(w)
                values = [r for _, r, _ in found]
                quiet = sum(n for _, r, n in found if r < args.below) / sum(n for *_, n in found)
                rows.append(
                    {
                        "model": model,
                        "seed": seed,
                        "step": step + 1,
                        "min": min(values),
                        "median": statistics.median(values),
                        "max": max(values),
                        "quiet_share": quiet,
                        "weights": {name: r for name, r, _ in found},
                    }
                )
                r = rows[-1]
                print(
                    f"{model:8s} seed {seed} step {step + 1:4d}  coherence min {r['min']:.2f} "
                    f"median {r['median']:.2f} max {r['max']:.2f}  quiet (< {args.below}) "
                    f"{quiet:6.1%} of the entries",
                    flush=True,
                )
    print("\nmedian over seeds and checkpoints of the per-checkpoint median; quiet share")
    for model in args.models:
        mine = [r for r in rows if r["model"] == model]
        early = [r for r in mine if r["step"] <= 2 * args.every]
        late = [r for r in mine if r["step"] > 2 * args.every]
        for name, part in (("the first two", early), ("later", late)):
            if not part:
                continue
            median = statistics.median(r["median"] for r in part)
            quiet = statistics.median(r["quiet_share"] for r in part)
            print(f"{model:8s} {name:12s} coherence {median:.2f}  quiet {quiet:6.1%}")
    out = _report.results_path(args.out, "momentum_coherence.json")
    _report.write_json(out, {"meta": vars(args), "rows": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
