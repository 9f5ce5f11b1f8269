"""Benchmark: how often each backend gives each outcome of one test, over seeds.

Some tests end on their first input of a kind, not on a failure: numpy's
``test_array_scalar_ufunc_equivalence`` calls ``pytest.skip`` for one kind of input and
``pytest.xfail`` for another, and whichever comes first decides the run. A skip ends the
run at once; an xfail is a failure to Hypothesis (it shrinks it, seconds), so a suite's
time can hang on that one draw. numpy's own test profile sets ``derandomize=True``, so in
the suite the draw is the same in every run (one per backend): one sample, which says
nothing of either backend. This runs the test's own strategies and body under ``--seeds``
seeds per backend (the database off, the backends interleaved seed by seed) and counts the
outcomes and their CPU seconds.

Usage::

    python benchmarks/outcome_luck.py                      # numpy's test, 100 seeds
    python benchmarks/outcome_luck.py --test pkg.mod:test_name --seeds 40

Results go to ``benchmarks/results/outcome_luck.json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_TEST = "numpy._core.tests.test_scalarmath:test_array_scalar_ufunc_equivalence"


def outcome_of(exc: BaseException | None) -> str:
    """``passed``, ``skipped``, ``xfailed`` or the exception's type name.

    >>> outcome_of(None)
    'passed'
    >>> outcome_of(ValueError())
    'ValueError'
    """
    if exc is None:
        return "passed"
    name = type(exc).__name__
    return {"Skipped": "skipped", "XFailed": "xfailed"}.get(name, name)


def run_once(test: Any, backend: str, run_seed: int) -> tuple[str, float]:
    """The test's strategies and body as one run on ``backend`` with ``@seed(run_seed)``:
    its outcome and CPU seconds."""
    from hypothesis import given, seed, settings

    inner = test.hypothesis.inner_test
    strategies = test.hypothesis._given_kwargs
    base = getattr(test, "_hypothesis_internal_use_settings", None)
    configured = settings(base, backend=backend, database=None)
    rebuilt = seed(run_seed)(configured(given(**strategies)(inner)))
    start = time.process_time()
    error: BaseException | None = None
    try:
        rebuilt()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # pytest's Skipped and XFailed are BaseExceptions
        error = exc
    return outcome_of(error), time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--test", default=DEFAULT_TEST, help="module:function of a @given test")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--backends", nargs="+", default=["hypothesis", "rlcheck"])
    parser.add_argument("--json", type=Path, default=RESULTS / "outcome_luck.json")
    args = parser.parse_args(argv)
    import rlcheck.hypothesis  # noqa: F401  (registers the backends)

    module, _, name = args.test.partition(":")
    test = getattr(importlib.import_module(module), name)
    load = os.getloadavg()[0]
    runs: dict[str, list[tuple[str, float]]] = {b: [] for b in args.backends}
    for run_seed in range(args.seeds):
        for backend in args.backends:
            runs[backend].append(run_once(test, backend, run_seed))
    summary: dict[str, dict[str, Any]] = {}
    print(f"{args.test}: {args.seeds} seeds a backend")
    print(f"{'backend':<12} {'outcome':<10} {'runs':>5} {'CPU s median':>13} {'CPU s sum':>10}")
    for backend, samples in runs.items():
        summary[backend] = {}
        for outcome in sorted({o for o, _ in samples}):
            cpu = [c for o, c in samples if o == outcome]
            summary[backend][outcome] = {
                "runs": len(cpu),
                "cpu_s_median": statistics.median(cpu),
                "cpu_s_sum": sum(cpu),
            }
            print(
                f"{backend:<12} {outcome:<10} {len(cpu):>5} {statistics.median(cpu):>13.3f}"
                f" {sum(cpu):>10.2f}"
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "test": args.test,
        "seeds": args.seeds,
        "summary": summary,
        "runs": runs,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "python": sys.version.split()[0],
    }
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
