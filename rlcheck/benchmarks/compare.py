"""Every guide side by side on the real-world benchmarks (RLCheck's evaluation, in Python).

For each benchmark of ``realworld`` and each guide, ``--reps`` runs of the same wall-clock
budget. A run records each new valid input (distinct by its text or value) with the time
it was found. Afterwards, outside the budget, each run's valid inputs are replayed in
order through the benchmark's ``measure`` (the check under branch tracing, see
``rlcheck.coverage``), so the black-box guides run uninstrumented and every guide is
measured the same way. Metrics over time, as in the paper:

* unique valid inputs;
* diverse valid inputs: distinct branch sets among the valid inputs;
* branches covered by valid inputs (the union of those sets).

Guides (``--guides``):

* ``random``: :class:`rlcheck.RandomGuide`, the core API.
* ``rl``: :class:`rlcheck.RLGuide` (ancestor path with labels, k = 4), the core API.
* ``rl-restart``: :class:`rlcheck.guides.RestartingRLGuide`, the improved RL row.
* ``greybox``: :class:`rlcheck.guides.GreyboxGuide`, fed the branches of every run (its
  tracing cost is inside its budget, as it would be for a real greybox fuzzer).
* ``hypothesis``: the generator as a Hypothesis strategy on Hypothesis's own backend,
  invalid inputs rejected with ``assume``.
* ``rl-hypothesis``: the same test on ``backend="rlcheck"``; the policy is kept in a
  temporary example database for the whole run, so a restart after ``Unsatisfiable``
  keeps what was learned.

HypoFuzz is not a row (see the README): its documented interface is ``hypothesis fuzz``,
which collects tests with pytest and runs them in worker processes next to a dashboard;
driving one test under a budget from a script takes its internal per-test fuzzer class.

Usage (from the repository root)::

    python rlcheck/benchmarks/compare.py --quick              # 10 s a run, 5 runs
    python rlcheck/benchmarks/compare.py                      # 60 s a run, 5 runs
    python rlcheck/benchmarks/compare.py --benchmarks sql --guides random rl --seconds 2 --reps 1

It prints a table (median and interquartile range over the runs, and each guide over
random), and writes ``benchmarks/results/compare[_quick].json``, ``.md`` and one PNG per
benchmark (``compare[_quick]_<benchmark>.png``: the three metrics over time).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky, Unsatisfiable
from realworld import BENCHMARKS, Benchmark, load, strategy

import rlcheck
from rlcheck.guides import GreyboxGuide, RestartingRLGuide

GUIDES = ("random", "rl", "rl-restart", "greybox", "hypothesis", "rl-hypothesis")
METRICS = ("unique_valid", "diverse_valid", "branches")
GRID = 20
"""Points of the time series (plus t = 0)."""
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Run:
    """One budgeted run: the new valid inputs in the order found, with their times."""

    guide: str
    seed: int
    seconds: float
    trials: int
    found: list[tuple[float, Any]]
    note: str = ""


class _TimeUp(Exception):
    """Raised from a Hypothesis test body once the budget is spent."""


def _recorder(
    check: Callable[[Any], bool], found: list[tuple[float, Any]]
) -> tuple[Callable[[Any], bool], Callable[[], None], list[int]]:
    """``check`` that also logs each new valid input with its time since ``start()``."""
    seen: set[Hashable] = set()
    start = [0.0]
    calls = [0]

    def recorded(value: Any) -> bool:
        calls[0] += 1
        ok = check(value)
        if ok and value not in seen:
            seen.add(value)
            found.append((time.perf_counter() - start[0], value))
        return ok

    def begin() -> None:
        start[0] = time.perf_counter()

    return recorded, begin, calls


def run_core(bench: Benchmark, guide_name: str, seconds: float, seed: int) -> Run:
    """A run through :func:`rlcheck.run`."""
    found: list[tuple[float, Any]] = []
    guide: rlcheck.Guide
    check: Callable[[Any], bool] = bench.check
    if guide_name == "random":
        guide = rlcheck.RandomGuide(seed=seed)
    elif guide_name == "rl":
        guide = rlcheck.RLGuide(seed=seed)
    elif guide_name == "rl-restart":
        guide = RestartingRLGuide(seed=seed)
    elif guide_name == "greybox":
        guide = GreyboxGuide(seed=seed)
        check = guide.observe(bench.measure)
    else:
        raise ValueError(guide_name)
    recorded, begin, _ = _recorder(check, found)
    begin()
    result = rlcheck.run(bench.generator, recorded, guide=guide, seconds=seconds, max_failures=0)
    note = f"restarts {guide.restarts}" if isinstance(guide, RestartingRLGuide) else ""
    if isinstance(guide, GreyboxGuide):
        note = f"corpus {len(guide.corpus)}"
    return Run(guide_name, seed, result.seconds, result.trials, found, note)


def run_hypothesis(bench: Benchmark, backend: str, seconds: float, seed: int) -> Run:
    """A run of a ``@given`` test over the benchmark's strategy on ``backend``."""
    found: list[tuple[float, Any]] = []
    recorded, begin, calls = _recorder(bench.check, found)
    deadline = 0.0

    def body(value: Any) -> None:
        if time.perf_counter() > deadline:
            raise _TimeUp
        assume(recorded(value))

    runs = gave_up = 0
    with tempfile.TemporaryDirectory() as tmp:
        test = settings(
            backend=backend,
            max_examples=10**9,
            database=DirectoryBasedExampleDatabase(tmp),
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )(given(strategy(bench.generator))(body))
        test._hypothesis_internal_database_key = f"compare-{bench.name}".encode()  # type: ignore[attr-defined]
        begin()
        start = time.perf_counter()
        deadline = start + seconds
        # A run Hypothesis ends early (Unsatisfiable: too many invalid inputs) is followed
        # by a fresh one, as a user re-running the test would.
        while time.perf_counter() < deadline:
            runs += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    test()
            except _TimeUp:
                break
            except Unsatisfiable:
                gave_up += 1
            except Flaky:  # the body depends on the clock by design
                pass
        elapsed = min(time.perf_counter(), deadline) - start
    name = "hypothesis" if backend == "hypothesis" else "rl-hypothesis"
    note = f"hypothesis runs {runs}, unsatisfiable {gave_up}"
    return Run(name, seed, elapsed, calls[0], found, note)


def run_once(bench: Benchmark, guide: str, seconds: float, seed: int) -> Run:
    if guide == "hypothesis":
        return run_hypothesis(bench, "hypothesis", seconds, seed)
    if guide == "rl-hypothesis":
        return run_hypothesis(bench, "rlcheck", seconds, seed)
    return run_core(bench, guide, seconds, seed)


def series(bench: Benchmark, run: Run, budget: float) -> dict[str, list[int]]:
    """The three metrics at ``GRID + 1`` evenly spaced times, by replaying the valid inputs."""
    times = [budget * i / GRID for i in range(GRID + 1)]
    out: dict[str, list[int]] = {m: [] for m in METRICS}
    sets: set[frozenset[Hashable]] = set()
    covered: set[Hashable] = set()
    i = 0
    found = run.found
    for t in times:
        while i < len(found) and found[i][0] <= t:
            _, branches = bench.measure(found[i][1])
            sets.add(branches)
            covered.update(branches)
            i += 1
        out["unique_valid"].append(i)
        out["diverse_valid"].append(len(sets))
        out["branches"].append(len(covered))
    # Inputs found in the last instant of the budget (timer granularity) count at the end.
    while i < len(found):
        _, branches = bench.measure(found[i][1])
        sets.add(branches)
        covered.update(branches)
        i += 1
    out["unique_valid"][-1] = i
    out["diverse_valid"][-1] = len(sets)
    out["branches"][-1] = len(covered)
    return out


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per benchmark and guide: median and quartiles of each final metric, and zero-valid runs."""
    table: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in records:
        row = table.setdefault(rec["benchmark"], {}).setdefault(
            rec["guide"], {"finals": {m: [] for m in METRICS}, "zero_valid_runs": 0, "trials": []}
        )
        for m in METRICS:
            row["finals"][m].append(rec["series"][m][-1])
        row["zero_valid_runs"] += rec["series"]["unique_valid"][-1] == 0
        row["trials"].append(rec["trials"])
    for by_guide in table.values():
        for row in by_guide.values():
            for m in METRICS:
                q1, med, q3 = _quartiles([float(v) for v in row["finals"][m]])
                row[m] = {"median": med, "q1": q1, "q3": q3}
            row["median_trials"] = statistics.median(row["trials"])
    return table


def _ratio(value: float, base: float) -> str:
    if base <= 0:
        return "∞" if value > 0 else "–"
    return f"{value / base:.1f}x"


def markdown(table: dict[str, dict[str, dict[str, Any]]], command: str) -> str:
    lines = [
        f"`{command}`",
        "",
        "| benchmark | guide | unique valid | × random | diverse valid | × random | "
        "branches by valid | × greybox | runs with 0 valid | trials |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for bench, by_guide in table.items():
        base = by_guide.get("random")
        grey = by_guide.get("greybox")
        for guide, row in by_guide.items():

            def cell(m: str, row: dict[str, Any] = row) -> str:
                s = row[m]
                return f"{s['median']:.0f} [{s['q1']:.0f}–{s['q3']:.0f}]"

            def vs(m: str, other: dict[str, Any] | None, row: dict[str, Any] = row) -> str:
                return _ratio(row[m]["median"], other[m]["median"]) if other else "–"

            lines.append(
                f"| {bench} | {guide} | {cell('unique_valid')} | {vs('unique_valid', base)} | "
                f"{cell('diverse_valid')} | {vs('diverse_valid', base)} | {cell('branches')} | "
                f"{vs('branches', grey)} | {row['zero_valid_runs']}/{len(row['trials'])} | "
                f"{row['median_trials']:.0f} |"
            )
    lines.append("")
    lines.append("Median [interquartile range] over the runs, at the end of the budget.")
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], budget: float, path_for: Callable[[str], Path]) -> None:
    """One PNG per benchmark: each metric over time, median line and interquartile band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    times = [budget * i / GRID for i in range(GRID + 1)]
    for bench in dict.fromkeys(r["benchmark"] for r in records):
        fig, axes = plt.subplots(1, len(METRICS), figsize=(5 * len(METRICS), 4))
        for ax, metric in zip(axes, METRICS, strict=True):
            for guide in dict.fromkeys(r["guide"] for r in records if r["benchmark"] == bench):
                runs = [
                    r["series"][metric]
                    for r in records
                    if r["benchmark"] == bench and r["guide"] == guide
                ]
                stats = [_quartiles([float(run[i]) for run in runs]) for i in range(GRID + 1)]
                line = ax.plot(times, [s[1] for s in stats], label=guide)[0]
                ax.fill_between(
                    times, [s[0] for s in stats], [s[2] for s in stats],
                    alpha=0.2, color=line.get_color(),
                )  # fmt: skip
            ax.set_title(f"{bench}: {metric.replace('_', ' ')}")
            ax.set_xlabel("seconds")
            ax.set_yscale("symlog")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path_for(bench), dpi=80)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 s a run")
    parser.add_argument("--seconds", type=float, default=None, help="budget per run (60)")
    parser.add_argument("--reps", type=int, default=5, help="runs per guide and benchmark")
    parser.add_argument("--benchmarks", nargs="*", default=list(BENCHMARKS), choices=BENCHMARKS)
    parser.add_argument("--guides", nargs="*", default=list(GUIDES), choices=GUIDES)
    parser.add_argument("--out", type=Path, default=None, help="output prefix")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (10.0 if args.quick else 60.0)
    prefix = args.out or RESULTS / ("compare_quick" if args.quick else "compare")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    command = "python rlcheck/benchmarks/compare.py " + " ".join(argv or sys.argv[1:])

    records: list[dict[str, Any]] = []
    for name in args.benchmarks:
        bench = load(name)
        bench.measure(bench.generator(rlcheck.Gen(rlcheck.RandomGuide(seed=0))))  # warm up
        for guide in args.guides:
            for rep in range(args.reps):
                run = run_once(bench, guide, seconds, seed=rep)
                started = time.perf_counter()
                s = series(bench, run, seconds)
                replay = time.perf_counter() - started
                records.append(
                    {
                        "benchmark": name,
                        "guide": run.guide,
                        "seed": rep,
                        "seconds": round(run.seconds, 3),
                        "trials": run.trials,
                        "series": s,
                        "note": run.note,
                        "replay_seconds": round(replay, 2),
                    }
                )
                print(
                    f"{name:<9} {run.guide:<14} rep {rep} trials {run.trials:>7} "
                    f"unique valid {s['unique_valid'][-1]:>6} diverse {s['diverse_valid'][-1]:>5} "
                    f"branches {s['branches'][-1]:>5}  {run.note} (replay {replay:.1f} s)",
                    flush=True,
                )
    table = summarize(records)
    text = markdown(table, command)
    print()
    print(text)
    meta = {
        "command": command,
        "seconds": seconds,
        "reps": args.reps,
        "grid": [seconds * i / GRID for i in range(GRID + 1)],
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average": os.getloadavg(),
        "coverage": {name: load(name).coverage for name in args.benchmarks},
    }
    summary = {
        b: {
            g: {k: v for k, v in row.items() if k not in ("finals", "trials")}
            for g, row in t.items()
        }
        for b, t in table.items()
    }
    Path(f"{prefix}.json").write_text(
        json.dumps({**meta, "summary": summary, "runs": records}, indent=1) + "\n"
    )
    Path(f"{prefix}.md").write_text(text)
    if not args.no_plot:
        plot(records, seconds, lambda bench: Path(f"{prefix}_{bench}.png"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
