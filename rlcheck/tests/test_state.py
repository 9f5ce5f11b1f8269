"""State abstractions: windows of the last k choices, in sequence or along the ancestor path."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcheck import (
    AncestorState,
    InvalidArgument,
    LabelledAncestorState,
    SequenceState,
    StateAbstraction,
    make_state,
)
from rlcheck.state import STATE_ABSTRACTIONS


def drive(s: StateAbstraction, events: list[Any]) -> list[tuple[Any, ...]]:
    """Feed events (("push", label) / ("pop",) / token) and collect the state before each
    token, as a guide reads it before each choice."""
    s.reset()
    seen = []
    for e in events:
        if isinstance(e, tuple) and e[0] == "push":
            s.push(e[1])
        elif e == ("pop",):
            s.pop()
        else:
            seen.append(s.state)
            s.record(e)
    return seen


# A node 5 with a left child 2 (which has a left child 1) and then a right child 8:
# the choices a BST generator makes, with its LEFT/RIGHT scopes.
TREE = [5, True, ("push", "L"), 2, True, ("push", "L"), 1, ("pop",), ("pop",), True,
        ("push", "R"), 8, ("pop",)]  # fmt: skip


def test_sequence_window_sees_everything_in_order() -> None:
    seen = drive(SequenceState(k=3), TREE)
    assert seen == [
        (), (5,), (5, True), (5, True, 2), (True, 2, True), (2, True, 1), (True, 1, True)
    ]  # fmt: skip


def test_ancestor_path_hides_siblings() -> None:
    seen = drive(AncestorState(k=3), TREE)
    # has_right (6th) and the right child's value (7th) see their ancestors' choices,
    # never the left subtree's
    assert seen == [
        (), (5,), (5, True), (5, True, 2), (True, 2, True), (5, True), (5, True, True)
    ]  # fmt: skip


def test_labelled_path_adds_scope_labels() -> None:
    seen = drive(LabelledAncestorState(k=3), TREE)
    assert seen == [
        (), (5,), (5, True, "L"), (True, "L", 2), (2, True, "L"), (5, True), (True, True, "R")
    ]  # fmt: skip


def test_reset_clears_window_and_open_scopes() -> None:
    s = LabelledAncestorState(k=2)
    s.reset()
    s.record(1)
    s.push("L")
    s.reset()
    assert s.state == ()
    with pytest.raises(IndexError):
        s.pop()


def test_k_one_keeps_only_the_last_token() -> None:
    seen = drive(SequenceState(k=1), [1, 2, 3, 4])
    assert seen == [(), (1,), (2,), (3,)]


@pytest.mark.parametrize("k", [0, -1, 2.5, True, "4"])
def test_bad_window_length(k: Any) -> None:
    with pytest.raises(InvalidArgument, match="k="):
        SequenceState(k=k)


def test_make_state_by_name() -> None:
    for name, cls in STATE_ABSTRACTIONS.items():
        s = make_state(name, k=6)
        assert type(s) is cls and s.k == 6
        assert s.describe() == {"state": name, "k": 6}
    assert set(STATE_ABSTRACTIONS) == {"sequence", "ancestor", "labelled"}
    with pytest.raises(InvalidArgument, match=r"'tree'.*ancestor"):
        make_state("tree")


tokens = st.one_of(st.integers(-3, 3), st.booleans(), st.sampled_from("ab"))
events = st.lists(st.one_of(tokens, st.just(("push", "L")), st.just(("push", "R"))), max_size=40)


def balance(evts: list[Any]) -> list[Any]:
    """Close every pushed scope (at random points it stays open until the end)."""
    out, depth = [], 0
    for e in evts:
        out.append(e)
        if isinstance(e, tuple):
            depth += 1
        elif depth and e is True:  # close after some tokens
            out.append(("pop",))
            depth -= 1
    return out + [("pop",)] * depth


@given(st.lists(tokens, max_size=30), st.integers(1, 6))
def test_without_scopes_all_abstractions_agree(toks: list[Any], k: int) -> None:
    results = [drive(cls(k=k), toks) for cls in STATE_ABSTRACTIONS.values()]
    assert results[0] == results[1] == results[2]


@given(events, st.integers(1, 6))
def test_windows_stay_within_k_and_pops_restore(evts: list[Any], k: int) -> None:
    for cls in STATE_ABSTRACTIONS.values():
        s = cls(k=k)
        s.reset()
        stack = []
        for e in balance(evts):
            if isinstance(e, tuple) and e[0] == "push":
                stack.append(s.state)
                s.push(e[1])
            elif e == ("pop",):
                s.pop()
                if cls is not SequenceState:
                    assert s.state == stack[-1]  # back to the parent's window
                stack.pop()
            else:
                s.record(e)
            assert len(s.state) <= k
            hash(s.state)


def test_span_state_path_and_window_modes() -> None:
    from rlcheck.state import SpanState

    for ancestor, expected in [(False, ((1,), (5, 6, 7))), (True, ((1,), (5, 7)))]:
        s = SpanState(k=3, depth=2, ancestor=ancestor)
        s.reset()
        s.push(1)
        s.record(5)
        s.push(2)
        s.push(3)
        assert s.state == ((2, 3), (5,))  # the innermost two labels
        s.record(6)
        s.pop()
        s.pop()
        s.record(7)
        assert s.state == expected
        s.pop()
        s.pop()  # unbalanced: ignored
        assert s.state[0] == ()
        assert s.describe() == {"state": "spans", "k": 3, "depth": 2, "ancestor": ancestor}
