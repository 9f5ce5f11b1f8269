"""Benchmark: ``rlcheck fuzz`` with 1, 2 and 4 worker processes.

Two one-test suites, each written to a fresh temporary project per session (so each
session starts with an empty example database), run by ``fuzz()`` for ``--seconds`` on the
``rlcheck-fast`` backend (the fuzz default):

* ``sorted``: a strict validity rule (a list of at least 4 strictly increasing integers
  0..20, by ``assume``); the figure is unique valid inputs per second over all workers
  (distinct choice sequences over all workers, from the session's report);
* ``bug``: a planted bug behind a learned choice (``a == 5`` by ``assume``, failing when
  ``b == 11 and n % 13 == 3``: about 1 in 208 of the cases that pass the ``assume``); the
  figure is the time to its first failure.

Both figures count from the moment the first worker had collected the tests (process start,
imports and collection take seconds on a loaded machine; that moment is ``ready_s`` in the
JSON). Sessions are interleaved (rep by rep, worker count by worker count) so that each
worker count sees the same drift of the machine's load.

Usage::

    python benchmarks/fuzz_scale.py --seconds 40 --reps 2 --json results/fuzz_scale.json

On a machine with fewer cores than workers, the workers share the cores: the figures
then say what oversubscription costs, not what more machines would give.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from rlcheck.fuzz import fuzz

SUITES = {
    "sorted": """
from hypothesis import assume, given, strategies as st


@given(st.lists(st.integers(0, 20), max_size=10))
def test_sorted(xs):
    assume(len(xs) >= 4 and all(a < b for a, b in zip(xs, xs[1:])))
""",
    "bug": """
from hypothesis import assume, given, strategies as st


@given(st.integers(0, 15), st.integers(0, 15), st.integers(0, 10**6))
def test_bug(a, b, n):
    assume(a == 5)
    assert not (b == 11 and n % 13 == 3)
""",
}


@contextlib.contextmanager
def project(suite: str) -> Iterator[Path]:
    """A fresh directory holding one suite, as the working directory."""
    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="rlcheck-fuzz-scale-") as root:
        Path(root, "test_suite.py").write_text(SUITES[suite])
        os.chdir(root)
        try:
            yield Path(root)
        finally:
            os.chdir(here)


def session(suite: str, workers: int, seconds: float) -> dict[str, Any]:
    with project(suite):
        report = fuzz(["test_suite.py"], workers=workers, seconds=seconds)
    test = next(iter(report.tests.values()), None)
    ready = report.ready_s or 0.0
    working = max(report.elapsed - ready, 1e-9)
    first = test.first_failure_s if test is not None else None
    return {
        "suite": suite,
        "workers": workers,
        "elapsed": round(report.elapsed, 2),
        "ready_s": ready,
        "fuzzing_s": round(working, 2),
        "cases": report.totals()["cases"],
        "unique_valid": test.unique_valid if test else 0,
        # each worker's own unique valid inputs, summed (counts cross-worker repeats)
        "worker_unique_valid": test.worker_unique_valid if test else 0,
        "unique_valid_per_s": round((test.unique_valid if test else 0) / working, 2),
        "first_failure_after_ready_s": None if first is None else round(first - ready, 2),
        "errors": report.errors,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--suites", nargs="+", choices=sorted(SUITES), default=["sorted", "bug"])
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows = []
    for rep in range(args.reps):  # interleaved: each worker count sees the same load drift
        for suite in args.suites:
            for n in args.workers:
                row = session(suite, n, args.seconds)
                row["rep"] = rep
                rows.append(row)
                print(
                    f"rep {rep} {suite} workers {n}: unique valid {row['unique_valid']} "
                    f"({row['unique_valid_per_s']}/s), first failure "
                    f"{row['first_failure_after_ready_s']} s, {row['cases']} cases in "
                    f"{row['fuzzing_s']} s (ready at {row['ready_s']} s)"
                    + (f", errors {row['errors']}" if row["errors"] else ""),
                    flush=True,
                )
    print()
    print("| workers | unique valid/s, `sorted` | first failure, s, `bug` | cases/s, both |")
    print("|---:|---:|---:|---:|")
    for n in args.workers:
        mine = [r for r in rows if r["workers"] == n]
        rates = [r["unique_valid_per_s"] for r in mine if r["suite"] == "sorted"]
        firsts = [r["first_failure_after_ready_s"] for r in mine if r["suite"] == "bug"]
        speed = [r["cases"] / max(r["fuzzing_s"], 1e-9) for r in mine]
        shown = ", ".join("none" if f is None else f"{f:.1f}" for f in firsts)
        median = f"{statistics.median(rates):.1f} " if rates else ""
        print(
            f"| {n} | {median}({', '.join(map(str, rates))}) | {shown} "
            f"| {statistics.median(speed):,.0f} |"
        )
    if args.json:
        load = os.getloadavg() if hasattr(os, "getloadavg") else None
        args.json.write_text(
            json.dumps(
                {
                    "seconds": args.seconds,
                    "cpus": os.cpu_count(),
                    "loadavg_end": load,
                    "rows": rows,
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
