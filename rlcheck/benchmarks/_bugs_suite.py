"""Properties with strict validity and one planted bug each, for ``bugs.py``.

Each :class:`BugProperty` is an ordinary Hypothesis test in the shape users write: a
strategy, a validity rule enforced through ``assume`` or ``.filter`` (invalid inputs are
discarded, as a real precondition would), and a body that fails on a planted bug. The
bugs are of different kinds: nesting depth, length, a required combination of keys, an
arithmetic corner, a rare token from a vocabulary, a string format built from characters,
float underflow, and a stateful machine's sequence of operations. They were written
before the backend was tuned and must stay general: a benchmark to beat, never a target
to tune against.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from _inputs import bst_ok, identifier_ok, record_ok, records, tree_size, trees
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

__all__ = ["SUITE", "BugProperty", "PlantedBug"]


class PlantedBug(AssertionError):
    """The failure every property raises when its planted bug is hit."""


Record = Callable[[Any], None]
"""Called by a property's body with each valid input (for distinct-input counts)."""


@dataclass(frozen=True)
class BugProperty:
    """One benchmark property.

    ``make(record, settings, seed)`` returns a zero-argument callable running the property
    once (one Hypothesis run) under ``settings``, seeded with ``seed``; it calls ``record``
    with every valid input and raises :class:`PlantedBug` when the bug is hit.
    """

    name: str
    kind: str
    description: str
    make: Callable[[Record, Any, int], Callable[[], None]]


def _given_property(
    strategy: st.SearchStrategy[Any],
    valid: Callable[[Any], bool],
    bug: Callable[[Any], bool],
    *,
    how: str = "assume",
) -> Callable[[Record, Any, int], Callable[[], None]]:
    """A ``@given`` property: keep ``valid`` inputs, fail when ``bug`` holds."""
    from hypothesis import seed as hypothesis_seed

    def make(record: Record, run_settings: Any, seed: int) -> Callable[[], None]:
        drawn = strategy.filter(valid) if how == "filter" else strategy

        def body(value: Any) -> None:
            if how == "assume":
                assume(valid(value))
            record(value)
            if bug(value):
                raise PlantedBug(repr(value))

        test = hypothesis_seed(seed)(run_settings(given(drawn)(body)))
        return test  # type: ignore[no-any-return]

    return make


# -- depth: balanced parentheses (a user's report) ---------------------------------------


def _depth(s: str) -> int:
    """Maximum nesting depth of a balanced string, -1 when it is not balanced."""
    depth = deepest = 0
    for c in s:
        depth += 1 if c == "(" else -1
        if depth < 0:
            return -1
        deepest = max(deepest, depth)
    return deepest if depth == 0 else -1


# -- depth: nested lists ------------------------------------------------------------------

Nested = Any  # int | list[Nested]


def _nested_ok(x: Nested) -> bool:
    """No empty list anywhere and every leaf even: a strict well-formedness rule."""
    if isinstance(x, list):
        return bool(x) and all(_nested_ok(c) for c in x)
    return x % 2 == 0


def _nested_depth(x: Nested) -> int:
    return 1 + max(map(_nested_depth, x)) if isinstance(x, list) else 0


_nested = st.recursive(
    st.integers(0, 9), lambda children: st.lists(children, max_size=3), max_leaves=12
)

# -- required combination of keys (records from _inputs) ---------------------------------


def _record_bug(d: dict[str, Any]) -> bool:
    # An admin record with an email: the code path that sends a notification.
    return d.get("admin") is True and isinstance(d.get("email"), str)


# -- rare token from a vocabulary ---------------------------------------------------------

_VERBS = ["select", "insert", "update", "delete"]
_VOCAB = [
    *_VERBS,
    "from",
    "where",
    "into",
    "values",
    "set",
    "join",
    "on",
    "and",
    "or",
    "not",
    "null",
    "like",
    "limit",
    "order",
    "by",
    "group",
    "having",
    "as",
    "distinct",
    "union",
    "all",
    "exists",
    "in",
    "between",
    "case",
    "when",
    "then",
    "else",
    "end",
    "table",
    "index",
    "view",
    "drop",
    "create",
    "alter",
    "cascade",
    "restrict",
    "primary",
    "key",
]


def _statement_ok(tokens: list[str]) -> bool:
    return tokens[0] in _VERBS and len(set(tokens)) == len(tokens)


def _statement_bug(tokens: list[str]) -> bool:
    return "drop" in tokens and "cascade" in tokens


# -- a date format built from characters --------------------------------------------------

_DATE = re.compile(r"(\d{1,2})/(\d{1,2})")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _date_ok(s: str) -> bool:
    m = _DATE.fullmatch(s)
    if m is None:
        return False
    day, month = int(m[1]), int(m[2])
    return 1 <= month <= 12 and 1 <= day <= _MONTH_DAYS[month - 1]


def _date_bug(s: str) -> bool:
    # The leap day and New Year's Eve: the two dates a calendar library gets wrong.
    day, month = (int(p) for p in s.split("/"))
    return (day, month) in ((29, 2), (31, 12))


# -- a string format: e-mail addresses ----------------------------------------------------

_EMAIL = re.compile(r"[ab]+@[ab]+(\.[ab]+)+")


def _email_bug(s: str) -> bool:
    # A subdomain after a local part of 2+ characters: the parser splits it wrongly.
    return s.count(".") >= 2 and s.index("@") >= 2


# -- arithmetic corners ------------------------------------------------------------------


def _saturating_add_bug(t: tuple[int, int]) -> bool:
    return sum(t) == 255  # off by one at the saturation limit


def _midpoint_ok(t: tuple[int, int]) -> bool:
    lo, hi = t
    return 0 <= lo < hi < 2**15


def _midpoint_bug(t: tuple[int, int]) -> bool:
    lo, hi = t
    return lo + hi >= 2**15  # (lo + hi) // 2 overflows a 16-bit int


def _underflow_bug(t: tuple[float, float]) -> bool:
    x, y = t
    return x * y == 0.0  # both positive, their product underflows to zero


# -- a stateful machine ------------------------------------------------------------------

_CAPACITY = 4


def _ring_buffer_property(record: Record, run_settings: Any, seed: int) -> Callable[[], None]:
    """A ring buffer of capacity 4 whose ``pop`` goes wrong when the buffer is full of one
    repeated value (a deduplicating fast path); rules have preconditions (strict
    validity: pushing onto a full buffer and popping an empty one are not allowed)."""
    from hypothesis import seed as hypothesis_seed

    class RingBuffer(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.items: list[int] = []
            self.writes = 0
            self.steps: list[Any] = []

        @precondition(lambda self: len(self.items) < _CAPACITY)
        @rule(x=st.integers(0, 9))
        def push(self, x: int) -> None:
            self.items.append(x)
            self.writes += 1
            self.steps.append(x)

        @precondition(lambda self: bool(self.items))
        @rule()
        def pop(self) -> None:
            if len(self.items) == _CAPACITY and len(set(self.items)) == 1:
                raise PlantedBug(repr(self.steps))
            self.items.pop(0)
            self.steps.append("pop")

        @invariant()
        def bounded(self) -> None:
            assert len(self.items) <= _CAPACITY

        def teardown(self) -> None:
            record(tuple(self.steps))

    machine = hypothesis_seed(seed)(RingBuffer)

    def run() -> None:
        run_state_machine_as_test(machine, settings=run_settings)

    return run


SUITE: list[BugProperty] = [
    BugProperty(
        "parens_depth",
        "depth",
        "balanced '()' strings (max 20 chars); bug at nesting depth >= 4",
        _given_property(
            st.text(alphabet="()", max_size=20),
            lambda s: bool(s) and _depth(s) >= 0,
            lambda s: _depth(s) >= 4,
        ),
    ),
    BugProperty(
        "nested_depth",
        "depth",
        "nested lists, no empty list, even leaves; bug at depth >= 3",
        _given_property(
            _nested,
            lambda x: isinstance(x, list) and _nested_ok(x),
            lambda x: _nested_depth(x) >= 3,
        ),
    ),
    BugProperty(
        "bst_size",
        "size",
        "binary search trees over 0..10 (st.recursive); bug at >= 5 nodes",
        _given_property(trees, lambda t: t is not None and bst_ok(t), lambda t: tree_size(t) >= 5),
    ),
    BugProperty(
        "sorted_length",
        "length",
        "strictly increasing lists over 0..99, length >= 2; bug at length >= 5",
        _given_property(
            st.lists(st.integers(0, 99)),
            lambda xs: len(xs) >= 2 and all(a < b for a, b in itertools.pairwise(xs)),
            lambda xs: len(xs) >= 5,
        ),
    ),
    BugProperty(
        "record_keys",
        "keys",
        "dicts needing id:int, name:nonempty str, age:18..99; bug when admin=True and email:str",
        _given_property(records, record_ok, _record_bug),
    ),
    BugProperty(
        "sql_tokens",
        "vocabulary",
        "tokens from a 43-word vocabulary, a verb first, no repeats; bug on 'drop' with 'cascade'",
        _given_property(
            st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=8),
            _statement_ok,
            _statement_bug,
            how="filter",
        ),
    ),
    BugProperty(
        "date_format",
        "format",
        "'D/M' dates from the characters 0-9 and '/' (max 5), valid days; bug on 29/2 or 31/12",
        _given_property(st.text(alphabet="0123456789/", max_size=5), _date_ok, _date_bug),
    ),
    BugProperty(
        "email_format",
        "format",
        "e-mail addresses from 'ab@.' (max 12 chars); bug on a subdomain after a 2+ char user",
        _given_property(
            st.text(alphabet="ab@.", max_size=12),
            lambda s: _EMAIL.fullmatch(s) is not None,
            _email_bug,
            how="filter",
        ),
    ),
    BugProperty(
        "saturating_add",
        "arithmetic",
        "bytes a, b with a + b <= 255; bug when a + b == 255",
        _given_property(
            st.tuples(st.integers(0, 255), st.integers(0, 255)),
            lambda t: sum(t) <= 255,
            _saturating_add_bug,
        ),
    ),
    BugProperty(
        "midpoint",
        "arithmetic",
        "unbounded integers 0 <= lo < hi < 2**15; bug when lo + hi overflows int16",
        _given_property(st.tuples(st.integers(), st.integers()), _midpoint_ok, _midpoint_bug),
    ),
    BugProperty(
        "float_underflow",
        "arithmetic",
        "positive finite floats x, y; bug when x * y underflows to 0",
        _given_property(
            st.tuples(st.floats(), st.floats()),
            lambda t: all(v > 0 and v < float("inf") for v in t),
            _underflow_bug,
        ),
    ),
    BugProperty(
        "identifier",
        "characters",
        "ASCII identifiers (len >= 3, not keywords) from full-unicode text; bug on a '__' prefix",
        _given_property(st.text(min_size=1), identifier_ok, lambda s: s.startswith("__")),
    ),
    BugProperty(
        "ring_buffer",
        "stateful",
        "ring buffer of 4 with push/pop preconditions; bug on pop when full of one repeated value",
        _ring_buffer_property,
    ),
]
