"""End-to-end demo of both libraries on bundled defaults (`make demo`, about 5 minutes on 2 cores).

Each package keeps its own demo in ``<package>/examples/demo.py``; this script runs them in turn,
then the short forms of the benchmarks behind each package's headline claim, so one command shows
what the project can do today:

1. ckptzip's demo: save, inspect, load and resume; a manager's delta chain; a searched
   configuration saved asynchronously while training goes on.
2. ckptzip's fault-tolerant benchmark (``--quick``): three models trained with injected
   failures, restored from each method's checkpoints, side by side with the other methods
   (ckptzip with and without a probe that chooses its optimizer moments by training).
3. rlcheck's demo: an RL-guided campaign against random generation on binary search trees, and a
   Hypothesis test with a strict ``assume()`` on both backends.
4. rlcheck's bug-finding benchmark on two planted bugs, on Hypothesis's backend and on rlcheck's.
5. rlcheck's real-world comparison on SQL queries that SQLite must accept: random, the RL guide,
   the RL guide with its exploration bonus and novelty reward, a coverage-guided greybox guide
   and Hypothesis, a few seconds each.

The benchmarks write their JSON into a temporary directory, never over the committed results.
"""

from __future__ import annotations

import runpy
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _run(title: str, script: Path, *args: str) -> None:
    """Run a benchmark script in its own directory and show what it prints."""
    print(
        f"\n=== {title} ===\n$ python {script.relative_to(ROOT)} {' '.join(args)}",
        flush=True,
    )
    subprocess.run([sys.executable, str(script), *args], cwd=script.parent, check=True)


def _quality_cost(path: Path) -> None:
    """Say in plain words what ckptzip's defaults cost the model in the run just made."""
    import json

    summary = json.loads(path.read_text())["summary"]
    print("\nWhat ckptzip at its defaults cost the model in this short run (one seed):")
    for model, data in summary.items():
        row = data["methods"].get("ckptzip")
        if row is None or "degradation" not in row:
            continue
        jump = row.get("max_restore_jump") or {"median": 0.0}
        print(
            f"  {model}: final held-out loss {row['degradation']['median']:+.1%} against "
            f"exact checkpoints (largest jump right after a restore {jump['median']:+.1%}) "
            f"for {row['ratio']['median']:.1f}x fewer bytes (one seed of a short run: the "
            "exact runs' spread over 3 seeds, the noise floor, is in ckptzip/README.md)"
        )
    _measured_quality_cost()


# The full protocol's measured figures at the defaults (committed; ckptzip/README.md, "Why a
# restore costs quality"), so the demo's short run is read against them.
MEASURED = ROOT / "ckptzip" / "benchmarks" / "results"


def _measured_quality_cost() -> None:
    # the defaults: error feedback along the chain (each delta stores the weights' change against
    # the parent's reconstruction; the first moment's 4 levels fitted to Adam's step)
    defaults = [
        (
            f"fault_tolerant-{m}-ckptzip-feedback-update4.json",
            "3 seeds",
            "ckptzip-feedback",
        )
        for m in ("gru", "lm", "digits", "llm")
    ] + [
        (
            "fault_tolerant-chargru-ckptzip-feedback-update4.json",
            "3 seeds; held out at first, since used to choose the first moment's coding",
            "ckptzip-feedback",
        ),
        (
            "fault_tolerant-bytetf-ckptzip-feedback-update4.json",
            "3 seeds, held out",
            "ckptzip-feedback",
        ),
        # cnn is in the same file, but its near-zero loss makes relative figures meaningless
        (
            "fault_tolerant-cnn-mlp-heldout-feedback.json#mlp",
            "3 seeds, held out",
            "ckptzip",
        ),
    ]
    # the same manager with error_feedback=False (the default before), measured at the time
    without = [
        ("fault_tolerant-lm-error-budget.json", "3 seeds", "ckptzip"),
        ("fault_tolerant-gru-digits-defaults.json", "3 seeds", "ckptzip"),
    ] + [
        (
            f"fault_tolerant-{m}-seed0.json",
            "one seed, a model no default was tuned on",
            "ckptzip",
        )
        for m in ("chargru", "bytetf")
    ]
    print(
        "Measured on the full protocol (10 restores) at the defaults (error feedback along the "
        "chain: each delta stores the weights' change against the parent's reconstruction, the "
        "first moment's levels fitted to Adam's step):"
    )
    _measured(defaults)
    print(
        "The same manager with CheckpointManager(error_feedback=False), the default before "
        "(each delta's weights as bin indices against the parent's; restores' errors add up):"
    )
    _measured(without)


def _measured(runs: list[tuple[str, str, str]]) -> None:
    import json

    for entry, what, method in runs:
        name, _, only = entry.partition(
            "#"
        )  # "file#model": that model of the file only
        path = MEASURED / name
        if not path.exists():
            continue
        data = json.loads(path.read_text())["summary"]
        for model, d in data.items():
            if only and model != only:
                continue
            row = d["methods"][method]
            deg, jump = row["degradation"], row["max_restore_jump"]
            spread = (
                f" [{deg['min']:+.1%}, {deg['max']:+.1%}]"
                + (
                    " (inside"
                    if abs(deg["median"]) <= d["noise_floor"]
                    else " (OUTSIDE"
                )
                + f" the exact runs' own spread over seeds, {d['noise_floor']:.1%})"
                if deg["min"] != deg["max"]
                else ""
            )
            size = (
                f"for {row['ratio']['median']:.1f}x fewer bytes"
                if method in ("ckptzip", "ckptzip-feedback")
                else f"weights {row['weights_ratio']['median']:.1f}x"
            )
            print(
                f"  {model} ({what}): final held-out loss {deg['median']:+.1%} against exact "
                f"checkpoints{spread}, largest jump right after a restore "
                f"{jump['median']:+.1%}, {size}"
            )


def main() -> int:
    out = Path(tempfile.mkdtemp(prefix="demo-results-"))
    print("\n=== ckptzip ===", flush=True)
    runpy.run_path(str(ROOT / "ckptzip" / "examples" / "demo.py"), run_name="__main__")
    _run(
        "ckptzip: fault-tolerant training, every method side by side (--quick)",
        ROOT / "ckptzip" / "benchmarks" / "fault_tolerant.py",
        "--quick",
        "--out",
        str(out / "fault_tolerant.json"),
    )
    _quality_cost(out / "fault_tolerant.json")
    print("\n=== rlcheck ===", flush=True)
    runpy.run_path(str(ROOT / "rlcheck" / "examples" / "demo.py"), run_name="__main__")
    _run(
        "rlcheck: planted bugs found, Hypothesis's backend vs rlcheck's (5 runs each)",
        ROOT / "rlcheck" / "benchmarks" / "bugs.py",
        "--quick",
        "--only",
        "parens_depth",
        "record_keys",
        "--json",
        str(out / "bugs.json"),
    )
    _run(
        "rlcheck: SQL queries SQLite accepts, 4 s per guide",
        ROOT / "rlcheck" / "benchmarks" / "compare.py",
        "--seconds",
        "4",
        "--reps",
        "1",
        "--benchmarks",
        "sql",
        "--guides",
        "random",
        "rl",
        "rl-novelty",
        "greybox",
        "hypothesis",
        "--no-plot",
        "--out",
        str(out / "compare"),
    )
    print(f"\nbenchmark JSON written under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
