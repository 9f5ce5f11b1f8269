"""The README's first example (``## Use it from Hypothesis``), run as written on backends.

A default that pays on ``benchmarks/etna.py`` can still cost where guidance has little to
find: this runs the README's strictly increasing lists (``filter_too_much`` suppressed,
the other health checks on, ``database=None``) a few times per backend and prints each
run's outcome (``ok`` or the exception's name), its test calls and seconds.

Usage::

    python benchmarks/readme_example.py --runs 5 --backends rlcheck rlcheck-ms75
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
import etna  # noqa: F401  (the variants register on import)


def run_once(backend: str) -> tuple[str, int, float]:
    """One run of the example: (outcome, test calls, seconds)."""
    calls = 0

    @settings(
        backend=backend,
        database=None,
        suppress_health_check=[HealthCheck.filter_too_much],
    )
    @given(st.lists(st.integers(0, 30)))
    def test_strictly_increasing_lists(xs: list[int]) -> None:
        nonlocal calls
        calls += 1
        # as the README writes it
        assume(len(xs) >= 3 and all(a < b for a, b in zip(xs, xs[1:], strict=False)))  # noqa: RUF007
        assert sorted(set(xs)) == xs

    start = time.perf_counter()
    try:
        test_strictly_increasing_lists()
        outcome = "ok"
    except Exception as exc:  # a failed health check is the measured outcome
        outcome = type(exc).__name__
    return outcome, calls, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="*", default=["hypothesis", "rlcheck"])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    for backend in args.backends:
        for i in range(args.runs):
            outcome, calls, seconds = run_once(backend)
            print(f"{backend:<16} run {i}: {outcome:<18} {calls:>6} calls {seconds:6.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
