"""Bug-finding benchmark: does switching to ``backend="rlcheck"`` find what the default finds?

Every property of ``_bugs_suite.SUITE`` (strict validity through ``assume``/``.filter`` and
one planted bug each) is run ``--runs`` times per backend, each run an ordinary Hypothesis
run at ``max_examples=--budget`` with the example database off (so rlcheck learns from
nothing in every run), its own ``@seed``, health checks suppressed and no shrinking (the
question is whether the bug is hit, not how small it gets). Per property and backend the
table shows in how many runs the bug was found and the mean number of distinct valid inputs
a run tried (by ``repr``; a run stops at its first failure, so runs that find the bug early
try fewer). Etna's shape of comparison: many runs per property, the same budget, counts
side by side. A backend's count is marked ``<`` where it is below the default backend's
beyond the binomial noise of the runs (one-sided Fisher exact test, p < 0.05).

Backends: ``hypothesis`` (the default), ``rlcheck``, and ablations of rlcheck registered
below (``rlcheck-...``) to measure each of its mechanisms as its own row.

Usage (the machine is shared: run it niced and in the background)::

    python benchmarks/bugs.py --quick                    # 5 runs, for development
    python benchmarks/bugs.py                            # 20 runs at max_examples=100
    python benchmarks/bugs.py --budget 1000              # 20 runs at max_examples=1000
    python benchmarks/bugs.py --only parens_depth --backends hypothesis rlcheck
    python benchmarks/bugs.py --compare results/bugs_baseline.json   # earlier rows beside

Results go to ``benchmarks/results/bugs.json`` (``bugs_1000.json`` for ``--budget 1000``)
unless ``--json`` says otherwise; ``--label`` renames the measured rlcheck rows (used to
keep the pre-change backend as ``rlcheck@baseline``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from hypothesis.errors import Unsatisfiable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bugs_suite import SUITE, BugProperty, PlantedBug
from _runs import generate_only, grid

RESULTS = Path(__file__).resolve().parent / "results"


def _variant(name: str, **options: Any) -> None:
    """Register an ablation of the rlcheck backend as backend ``name``."""
    from hypothesis.internal.conjecture.providers import AVAILABLE_PROVIDERS

    from rlcheck.hypothesis.provider import RLCheckProvider

    AVAILABLE_PROVIDERS.setdefault(name, type(name, (RLCheckProvider,), options))


# Registered at import, so worker processes have them too. Each fixes every option it
# measures (default_tail too), so its rows stay reproducible when the defaults move.
_variant("rlcheck-default0", default_share=0.0, default_tail=0.0)
_variant("rlcheck-default25", default_share=0.25, default_tail=0.0)
_variant("rlcheck-default50", default_share=0.5, default_tail=0.0)
_variant("rlcheck-default75", default_share=0.75, default_tail=0.0)
_variant("rlcheck-patience30", default_share=0.5, default_patience=30, default_tail=0.0)
_variant("rlcheck-tail50", default_share=0.0, default_tail=0.5)
_variant("rlcheck-share50-tail50", default_share=0.5, default_patience=30, default_tail=0.5)
_variant("rlcheck-tail25", default_share=0.0, default_tail=0.25)
_variant("rlcheck-nomutate", mutate_share=0.0)  # the default, without mutation
_variant("rlcheck-noconstants", draw_constants=False)  # without Hypothesis's constants
_variant("rlcheck-smallprobe", small_probe_cases=10)  # engine-like small probe cases
_variant("rlcheck-nosimplest", probe_simplest_cases=0)  # the probe before its simplest cases

BY_NAME = {p.name: p for p in SUITE}


def run_once(name: str, backend: str, budget: int, seed: int) -> dict[str, Any]:
    """One Hypothesis run of property ``name`` on ``backend``; what it found and tried."""
    prop: BugProperty = BY_NAME[name]
    valid = 0
    distinct: set[str] = set()

    def record(value: Any) -> None:
        nonlocal valid
        valid += 1
        distinct.add(repr(value))

    run_settings = generate_only(backend, budget, derandomize=False)
    start = time.perf_counter()
    outcome = "passed"
    try:
        prop.make(record, run_settings, seed)()
    except PlantedBug:
        outcome = "found"
    except Unsatisfiable:
        outcome = "unsatisfiable"
    except BaseException as exc:  # an ExceptionGroup of failures, a Flaky replay, ...
        if _contains_bug(exc):
            outcome = "found"
        elif isinstance(exc, KeyboardInterrupt):
            raise
        else:
            outcome = f"error:{type(exc).__name__}"
    return {
        "property": name,
        "backend": backend,
        "seed": seed,
        "outcome": outcome,
        "valid": valid,
        "distinct_valid": len(distinct),
        "seconds": round(time.perf_counter() - start, 3),
    }


def _contains_bug(exc: BaseException) -> bool:
    if isinstance(exc, PlantedBug):
        return True
    inner = getattr(exc, "exceptions", None) or ()
    return any(_contains_bug(e) for e in inner) or (
        exc.__cause__ is not None and _contains_bug(exc.__cause__)
    )


def _run_task(task: tuple[str, str, int, int]) -> dict[str, Any]:
    return run_once(*task)


def measure(
    properties: Iterable[str], backends: list[str], budget: int, runs: int, jobs: int
) -> list[dict[str, Any]]:
    """All runs, properties and backends interleaved so partial results stay comparable."""
    tasks = [(p, b, budget, seed) for p in properties for seed in range(runs) for b in backends]
    if jobs <= 1:
        return [_run_task(t) for t in tasks]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(_run_task, tasks, chunksize=1))


def aggregate(details: list[dict[str, Any]], *, label: str | None = None) -> list[dict[str, Any]]:
    """Per (property, backend): detection count and mean inputs over its runs."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for d in details:
        groups.setdefault((d["property"], d["backend"]), []).append(d)
    rows = []
    for (name, backend), ds in groups.items():
        valid = sum(d["valid"] for d in ds)
        distinct = sum(d["distinct_valid"] for d in ds)
        if label and backend != "hypothesis":
            backend = f"{backend}@{label}"
        rows.append(
            {
                "property": name,
                "kind": BY_NAME[name].kind if name in BY_NAME else "?",
                "backend": backend,
                "runs": len(ds),
                "found": sum(d["outcome"] == "found" for d in ds),
                "outcomes": dict(Counter(d["outcome"] for d in ds)),
                "mean_valid": round(valid / len(ds), 1),
                "mean_distinct_valid": round(distinct / len(ds), 1),
                "distinct_share": round(distinct / valid, 3) if valid else None,
                "mean_seconds": round(sum(d["seconds"] for d in ds) / len(ds), 3),
            }
        )
    return rows


def fisher_less(found_a: int, runs_a: int, found_b: int, runs_b: int) -> float:
    """One-sided Fisher exact p-value that A's detection rate is below B's."""
    total = found_a + found_b
    n = runs_a + runs_b

    def pmf(k: int) -> float:
        return math.comb(runs_a, k) * math.comb(runs_b, total - k) / math.comb(n, total)

    return sum(pmf(k) for k in range(max(0, total - runs_b), found_a + 1))


def table(rows: list[dict[str, Any]]) -> list[str]:
    """The detection table (found/runs and mean distinct valid inputs), one line a property."""
    backends, names, by = grid(rows, "property")
    width = max(20, *(len(b) + 2 for b in backends))
    lines = [
        f"{'property':<16} {'kind':<11}" + "".join(f"{b:>{width}}" for b in backends),
        f"{'':<16} {'':<11}" + "".join(f"{'found  distinct':>{width}}" for _ in backends),
    ]
    totals = Counter[str]()
    for name in names:
        base = by.get((name, "hypothesis"))
        cells = []
        for b in backends:
            r = by.get((name, b))
            if r is None:
                cells.append(f"{'-':>{width}}")
                continue
            totals[b] += r["found"]
            worse = (
                base is not None
                and b != "hypothesis"
                and fisher_less(r["found"], r["runs"], base["found"], base["runs"]) < 0.05
            )
            mark = "<" if worse else " "
            cell = f"{mark}{r['found']:>3}/{r['runs']:<3} {r['mean_distinct_valid']:>7.1f}"
            cells.append(f"{cell:>{width}}")
        kind = next(r["kind"] for r in rows if r["property"] == name)
        lines.append(f"{name:<16} {kind:<11}" + "".join(cells))
    lines.append(
        f"{'total found':<28}" + "".join(f"{totals[b]:>{width - 8}}{'':8}" for b in backends)
    )
    shares = []
    for b in backends:
        valid = sum(r["mean_valid"] * r["runs"] for r in rows if r["backend"] == b)
        distinct = sum(r["mean_distinct_valid"] * r["runs"] for r in rows if r["backend"] == b)
        shares.append(f"{distinct / valid:>{width - 8}.0%}{'':8}" if valid else f"{'-':>{width}}")
    lines.append(f"{'distinct/valid':<28}" + "".join(shares))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=100, help="max_examples of each run")
    parser.add_argument("--runs", type=int, default=None, help="runs per property (20)")
    parser.add_argument("--quick", action="store_true", help="5 runs per property")
    parser.add_argument("--only", nargs="*", default=None, help="property names")
    parser.add_argument("--backends", nargs="*", default=["hypothesis", "rlcheck"])
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--label", default=None, help="suffix for the measured rlcheck rows")
    parser.add_argument("--compare", nargs="*", type=Path, default=[], help="earlier JSON")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    args = parser.parse_args(argv)
    runs = args.runs if args.runs is not None else (5 if args.quick else 20)
    names = args.only or [p.name for p in SUITE]
    unknown = sorted(set(names) - set(BY_NAME))
    if unknown:
        parser.error(f"unknown properties {unknown}; known: {sorted(BY_NAME)}")
    start = time.perf_counter()
    details = measure(names, args.backends, args.budget, runs, args.jobs)
    rows = aggregate(details, label=args.label)
    shown = list(rows)
    for path in args.compare:
        earlier = json.loads(path.read_text())
        if earlier.get("budget") != args.budget:
            print(f"note: {path} was measured at max_examples={earlier.get('budget')}")
        have = {(r["property"], r["backend"]) for r in shown}
        shown += [
            r
            for r in earlier["rows"]
            if r["property"] in names and (r["property"], r["backend"]) not in have
        ]
    print(f"max_examples={args.budget}, {runs} runs per property and backend, database off")
    for line in table(shown):
        print(line)
    elapsed = time.perf_counter() - start
    print(f"({elapsed:.0f} s; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    out = args.json
    if out is None:
        suffix = "" if args.budget == 100 else f"_{args.budget}"
        out = RESULTS / f"bugs{suffix}{'_quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "budget": args.budget,
                "runs": runs,
                "seconds": round(elapsed, 1),
                "cpu_count": os.cpu_count(),
                "load_average": round(os.getloadavg()[0], 2),
                "rows": rows,
                "details": details,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
