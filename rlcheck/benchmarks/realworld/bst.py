"""The binary-search-tree case study (``benchmarks/bst.py``) as a benchmark.

The generator and the check are those of ``benchmarks/bst.py``; the branches traced are
those of its check (``bst_size``), so diverse valid trees here are trees that take
different paths through the check.
"""

from __future__ import annotations

from typing import Any

import bst as _case_study  # benchmarks/bst.py (the package puts benchmarks/ on sys.path)

from realworld import Benchmark


def check(tree: Any) -> bool:
    """The BST invariant holds (values strictly increase in order)."""
    return bool(_case_study.bst_size(tree) >= 0)


def make() -> Benchmark:
    """The benchmark."""
    return Benchmark.traced(
        "bst", _case_study.bst, check, include=[_case_study.__file__],
        traced="benchmarks/bst.py (its check)",
        description="binary search trees, values 0..10, depth <= 4 (RLCheck's case study)",
    )  # fmt: skip
