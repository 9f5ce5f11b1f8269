"""Cost of branch tracing per checked input: ``rlcheck.coverage`` against ``coverage.py``.

For each traced benchmark of ``realworld``, 150 random inputs are checked three ways in
one process (so all three see the same machine load): plain, under
:class:`rlcheck.coverage.BranchCoverage` (``sys.settrace``), and under ``coverage.py``'s
C tracer through its public API, one measurement per input (erase, start, check, stop,
read the arcs), the only way its API gives a branch set per input. ``coverage.py`` is
optional (``pip install coverage``); without it only the first two are measured.

Usage::

    python rlcheck/benchmarks/tracer_cost.py   # writes benchmarks/results/tracer_cost.json
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realworld import load

import rlcheck

TRACED = {"workflow": ["jsonschema", "ruamel.yaml"], "xsd": ["xmlschema"], "pymodule": ["pyflakes"]}
N = 150


def _coverage_py(check: Any, values: list[Any], modules: list[str]) -> tuple[float, int] | None:
    try:
        import coverage
    except ImportError:
        return None
    dirs = [os.path.dirname(importlib.import_module(m).__file__ or "") for m in modules]
    cov = coverage.Coverage(branch=True, data_file=None, source=dirs)
    arcs = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        for value in values:
            cov.erase()
            cov.start()
            check(value)
            cov.stop()
            data = cov.get_data()
            arcs += sum(len(data.arcs(f) or ()) for f in data.measured_files())
        elapsed = time.perf_counter() - start
    return elapsed, arcs


def main() -> int:
    rows = []
    for name, modules in TRACED.items():
        bench = load(name)
        g = rlcheck.Gen(rlcheck.RandomGuide(seed=1))
        values = []
        for _ in range(N):
            g.reset()
            values.append(bench.generator(g))
        bench.measure(values[0])  # warm up (imports, caches)
        start = time.perf_counter()
        for value in values:
            bench.check(value)
        plain = time.perf_counter() - start
        start = time.perf_counter()
        ours = sum(len(bench.measure(value)[1]) for value in values)
        traced = time.perf_counter() - start
        row: dict[str, Any] = {
            "benchmark": name,
            "check_ms": 1e3 * plain / N,
            "settrace_ms": 1e3 * traced / N,
            "settrace_x": traced / plain,
            "settrace_arcs_per_input": ours / N,
        }
        other = _coverage_py(bench.check, values, modules)
        if other is not None:
            row.update(
                coverage_py_ms=1e3 * other[0] / N,
                coverage_py_x=other[0] / plain,
                coverage_py_arcs_per_input=other[1] / N,
            )
        rows.append(row)
        print(
            f"{name:<9} check {row['check_ms']:7.2f} ms  settrace {row['settrace_ms']:7.2f} ms "
            f"({row['settrace_x']:.1f}x, {row['settrace_arcs_per_input']:.0f} arcs)"
            + (
                f"  coverage.py {row['coverage_py_ms']:7.2f} ms ({row['coverage_py_x']:.1f}x, "
                f"{row['coverage_py_arcs_per_input']:.0f} arcs)"
                if other
                else "  coverage.py not installed"
            ),
            flush=True,
        )
    out = Path(__file__).resolve().parent / "results" / "tracer_cost.json"
    out.write_text(
        json.dumps({"load_average": os.getloadavg(), "inputs": N, "rows": rows}, indent=1) + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
