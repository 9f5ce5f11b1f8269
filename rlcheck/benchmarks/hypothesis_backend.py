"""Benchmark: Hypothesis's default backend against ``backend="rlcheck"``.

For each test of ``_hyp_suite.SUITE`` and each backend, one Hypothesis run gets the same
wall-clock budget; the test body counts valid inputs, unique valid inputs (by ``repr``)
and unique shapes (the value with its literal values replaced by their kind), and the
engine's statistics count the test cases it ran (speed: test cases per second). The run is
stopped at the deadline by raising a private exception from the test body (generation
phase only, so nothing is shrunk); ``max_examples`` is set out of reach. When Hypothesis
ends a run before the deadline (too many invalid cases, ``Unsatisfiable``), a fresh run
follows, as a user re-running the test would; counts are over all runs of the budget.

Modes (``--modes``):

* ``hypothesis``: Hypothesis's own backend.
* ``rlcheck`` (cold): a fresh policy, no example database.
* ``rlcheck-ancestor``: as ``rlcheck`` with the ancestor-path window (off by default).
* ``rlcheck-warm``: ``--warm-rounds`` runs of the budget in a row sharing a temporary
  example database, so each run loads the policy the previous one saved; the row is the
  last run. (Hypothesis's own backend keeps nothing useful across runs for generation.)

Usage::

    python benchmarks/hypothesis_backend.py --quick          # ~2 s a test and backend
    python benchmarks/hypothesis_backend.py                  # 20 s a test and backend
    python benchmarks/hypothesis_backend.py --only brackets --seconds 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import Flaky, Unsatisfiable
from hypothesis.internal.conjecture.providers import AVAILABLE_PROVIDERS
from hypothesis.statistics import collector

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hyp_suite import SUITE, SuiteTest

from rlcheck.hypothesis import BackendStats, RLCheckProvider, collect_stats


class _AncestorWindowProvider(RLCheckProvider):
    window = "ancestor"


# The other state abstraction, measurable with --modes rlcheck-ancestor.
AVAILABLE_PROVIDERS.setdefault("rlcheck-ancestor", _AncestorWindowProvider)


class _TimeUp(Exception):
    """Raised by the test body once the budget is spent; ends the run."""


def measure(
    test: SuiteTest,
    backend: str,
    seconds: float,
    *,
    database: Any = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """One budgeted run of ``test`` on ``backend``; counts what reached the test body."""
    valid = 0
    unique: set[str] = set()
    shapes: set[str] = set()
    deadline = 0.0
    strategy = test.strategy.filter(test.valid) if test.how == "filter" else test.strategy

    def body(value: Any) -> None:
        nonlocal valid
        if time.monotonic() > deadline:
            raise _TimeUp
        if test.how == "assume":
            assume(test.valid(value))
        valid += 1
        unique.add(repr(value))
        shapes.add(repr(test.shape(value)))

    run = settings(
        backend=backend,
        max_examples=10**9,
        database=database,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        derandomize=seed is not None,
    )(given(strategy)(body))
    # Distinct tests must not share one policy file: key them by name.
    run._hypothesis_internal_database_key = f"rlcheck-bench-{test.name}".encode()  # type: ignore[attr-defined]
    collected = BackendStats()
    # The engine's own count of the test cases it ran (its statistics, as pytest's
    # --hypothesis-show-statistics gets them): one definition for both backends. Cases a
    # backend discards (BackendCannotProceed) are not in it.
    engine_cases = 0

    def note(statistics: Any) -> None:
        nonlocal engine_cases
        engine_cases += len(statistics.get("generate-phase", {}).get("test-cases", ()))

    start = time.monotonic()
    deadline = start + seconds
    runs = gave_up = flaky = 0
    # A run that ends before the budget (Hypothesis gave up on too many invalid inputs,
    # or exhausted a small space) is followed by a fresh one, as a user re-running the
    # test would; the counts are over all runs.
    while time.monotonic() < deadline:
        runs += 1
        try:
            with collect_stats(collected), collector.with_value(note):
                run()
        except _TimeUp:
            break
        except Unsatisfiable:
            gave_up += 1
        except Flaky:
            # Seen once in development after a hand-back; the body is time-dependent by
            # design (the deadline), so count the run and go on rather than crash.
            flaky += 1
        if seed is not None:
            break
    elapsed = min(time.monotonic(), deadline) - start
    stats = next(iter(collected.as_dict().values()), None)
    return {
        "test": test.name,
        "backend": backend,
        "seconds": round(elapsed, 2),
        "valid": valid,
        "unique_valid": len(unique),
        "unique_shapes": len(shapes),
        "runs": runs,
        "unsatisfiable_runs": gave_up,
        "flaky_runs": flaky,
        "provider_cases": stats.cases if stats else None,
        "engine_cases": engine_cases,
        "cases_per_s": round(engine_cases / elapsed, 1) if elapsed > 0 else None,
        "handed_back": stats.handed_back if stats else None,
    }


def run_suite(
    seconds: float, *, only: list[str] | None, warm_rounds: int, modes: list[str]
) -> list[dict[str, Any]]:
    rows = []
    for test in SUITE:
        if only and test.name not in only:
            continue
        if "hypothesis" in modes:
            rows.append(measure(test, "hypothesis", seconds))
            _print_row(rows[-1])
        for mode in ("rlcheck", "rlcheck-ancestor"):
            if mode in modes:
                rows.append(measure(test, mode, seconds))
                _print_row(rows[-1])
        if "warm" in modes and warm_rounds > 0:
            with tempfile.TemporaryDirectory() as tmp:
                db = DirectoryBasedExampleDatabase(tmp)
                for _ in range(warm_rounds):
                    row = measure(test, "rlcheck", seconds, database=db)
                row["backend"] = f"rlcheck-warm{warm_rounds}"
                rows.append(row)
                _print_row(rows[-1])
    return rows


def _print_row(row: dict[str, Any]) -> None:
    print(
        f"{row['test']:<12} {row['backend']:<14} {row['seconds']:>6.1f}s "
        f"valid {row['valid']:>7} unique {row['unique_valid']:>7} "
        f"shapes {row['unique_shapes']:>6} cases {row['provider_cases'] or '-':>7} "
        f"cases/s {row['cases_per_s'] or 0:>7.0f} "
        f"runs {row['runs']:>3} "
        f"(unsatisfiable {row['unsatisfiable_runs']})"
        + (" (handed back)" if row.get("handed_back") else ""),
        flush=True,
    )


def summarize(rows: list[dict[str, Any]]) -> list[str]:
    """Per test: rlcheck's unique valid inputs, and its test cases per second, over the
    default backend's."""
    lines = []
    by_test: dict[str, dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_test.setdefault(row["test"], {})[row["backend"]] = row
    for name, by_backend in by_test.items():
        base = by_backend.get("hypothesis")
        if base is None:
            continue
        parts = []
        for backend, row in by_backend.items():
            if backend == "hypothesis":
                continue
            ratio = row["unique_valid"] / max(base["unique_valid"], 1)
            speed = (row["cases_per_s"] or 0) / max(base["cases_per_s"] or 0, 1e-9)
            parts.append(f"{backend} {ratio:.1f}x (cases/s {speed:.2f}x)")
        lines.append(f"{name:<12} default unique {base['unique_valid']:>7}: " + ", ".join(parts))
    return lines


def _load_average() -> float | None:
    """The host's 1-minute load average (other processes competing for its cores)."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 s a test and backend")
    parser.add_argument("--seconds", type=float, default=None, help="budget per run")
    parser.add_argument("--only", nargs="*", default=None, help="test names to run")
    parser.add_argument("--warm-rounds", type=int, default=None)
    parser.add_argument(
        "--modes",
        nargs="*",
        default=["hypothesis", "rlcheck", "warm"],
        help="any of: hypothesis rlcheck rlcheck-ancestor warm",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (2.0 if args.quick else 20.0)
    warm = args.warm_rounds if args.warm_rounds is not None else (2 if args.quick else 3)
    load_at_start = _load_average()
    rows = run_suite(seconds, only=args.only, warm_rounds=warm, modes=args.modes)
    print()
    for line in summarize(rows):
        print(line)
    if args.json is not None:
        document = {
            "command": " ".join(["hypothesis_backend.py", *(argv or sys.argv[1:])]),
            "seconds": seconds,
            # Wall-clock budgets: what else ran on the host matters; say what it was.
            "cpu_count": os.cpu_count(),
            "load_average_1min": {"start": load_at_start, "end": _load_average()},
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "rows": rows,
        }
        args.json.write_text(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
