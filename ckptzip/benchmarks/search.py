"""Benchmark: the per-checkpoint configuration search over real training runs.

For each workload (``mlp``, ``lm`` from ``_workloads``) this runs the fault-tolerant protocol
twice, with the same data order:

* **ckptzip**: train ``T`` steps; a :class:`~ckptzip.SensitivityTracker` keeps ``|g·w|`` over the
  last ``window`` steps before each checkpoint; every ``C`` steps the search picks a
  configuration (the full search at the first checkpoint, the neighbourhood of the previous
  choice after) and the whole state (weights + Adam moments) is saved with ``ckptzip.save``;
  ``F`` failures spread evenly throw the live model and optimizer away and restore them from
  the latest checkpoint file (the steps since are redone);
* **exact**: the identical protocol with exact in-memory checkpoints.

Per checkpoint it records the chosen configuration per layer type, trials, the ``eval_fn``
calls (the exact weights' baseline included) and the search's CPU seconds, the search time
as a fraction of the training time since the previous checkpoint (target ≤ 5 %), the held-out
loss of the restored weights against the live exact weights (the quality change), and the
weights-only and whole-checkpoint ratios side by side (``torch.save`` bytes / bytes written;
the optimizer's own ratio too). At the end: the final held-out loss of both runs and the
relative degradation. Every checkpoint is a full file (no delta chain: that is
``benchmarks/delta.py``'s subject), so the ratios here are the search's and quantizer's alone.

The search's ``eval_fn`` is the workload's held-out loss (``--search-batches N``: only the first
``N`` batches, cheaper; the quality reported always uses all of them, so it then also shows how
well a smaller evaluation set stands in for the larger one).

Run ``python benchmarks/search.py`` (full, ~15–25 min on a shared 2-core machine) or
``--quick`` (~3 min). Writes ``benchmarks/results/search[-quick].json``. Timings on a shared
machine are noisy (both the search and the training it is compared with are slowed alike);
sizes and losses are deterministic for a seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _report import RESULTS

import ckptzip
from ckptzip.search import MomentPolicy, SearchResult, save_scores, search
from ckptzip.sensitivity import SensitivityTracker

# (steps, checkpoint every, failures) per workload and mode
PLANS = {
    "quick": {"mlp": (600, 100, 3), "lm": (300, 100, 1)},
    "full": {"mlp": (2000, 200, 10), "lm": (1500, 150, 10)},
}


class _Counted:
    """The search's ``eval_fn``, counting its calls and their wall seconds."""

    def __init__(self, w: _workloads.Workload, batches: int) -> None:
        self.held = w.heldout[:batches] if batches > 0 else w.heldout
        self.loss_fn = w.loss_fn
        self.calls = 0
        self.seconds = 0.0

    @torch.no_grad()
    def __call__(self, model: nn.Module) -> float:
        t0 = time.perf_counter()
        was = model.training
        model.eval()
        total = sum(float(self.loss_fn(model, x, y)) for x, y in self.held)
        model.train(was)
        self.calls += 1
        self.seconds += time.perf_counter() - t0
        return total / len(self.held)


def _subset_eval(w: _workloads.Workload, batches: int) -> _Counted:
    return _Counted(w, batches)


def _restore(w: _workloads.Workload, state: dict[str, Any]) -> None:
    w.model.load_state_dict(state["model"])
    w.optimizer.load_state_dict(state["optimizer"])


def _section_bytes(report: ckptzip.Report, prefix: str) -> tuple[int, int]:
    """(in-memory bytes, written bytes) of the tensors under ``prefix``."""
    entries = [e for e in report.entries if e.path.startswith(prefix)]
    return sum(e.nbytes for e in entries), sum(e.bytes for e in entries)


def run_protocol(
    name: str,
    steps: int,
    every: int,
    failures: int,
    *,
    seed: int,
    compressed: bool,
    tolerance: float,
    search_batches: int,
    directory: str,
) -> dict[str, Any]:
    """One run of the protocol; ``compressed=False`` keeps exact in-memory checkpoints."""
    w = _workloads.make(name, seed)
    search_eval = _subset_eval(w, search_batches)
    fail_at = set(_workloads.failure_steps(steps, every, failures))
    tracker = (
        SensitivityTracker(w.model, window=min(50, every), every=every, optimizer=w.optimizer)
        if compressed
        else None
    )
    latest: tuple[int, Any] | None = None  # (step, file path or exact state)
    previous: SearchResult | None = None
    checkpoints: list[dict[str, Any]] = []
    train_seconds = 0.0
    since_checkpoint = 0.0
    step, redone, restores = 0, 0, 0
    while step < steps:
        if step in fail_at:
            fail_at.discard(step)
            restores += 1
            # the failure: the live state is thrown away, a fresh process restores
            w = _rebuild(name, seed, w)
            if tracker is not None:
                tracker.close()
            restored_step = 0 if latest is None else latest[0]
            if latest is not None:
                state = ckptzip.load(latest[1]) if compressed else latest[1]
                _restore(w, state)
            search_eval = _subset_eval(w, search_batches)
            if compressed:
                tracker = SensitivityTracker(
                    w.model,
                    window=min(50, every),
                    every=every,
                    start=restored_step,
                    optimizer=w.optimizer,
                )
            redone += step - restored_step
            step = restored_step
            continue
        t0 = time.perf_counter()
        w.train_step(step)
        dt = time.perf_counter() - t0
        train_seconds += dt
        since_checkpoint += dt
        step += 1
        if step % every:
            continue
        if not compressed:
            latest = (step, _workloads._clone(w.state()))
            continue
        assert tracker is not None
        scores = tracker.scores()
        calls, eval_seconds = search_eval.calls, search_eval.seconds
        cpu0 = time.process_time()
        result = search(
            w.model,
            eval_fn=search_eval,
            tolerance=tolerance,
            scores=scores,
            previous=previous,
            optimizer=w.optimizer,
        )
        search_cpu = time.process_time() - cpu0
        previous = result
        path = os.path.join(directory, f"{name}-{step:07d}.ckz")
        report = ckptzip.save(
            w.state(),
            path,
            config=result.config,
            scores=save_scores(w.model, result, scores=scores, optimizer=w.optimizer),
            overwrite=True,
        )
        restored = _workloads.make(name, seed)
        restored.model.load_state_dict(ckptzip.load(path)["model"])
        exact_loss = w.eval_fn(w.model)
        restored_loss = w.eval_fn(restored.model)
        m_in, m_out = _section_bytes(report, "model/")
        o_in, o_out = _section_bytes(report, "optimizer/")
        checkpoints.append(
            {
                "step": step,
                "layer_configs": result.to_json()["layer_configs"],
                "strategy": result.strategy,
                "trials": result.trials,
                "search_seconds": result.seconds,
                "train_seconds_since_previous": since_checkpoint,
                "search_fraction": result.seconds / since_checkpoint,
                "search_cpu_seconds": search_cpu,
                "eval_calls": search_eval.calls - calls,
                "eval_seconds": search_eval.seconds - eval_seconds,
                "search_quality": result.quality,
                "search_baseline": result.baseline,
                "heldout_exact": exact_loss,
                "heldout_restored": restored_loss,
                "quality_change": (restored_loss - exact_loss) / abs(exact_loss),
                "ratio_weights": m_in / m_out,
                "ratio_optimizer": o_in / o_out,
                "ratio_whole": report.ratio,
                "estimated_ratio_weights": result.estimated_ratio,
                "bytes_written": report.bytes_out,
                "save_seconds": report.seconds,
            }
        )
        latest = (step, path)
        since_checkpoint = 0.0
    if tracker is not None:
        tracker.close()
    return {
        "final_heldout": w.eval_fn(w.model),
        "train_seconds": train_seconds,
        "restores": restores,
        "steps_redone": redone,
        "checkpoints": checkpoints,
    }


def _rebuild(name: str, seed: int, old: _workloads.Workload) -> _workloads.Workload:
    """A fresh workload (new model and optimizer objects), as after a process restart."""
    del old
    return _workloads.make(name, seed)


def run(mode: str, names: list[str], *, seed: int, tolerance: float, batches: int) -> dict:
    out: dict[str, Any] = {
        "mode": mode,
        "seed": seed,
        "tolerance": tolerance,
        "search_batches": batches,
        "torch_threads": torch.get_num_threads(),
        "workloads": {},
    }
    for name in names:
        steps, every, failures = PLANS[mode][name]
        with tempfile.TemporaryDirectory() as d:
            kw = dict(seed=seed, tolerance=tolerance, search_batches=batches, directory=d)
            comp = run_protocol(name, steps, every, failures, compressed=True, **kw)
            exact = run_protocol(name, steps, every, failures, compressed=False, **kw)
        cps = comp["checkpoints"]
        total_in = sum(c["bytes_written"] * c["ratio_whole"] for c in cps)
        summary = {
            "steps": steps,
            "every": every,
            "failures": failures,
            "final_heldout_ckptzip": comp["final_heldout"],
            "final_heldout_exact": exact["final_heldout"],
            "degradation": (comp["final_heldout"] - exact["final_heldout"])
            / abs(exact["final_heldout"]),
            "overall_ratio_whole": total_in / sum(c["bytes_written"] for c in cps),
            "median_ratio_weights": statistics.median(c["ratio_weights"] for c in cps),
            "median_ratio_whole": statistics.median(c["ratio_whole"] for c in cps),
            "median_search_fraction": statistics.median(c["search_fraction"] for c in cps),
            "eval_calls_first": cps[0]["eval_calls"],
            "median_eval_calls_after_first": statistics.median(
                [c["eval_calls"] for c in cps[1:]] or [0]
            ),
            "search_cpu_seconds_first": cps[0]["search_cpu_seconds"],
            "median_search_cpu_seconds_after_first": statistics.median(
                [c["search_cpu_seconds"] for c in cps[1:]] or [0.0]
            ),
            "max_search_fraction": max(c["search_fraction"] for c in cps),
            "max_search_fraction_after_first": max(
                (c["search_fraction"] for c in cps[1:]), default=None
            ),
            "max_quality_change": max(c["quality_change"] for c in cps),
            "checkpoints_within_tolerance": sum(c["quality_change"] <= tolerance for c in cps),
            "checkpoints": len(cps),
        }
        out["workloads"][name] = {"summary": summary, "ckptzip": comp, "exact": exact}
        _print(name, summary, cps)
    return out


MOMENT_VARIANTS: dict[str, MomentPolicy | None] = {
    "exact": None,
    "m16 pruned-with-weight, v log32 (ExCP rule)": MomentPolicy(16, True, 32),
    "m16, v log32": MomentPolicy(16, False, 32),
    "m8, v log16 (default)": MomentPolicy(),
    "m4, v log8": MomentPolicy(4, False, 8),
    "m4, v log16": MomentPolicy(4, False, 16),
    "m8 own-pruned 50%, v log16": MomentPolicy(first_prune=0.5),
    "m4 own-pruned 50%, v log16": MomentPolicy(4, False, 16, first_prune=0.5),
    "m4 own-pruned 75%, v log16": MomentPolicy(4, False, 16, first_prune=0.75),
    "m16, v linear32": MomentPolicy(16, False, 32, second_log_domain=False),
}
# (steps trained before the checkpoint, steps resumed after it)
OPT_PLANS = {
    "quick": {"mlp": (300, 40), "lm": (200, 30)},
    "full": {"mlp": (600, 100), "lm": (500, 80)},
}


def _resume(name: str, seed: int, state: dict[str, Any], steps: range) -> tuple[list[float], float]:
    w = _workloads.make(name, seed)
    w.model.load_state_dict(state["model"])
    # load_state_dict keeps same-dtype tensors and Adam updates them in place: clone first
    w.optimizer.load_state_dict(_workloads._clone(state["optimizer"]))
    return [w.train_step(s) for s in steps], w.eval_fn(w.model)


def optimizer_ablation(
    name: str, trained: int, after: int, *, seed: int, batches: int, directory: str
) -> dict[str, Any]:
    """Each way of storing the moments, judged by training after a restore.

    Every variant restores the same quantized weights (the search's choice); only the
    optimizer state differs. Reported: the optimizer's bytes and ratio, the largest and mean
    relative gap of the training loss per step against resuming with the exact moments, and
    the held-out loss after ``after`` steps. ``cold`` (moments zeroed, step counters kept)
    shows what the moments are worth.
    """
    w = _workloads.make(name, seed)
    for step in range(trained):
        w.train_step(step)
    state = _workloads._clone(w.state())
    first = search(w.model, eval_fn=_subset_eval(w, batches), optimizer=w.optimizer)
    steps = range(trained, trained + after)
    opt_nbytes = sum(
        t.numel() * t.element_size()
        for per in state["optimizer"]["state"].values()
        for t in per.values()
        if isinstance(t, torch.Tensor)
    )
    rows: dict[str, Any] = {}
    weights: dict[str, Any] | None = None
    reference: list[float] = []
    for label, policy in MOMENT_VARIANTS.items():
        if policy is None:
            # weights as searched, optimizer exact: the reference curve
            cfg = first.config
            keep_exact = (*cfg.exact, "optimizer/*")
            config = dataclasses.replace(cfg, exact=keep_exact)
            scores: dict[str, torch.Tensor] = {}
        else:
            result = search(
                w.model,
                eval_fn=_subset_eval(w, batches),
                optimizer=w.optimizer,
                previous=first,
                moments=policy,
            )
            config = result.config
            scores = save_scores(w.model, result, optimizer=w.optimizer)
        path = os.path.join(directory, f"opt-{name}.ckz")
        report = ckptzip.save(state, path, config=config, scores=scores, overwrite=True)
        loaded = ckptzip.load(path)
        weights = weights or loaded["model"]
        losses, heldout = _resume(
            name, seed, {"model": weights, "optimizer": loaded["optimizer"]}, steps
        )
        if policy is None:
            reference = losses
        gaps = [(a - b) / b for a, b in zip(losses, reference, strict=True)]
        _, o_out = _section_bytes(report, "optimizer/")
        rows[label] = {
            "policy": None if policy is None else dataclasses.asdict(policy),
            "optimizer_bytes": o_out,
            "optimizer_ratio": opt_nbytes / o_out,
            "max_abs_loss_gap": max(abs(g) for g in gaps),
            "mean_loss_gap": sum(gaps) / len(gaps),
            "heldout_after": heldout,
        }
    assert weights is not None
    cold = _workloads._clone(state["optimizer"])
    for per in cold["state"].values():
        for k, v in per.items():
            if k in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                v.zero_()
    losses, heldout = _resume(name, seed, {"model": weights, "optimizer": cold}, steps)
    gaps = [(a - b) / b for a, b in zip(losses, reference, strict=True)]
    rows["cold (moments zeroed)"] = {
        "policy": None,
        "optimizer_bytes": 0,
        "optimizer_ratio": None,
        "max_abs_loss_gap": max(abs(g) for g in gaps),
        "mean_loss_gap": sum(gaps) / len(gaps),
        "heldout_after": heldout,
    }
    print(f"\n== optimizer state, {name}: checkpoint after {trained} steps, {after} steps resumed")
    head = ("variant", "opt bytes", "ratio", "max gap", "mean gap", "held-out")
    print(f"{head[0]:<44} {head[1]:>10} {head[2]:>6} {head[3]:>8} {head[4]:>9} {head[5]:>9}")
    for label, r in rows.items():
        ratio = "-" if r["optimizer_ratio"] is None else f"{r['optimizer_ratio']:.1f}"
        print(
            f"{label:<44} {r['optimizer_bytes']:>10} {ratio:>6} "
            f"{100 * r['max_abs_loss_gap']:>7.2f}% {100 * r['mean_loss_gap']:>+8.2f}% "
            f"{r['heldout_after']:>9.4f}"
        )
    return {"trained": trained, "after": after, "weights": first.to_json(), "variants": rows}


def _fmt_cfg(cfgs: dict[str, Any]) -> str:
    parts = []
    for kind, c in cfgs.items():
        if c is None:
            parts.append(f"{kind}:exact")
        else:
            metric = "s" if c["prune_metric"] == "sensitivity" else "m"
            parts.append(f"{kind}:{c['bins']}b/p{c['prune']:g}{metric}/k{c['protect']:g}")
    return " ".join(parts)


def _print(name: str, s: dict[str, Any], cps: list[dict[str, Any]]) -> None:
    print(
        f"\n== {name}: {s['steps']} steps, checkpoint every {s['every']}, {s['failures']} failures"
    )
    print(
        f"{'step':>6} {'strategy':>13} {'trials':>6} {'evals':>5} {'cpu s':>6} {'search%':>8} "
        f"{'dQ%':>7} {'w-ratio':>8} {'opt-ratio':>9} {'whole':>7}  config"
    )
    for c in cps:
        print(
            f"{c['step']:>6} {c['strategy']:>13} {c['trials']:>6} {c['eval_calls']:>5} "
            f"{c['search_cpu_seconds']:>6.2f} "
            f"{100 * c['search_fraction']:>7.1f}% {100 * c['quality_change']:>6.2f}% "
            f"{c['ratio_weights']:>8.1f} {c['ratio_optimizer']:>9.1f} {c['ratio_whole']:>7.1f}  "
            f"{_fmt_cfg(c['layer_configs'])}"
        )
    print(
        f"final held-out loss: ckptzip {s['final_heldout_ckptzip']:.4f}, exact "
        f"{s['final_heldout_exact']:.4f} ({100 * s['degradation']:+.2f} %); overall whole "
        f"ratio {s['overall_ratio_whole']:.1f}x; median search fraction "
        f"{100 * s['median_search_fraction']:.1f} %"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps and failures (~3 min)")
    ap.add_argument("--workloads", default="mlp,lm", help="comma-separated: mlp, lm, cnn")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tolerance", type=float, default=0.05)
    ap.add_argument(
        "--search-batches",
        type=int,
        default=0,
        help="held-out batches the search evaluates (0: all, the quality the tolerance holds on)",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: fairer timing)")
    ap.add_argument(
        "--optimizer",
        action="store_true",
        help="instead: compare ways of storing the optimizer moments by training after restore",
    )
    ap.add_argument("--out", type=Path, default=None, help="JSON path (default under results/)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    mode = "quick" if args.quick else "full"
    names = [n for n in args.workloads.split(",") if n]
    for n in names:
        if n not in PLANS[mode]:
            PLANS[mode][n] = (400, 100, 2) if mode == "quick" else (1500, 150, 10)
    if args.optimizer:
        result: dict[str, Any] = {"mode": mode, "seed": args.seed, "workloads": {}}
        with tempfile.TemporaryDirectory() as d:
            for n in names:
                trained, after = OPT_PLANS[mode].get(n, (300, 40))
                result["workloads"][n] = optimizer_ablation(
                    n, trained, after, seed=args.seed, batches=args.search_batches, directory=d
                )
        stem = "search-optimizer"
    else:
        result = run(
            mode, names, seed=args.seed, tolerance=args.tolerance, batches=args.search_batches
        )
        stem = "search"
    out = args.out or RESULTS / (f"{stem}-quick.json" if args.quick else f"{stem}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
