"""Hypothesis tests with strict validity, for ``hypothesis_backend.py``.

Each entry is an ordinary strategy plus the validity rule the test enforces (through
``assume`` or ``.filter``) and a *shape* function: the value with literal values replaced
by their kind, so counting distinct shapes measures structural diversity.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _inputs import Tree, bst_ok, identifier_ok, record_ok, records, tree_size, trees
from hypothesis import strategies as st

__all__ = ["SUITE", "SuiteTest"]


@dataclass(frozen=True)
class SuiteTest:
    """One benchmark test: ``strategy`` feeds a test that keeps only ``valid`` values."""

    name: str
    strategy: st.SearchStrategy[Any]
    valid: Callable[[Any], bool]
    shape: Callable[[Any], Any]
    how: str  # "assume" or "filter": how the test rejects invalid inputs
    description: str


# -- binary search trees (the RLCheck paper's Python case study) ---------------------


def _tree_shape(t: Tree) -> Any:
    return None if t is None else (_tree_shape(t[0]), _tree_shape(t[2]))


# -- balanced brackets -------------------------------------------------------------------

_PAIRS = {")": "(", "]": "[", "}": "{"}


def _balanced(s: str) -> bool:
    stack: list[str] = []
    for c in s:
        if c in "([{":
            stack.append(c)
        elif not stack or stack.pop() != _PAIRS[c]:
            return False
    return not stack and len(s) >= 4


def _bracket_shape(s: str) -> str:
    return "".join("(" if c in "([{" else ")" for c in s)


# -- records with required keys ----------------------------------------------------------


def _record_shape(d: dict[str, Any]) -> Any:
    return tuple(sorted((k, type(v).__name__) for k, v in d.items()))


# -- arithmetic expressions from characters ----------------------------------------------


def _parses(s: str) -> bool:
    """expr := term (('+'|'-') term)*; term := atom (('*'|'/') atom)*;
    atom := digits | '(' expr ')'. At least one operator."""
    pos = 0

    def atom() -> bool:
        nonlocal pos
        if pos < len(s) and s[pos] == "(":
            pos += 1
            if not expr() or pos >= len(s) or s[pos] != ")":
                return False
            pos += 1
            return True
        start = pos
        while pos < len(s) and s[pos].isdigit():
            pos += 1
        return pos > start

    def chain(sub: Callable[[], bool], ops: str) -> bool:
        nonlocal pos
        if not sub():
            return False
        while pos < len(s) and s[pos] in ops:
            pos += 1
            if not sub():
                return False
        return True

    def term() -> bool:
        return chain(atom, "*/")

    def expr() -> bool:
        return chain(term, "+-")

    return expr() and pos == len(s) and any(op in s for op in "+-*/")


def _expr_shape(s: str) -> str:
    out = []
    for c in s:
        token = "N" if c.isdigit() else c
        if not (token == "N" and out and out[-1] == "N"):
            out.append(token)
    return "".join(out)


# -- identifiers from full unicode text ---------------------------------------------------


def _char_kind(c: str) -> str:
    return "d" if c.isdigit() else "_" if c == "_" else "a"


def _identifier_shape(s: str) -> str:
    return "".join(_char_kind(c) for c in s)


# -- close pairs of unbounded integers ----------------------------------------------------


def _close_pair_ok(t: tuple[int, int]) -> bool:
    a, b = t
    return 0 < a < b <= a + 16


def _close_pair_shape(t: tuple[int, int]) -> Any:
    a, b = t
    return (a.bit_length(), b - a)


SUITE: list[SuiteTest] = [
    SuiteTest(
        "bst",
        trees,
        lambda t: tree_size(t) >= 2 and bst_ok(t),
        _tree_shape,
        "assume",
        "binary search trees, keys 0..10, at least 2 nodes (st.recursive)",
    ),
    SuiteTest(
        "brackets",
        st.text(alphabet="()[]{}", min_size=1),
        _balanced,
        _bracket_shape,
        "assume",
        "balanced brackets of length >= 4 (text from 6 characters)",
    ),
    SuiteTest(
        "sorted_list",
        st.lists(st.integers(0, 30)),
        lambda xs: len(xs) >= 3 and all(a < b for a, b in itertools.pairwise(xs)),
        len,
        "assume",
        "strictly increasing lists of length >= 3 over 0..30",
    ),
    SuiteTest(
        "record",
        records,
        record_ok,
        _record_shape,
        "assume",
        "dicts with required keys id:int, name:nonempty str, age:int in 18..99",
    ),
    SuiteTest(
        "expression",
        st.text(alphabet="0123456789+-*/()", min_size=3),
        _parses,
        _expr_shape,
        "filter",
        "arithmetic expressions with an operator (text from 16 characters, .filter)",
    ),
    SuiteTest(
        "identifier",
        st.text(min_size=1),
        identifier_ok,
        _identifier_shape,
        "assume",
        "ASCII identifiers of length >= 3, not keywords (full-unicode st.text())",
    ),
    SuiteTest(
        "close_pair",
        st.tuples(st.integers(), st.integers()),
        _close_pair_ok,
        _close_pair_shape,
        "filter",
        "unbounded integers 0 < a < b <= a + 16 (.filter)",
    ),
]
