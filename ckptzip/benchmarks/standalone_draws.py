"""Benchmark: files standing alone over many draws of their stochastic rounding.

One run of ``fault_tolerant.py``'s protocol (10 failures, each restored from the latest plain
``ckptzip.save`` file) is one draw: the final loss of a small model after 10 noisy restores
varies from draw to draw by more than the effect being measured (``chargru``'s seed 1 ended
+5.96 % with the library's draws and +0.03 % with others). So every (model, seed) is run
under several draws (``--salts``: ``fault_tolerant.salted_rounding``, salt 0 the library's
own), with each method, against the exact run of the same seed (``--exact-cache``). Per
model and method the table gives, over every seed and draw, the final loss against the exact
run's (mean, median, largest), how many runs ended more than 1 % and 2 % above it, the
largest jump right after a restore, and the ratio.

Methods: ``ckptzip-file`` (the default, a standalone file's levels), ``ckptzip-file-quant``
(``standalone=None``: 16 levels everywhere, the default before), ``ckptzip-file-nearest``;
``--standalone W,M,V,FIT`` adds ``ckptzip-file`` at other levels (``StandaloneConfig``).

Run ``python benchmarks/standalone_draws.py --models chargru --salts 0 1 2 3 4 5
--exact-cache DIR`` (36 runs, about 6 minutes on a shared 2-core machine); ``--table JSON``
prints a results file again. Writes ``benchmarks/results/standalone_draws-<models>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import fault_tolerant as ft
import torch

from ckptzip import StandaloneConfig

METHODS = ("ckptzip-file", "ckptzip-file-quant")


def row(r: dict[str, Any], exact: dict[str, Any], salt: int) -> dict[str, Any]:
    """One run's figures against the exact run of its seed."""
    jumps = ft._jumps(r, exact)
    return {
        "model": r["model"],
        "seed": r["seed"],
        "salt": salt,
        "method": r["method"],
        "final_loss": r["final_loss"],
        "exact_final_loss": exact["final_loss"],
        "gap": (r["final_loss"] - exact["final_loss"]) / abs(exact["final_loss"]),
        "max_jump": max(jumps) if jumps else None,
        "ratio": ft.overall_ratio(r["saves"]),
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for key in dict.fromkeys((r["model"], r["method"]) for r in rows):
        mine = [r for r in rows if (r["model"], r["method"]) == key]
        gaps = [r["gap"] for r in mine]
        out.append(
            {
                "model": key[0],
                "method": key[1],
                "runs": len(mine),
                "mean": statistics.mean(gaps),
                "median": statistics.median(gaps),
                "max": max(gaps),
                "above_1pct": sum(g > 0.01 for g in gaps),
                "above_2pct": sum(g > 0.02 for g in gaps),
                "max_jump": max(r["max_jump"] for r in mine if r["max_jump"] is not None),
                "ratio": statistics.median(r["ratio"] for r in mine),
            }
        )
    return out


def print_table(summary: list[dict[str, Any]]) -> None:
    print(
        f"\n{'model':<9}{'method':<21}{'runs':>5}{'mean':>8}{'median':>8}{'max':>8}"
        f"{'>1%':>5}{'>2%':>5}{'jump max':>9}{'ratio':>8}"
    )
    for s in summary:
        print(
            f"{s['model']:<9}{s['method']:<21}{s['runs']:>5}{s['mean']:>+8.2%}"
            f"{s['median']:>+8.2%}{s['max']:>+8.2%}{s['above_1pct']:>5}{s['above_2pct']:>5}"
            f"{s['max_jump']:>+9.2%}{s['ratio']:>7.2f}x"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["chargru"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--salts", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=ft.FILE_METHODS)
    ap.add_argument(
        "--standalone",
        nargs="+",
        default=[],
        metavar="W,M,V,FIT",
        help="also ckptzip-file at these StandaloneConfig levels (weight_bins, first_bins, "
        "second_bins, first_fit), each a method of its own, as ckptzip-file[32,8,4,update]",
    )
    ap.add_argument("--exact-cache", default=None, help="fault_tolerant.py's --exact-cache")
    ap.add_argument("--out", default=None)
    ap.add_argument("--table", default=None, metavar="JSON", help="print a results file")
    args = ap.parse_args(argv)
    if args.table:
        print_table(json.loads(Path(args.table).read_text())["summary"])
        return 0
    plans = {**ft.PLANS["full"], **ft.HELD_OUT_PLANS["full"]}
    torch.set_num_threads(1)
    out = _report.results_path(args.out, f"standalone_draws-{'-'.join(args.models)}.json")
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    variants: list[tuple[str, str, StandaloneConfig | None]] = [(m, m, None) for m in args.methods]
    for spec in args.standalone:
        w, m, v, fit = spec.split(",")
        levels = StandaloneConfig(int(w), int(m), fit, int(v))
        variants.append(("ckptzip-file", f"ckptzip-file[{spec}]", levels))
    for model in args.models:
        plan = plans[model]
        for seed in args.seeds:
            if args.exact_cache:
                exact = ft.cached_exact(Path(args.exact_cache), model, seed, plan)
            else:
                exact = ft.run(model, seed, "exact", plan)
            for salt in args.salts:
                for method, label, alone in variants:
                    with ft.salted_rounding(salt):
                        r = ft.run(model, seed, method, plan, file_standalone=alone)
                    rows.append(row({**r, "method": label}, exact, salt))
                    x = rows[-1]
                    print(
                        f"[{time.perf_counter() - t0:6.0f}s] {model} seed {seed} salt {salt} "
                        f"{label:<20} {x['gap']:+.2%} (jump max {x['max_jump']:+.2%}) "
                        f"{x['ratio']:.2f}x",
                        flush=True,
                    )
                    _write(out, args, variants, rows, t0)  # after every run: nothing lost
    print_table(summarize(rows))
    print(f"\nwrote {out}")
    return 0


def _write(
    out: Path,
    args: argparse.Namespace,
    variants: list[tuple[str, str, StandaloneConfig | None]],
    rows: list[dict[str, Any]],
    t0: float,
) -> None:
    plans = {**ft.PLANS["full"], **ft.HELD_OUT_PLANS["full"]}
    meta = {
        "models": args.models,
        "seeds": args.seeds,
        "salts": args.salts,
        "methods": [label for _, label, _ in variants],
        "plans": {m: plans[m] for m in args.models},
        "seconds": time.perf_counter() - t0,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "summary": summarize(rows), "runs": rows, "machine": _report.machine()}
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    raise SystemExit(main())
