"""Benchmark: does a strict test the default backend passes stay passing under rlcheck?

Hypothesis gives a run up to 458 invalid cases to find its first valid one, then raises
``Unsatisfiable``. Before that first valid case a guide has nothing to learn from, and every
case it spends is one the default backend's engine does not get, so a strict test can turn
``Unsatisfiable`` under ``backend="rlcheck"`` where the default passes. This benchmark runs
each strict test once per seed on each backend, at the test's own ``max_examples``, and
counts the runs that passed, the runs that ended ``Unsatisfiable``, where the first
valid case came (its index among the run's cases), and the test-body calls whose value
(by ``repr``) an earlier call of the same run already had (``repeats``, in the JSON).

Tests: every test of ``_hyp_suite.SUITE`` plus a family of tests whose only valid inputs
are few and far from the strategy's typical draws (lists of booleans, all ``True``, of at
least ``k`` elements: one valid list in ``2**k`` of each length), at ``k`` where the
default's own pass rate goes from certain to flaky.

Usage::

    python benchmarks/satisfiability.py --seeds 40 --json benchmarks/results/satisfiability.json
    python benchmarks/satisfiability.py --seeds 10 --only all_true_6 close_pair
    python benchmarks/satisfiability.py --seeds 40 --only all_true_7 close_pair \
        --backends hypothesis rlcheck rlcheck-hb25 rlcheck-hb10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, assume, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _hyp_suite import SUITE, SuiteTest
from _runs import register_variant

import rlcheck.hypothesis  # noqa: F401  (registers the backends)

# rlcheck handing a run with no valid case back at P % of Hypothesis's give-up limit
# ("rlcheck-hb<P>": RLCheckProvider.hand_back_unsatisfiable; the default: 50 %), and its
# learner at epsilon 0.05 (the default: 0.25)
for _percent in (10, 25):
    register_variant(f"rlcheck-hb{_percent}", hand_back_unsatisfiable=_percent / 100)
register_variant("rlcheck-eps05", epsilon=0.05)
# span duplications before the first valid case in chains of 5 (duplicate_until_valid;
# off by default), as Hypothesis's engine mutates each case it generates
register_variant("rlcheck-dup5", duplicate_until_valid=5)
# the hand-back without the credit (credit_hand_back off: Hypothesis's own backend keeps
# only the half of its give-up budget left, the default before December 2026)
register_variant("rlcheck-nocredit", credit_hand_back=False)


def _all_true(k: int) -> SuiteTest:
    return SuiteTest(
        f"all_true_{k}",
        st.lists(st.booleans()),
        lambda xs: len(xs) >= k and all(xs),
        len,
        "assume",
        f"lists of booleans, all True, at least {k} long",
    )


TESTS: list[SuiteTest] = [*SUITE, _all_true(5), _all_true(6), _all_true(7)]


def run_once(test: SuiteTest, backend: str, run_seed: int, max_examples: int) -> dict[str, Any]:
    """One Hypothesis run of ``test`` on ``backend``: its outcome and first valid case."""
    cases = 0
    valid = 0
    first: int | None = None
    seen: set[str] = set()
    repeats = 0  # body calls whose value an earlier call of the run already had
    strategy = test.strategy.filter(test.valid) if test.how == "filter" else test.strategy

    @seed(run_seed)
    @settings(
        backend=backend,
        database=None,
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def body(value: Any) -> None:
        nonlocal cases, valid, first, repeats
        cases += 1
        shown = repr(value)
        repeats += shown in seen
        seen.add(shown)
        ok = test.valid(value)
        if ok:
            valid += 1
            if first is None:
                first = cases
        assume(ok)

    start = time.process_time()
    try:
        body()
        outcome = "passed"
    except Unsatisfiable:
        outcome = "unsatisfiable"
    except Exception as exc:  # the benchmark reports it; it must not stop the table
        outcome = f"error: {type(exc).__name__}"
    # The counts are the test body's: cases a filter rejects before the body are not in them.
    return {
        "seed": run_seed,
        "outcome": outcome,
        "first_valid": first,
        "valid": valid,
        "body_calls": cases,
        "repeats": repeats,
        "cpu_s": time.process_time() - start,
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    firsts = [r["first_valid"] for r in runs if r["first_valid"] is not None]
    return {
        "runs": len(runs),
        "passed": sum(r["outcome"] == "passed" for r in runs),
        "unsatisfiable": sum(r["outcome"] == "unsatisfiable" for r in runs),
        "errors": sum(r["outcome"].startswith("error") for r in runs),
        "median_first_valid": statistics.median(firsts) if firsts else None,
        "valid": sum(r["valid"] for r in runs),
        "repeats": sum(r.get("repeats", 0) for r in runs),
        "body_calls": sum(r["body_calls"] for r in runs),
        "cpu_s": sum(r["cpu_s"] for r in runs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40, help="runs per test and backend")
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--backends", nargs="+", default=["hypothesis", "rlcheck"])
    parser.add_argument("--only", nargs="+", help="test names (default: all)")
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    args = parser.parse_args(argv)
    tests = [t for t in TESTS if not args.only or t.name in args.only]
    unknown = set(args.only or ()) - {t.name for t in TESTS}
    if unknown:
        parser.error(f"unknown tests {sorted(unknown)}; known: {[t.name for t in TESTS]}")

    rows: list[dict[str, Any]] = []
    header = f"{'test':<14}" + "".join(
        f" | {b + ': passed, unsat, 1st valid, cpu s':<44}" for b in args.backends
    )
    print(header)
    print("-" * len(header))
    for test in tests:
        row: dict[str, Any] = {"test": test.name, "description": test.description}
        cells = []
        # Backends alternate per seed, so a slow spell of the machine hits both alike.
        per_backend: dict[str, list[dict[str, Any]]] = {b: [] for b in args.backends}
        for s in range(args.seeds):
            for backend in args.backends:
                per_backend[backend].append(run_once(test, backend, s, args.max_examples))
        for backend, runs in per_backend.items():
            summary = summarise(runs)
            row[backend] = {"summary": summary, "runs": runs}
            first = summary["median_first_valid"]
            cells.append(
                f"{summary['passed']:>3}/{summary['runs']:<3} {summary['unsatisfiable']:>3}"
                f" {'-' if first is None else f'{first:g}':>6} {summary['cpu_s']:>8.1f}"
                + (f" ({summary['errors']} errors)" if summary["errors"] else "")
            )
        rows.append(row)
        print(f"{test.name:<14}" + "".join(f" | {c:<44}" for c in cells), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        meta = {"seeds": args.seeds, "max_examples": args.max_examples}
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
