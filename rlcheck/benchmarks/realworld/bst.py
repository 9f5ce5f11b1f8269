"""The binary-search-tree case study (``benchmarks/bst.py``) as a benchmark.

The generator and the check are those of ``benchmarks/bst.py``; the branches traced are
those of its check (``bst_size``), so diverse valid trees here are trees that take
different paths through the check.
"""

from __future__ import annotations

from typing import Any

import bst as _case_study  # benchmarks/bst.py (the package puts benchmarks/ on sys.path)

from realworld import Benchmark
from rlcheck.coverage import BranchCoverage


def check(tree: Any) -> bool:
    """The BST invariant holds (values strictly increase in order)."""
    return bool(_case_study.bst_size(tree) >= 0)


def make() -> Benchmark:
    """The benchmark."""
    return Benchmark(
        name="bst",
        generator=_case_study.bst,
        check=check,
        measure=BranchCoverage([_case_study.__file__]).measure(check),
        description="binary search trees, values 0..10, depth <= 4 (RLCheck's case study)",
        coverage="arcs executed in benchmarks/bst.py (its check)",
    )
