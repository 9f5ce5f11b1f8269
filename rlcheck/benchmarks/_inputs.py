"""Input domains both benchmark suites use: one definition of each strategy and rule.

``_bugs_suite`` (planted bugs) and ``_hyp_suite`` (diversity) test the same kinds of
input; what a valid binary search tree, record or identifier is lives here, once.
"""

from __future__ import annotations

import keyword
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "RECORD_KEYS",
    "Tree",
    "bst_ok",
    "identifier_ok",
    "record_ok",
    "records",
    "tree_size",
    "trees",
]

# -- binary search trees (the RLCheck paper's Python case study) ---------------------------

Tree = Any  # None | tuple[Tree, int, Tree]


def bst_ok(t: Tree, lo: int = -1, hi: int = 11) -> bool:
    """Whether ``t`` is a binary search tree with keys strictly between ``lo`` and ``hi``."""
    if t is None:
        return True
    left, v, right = t
    return lo < v < hi and bst_ok(left, lo, v) and bst_ok(right, v, hi)


def tree_size(t: Tree) -> int:
    """Number of nodes."""
    return 0 if t is None else 1 + tree_size(t[0]) + tree_size(t[2])


trees = st.recursive(
    st.none(),
    lambda children: st.tuples(children, st.integers(0, 10), children),
    max_leaves=20,
)

# -- records with required keys ------------------------------------------------------------

RECORD_KEYS = ["id", "name", "age", "email", "tags", "admin", "score", "city"]
records = st.dictionaries(
    st.sampled_from(RECORD_KEYS),
    st.one_of(st.integers(0, 150), st.text(max_size=6), st.booleans()),
    max_size=8,
)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def record_ok(d: dict[str, Any]) -> bool:
    """Required keys: ``id`` an int, ``name`` a non-empty string, ``age`` an int in 18..99."""
    return (
        _is_int(d.get("id"))
        and isinstance(d.get("name"), str)
        and len(d["name"]) > 0
        and _is_int(d.get("age"))
        and 18 <= d["age"] <= 99
    )


# -- identifiers ---------------------------------------------------------------------------


def identifier_ok(s: str) -> bool:
    """An ASCII Python identifier of at least 3 characters that is not a keyword."""
    return len(s) >= 3 and s.isascii() and s.isidentifier() and not keyword.iskeyword(s)
