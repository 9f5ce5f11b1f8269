"""The generation context: choice points, their identity, scopes, overruns and replay."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcheck import (
    Gen,
    Guide,
    InvalidArgument,
    Overrun,
    RandomGuide,
    ReplayError,
    RLGuide,
    replay,
)
from rlcheck.gen import MAX_OPTIONS
from rlcheck.guides import ReplayGuide


class Recorder(Guide):
    """Always the last option; records every call it receives."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def choose(self, point: Hashable, options: Sequence[Any]) -> int:
        self.events.append(("choose", point, tuple(options)))
        return len(options) - 1

    def enter_scope(self, label: Hashable) -> None:
        self.events.append(("enter", label))

    def exit_scope(self) -> None:
        self.events.append(("exit",))


def test_choices_return_options_and_are_recorded() -> None:
    g = Gen(ReplayGuide([2, 0, 1, 5]))
    assert g.choice(["a", "b", "c"]) == "c"
    assert g.boolean() is False
    assert g.boolean() is True
    assert g.integer(-3, 3) == 2
    assert g.choices == [2, 0, 1, 5]


def test_labels_and_call_sites_identify_points() -> None:
    guide = Recorder()
    g = Gen(guide)
    for _ in range(2):
        g.boolean()  # one call site, visited twice
    g.boolean()  # another call site
    g.boolean(label="has_left")
    g.integer(0, 3, label=("tag", "x"))
    points = [e[1] for e in guide.events]
    assert points[0] == points[1]
    assert points[0] != points[2]
    assert points[0][0] == __file__ and isinstance(points[0][1], int)
    assert points[3:] == ["has_left", ("tag", "x")]
    assert guide.events[4][2] == (0, 1, 2, 3)


def test_scopes_are_balanced_even_when_the_body_raises() -> None:
    guide = Recorder()
    g = Gen(guide)
    with g.scope("LEFT"), g.scope("inner"):
        g.boolean(label="b")
    with pytest.raises(RuntimeError), g.scope("RIGHT"):
        raise RuntimeError("boom")
    kinds = [e[0] if e[0] != "enter" else f"enter {e[1]}" for e in guide.events]
    assert kinds == ["enter LEFT", "enter inner", "choose", "exit", "exit", "enter RIGHT", "exit"]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda g: g.choice([]), "offers 0 options"),
        (lambda g: g.choice({1, 2}), "not a sequence"),
        (lambda g: g.choice(list(range(MAX_OPTIONS + 1))), "offers 1025 options"),
        (lambda g: g.integer(5, 4), r"integer\(5, 4\)"),
        (lambda g: g.integer(0, MAX_OPTIONS), "at most 1024 values"),
    ],
)
def test_bad_choice_points_are_rejected(call: Any, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        call(Gen(RandomGuide(seed=0)))


@pytest.mark.parametrize(
    ("low", "high", "shown"), [(0, 5.0, "int and float"), ("0", 5, "str and int"), (0, None, "")]
)
def test_integer_bounds_must_be_integers(low: Any, high: Any, shown: str) -> None:
    # Caught before the guide is asked: a TypeError from inside its call (range(0, 6.0))
    # was blamed on the guide, and a campaign fell back to random generation, forever.
    guide = Recorder()
    g = Gen(guide)
    with pytest.raises(InvalidArgument, match=f"needs int bounds, got {shown}"):
        g.integer(low, high, label="n")
    assert guide.events == [] and g.guide_error is None and g.choices == []


def test_integer_bounds_may_be_any_integer_type() -> None:
    class Index:  # an integer of another library (NumPy's int64, say)
        def __init__(self, n: int) -> None:
            self.n = n

        def __index__(self) -> int:
            return self.n

    value = Gen(ReplayGuide([2])).integer(Index(3), Index(6))  # type: ignore[arg-type]
    assert value == 5 and type(value) is int
    assert Gen(ReplayGuide([1])).integer(False, True) == 1


def test_an_unhashable_label_is_the_callers_error_not_the_guides() -> None:
    # A learner keys its tables by the label; its TypeError is the label's fault.
    g = Gen(RLGuide(seed=0))
    with pytest.raises(InvalidArgument, match=r"label=\['n'\] is not hashable"):
        g.integer(0, 3, label=["n"])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="not hashable"):
        g.choice("ab", label={"n": 1})  # type: ignore[arg-type]
    assert g.guide_error is None

    # A guide that raises on a good label is still the guide's error.
    class Broken(RandomGuide):
        def choose(self, point: Any, options: Any) -> int:
            raise TypeError("broken")

    g = Gen(Broken())
    with pytest.raises(TypeError, match="broken"):
        g.boolean(label="b")
    assert g.guide_error is not None and g.guide_error[0] == "choose"


def test_bad_context_arguments() -> None:
    with pytest.raises(InvalidArgument, match="not an rlcheck guide"):
        Gen(object())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="max_choices"):
        Gen(RandomGuide(), max_choices=0)


def test_custom_sequence_types_are_accepted() -> None:
    class Letters(Sequence[str]):
        def __len__(self) -> int:
            return 3

        def __getitem__(self, i: Any) -> Any:
            return "xyz"[i]

    assert Gen(ReplayGuide([1])).choice(Letters()) == "y"


def test_overrun_stops_runaway_generators() -> None:
    def forever(g: Gen) -> None:
        while True:
            g.boolean(label="go on")

    g = Gen(RandomGuide(seed=0), max_choices=50)
    with pytest.raises(Overrun, match="max_choices=50"):
        forever(g)
    assert len(g.choices) == 50


def tree(g: Gen, depth: int = 0) -> tuple[Any, ...]:
    value = g.choice("abc", label="v")
    kids = []
    while depth < 3 and g.boolean(label="more"):
        with g.scope("kid"):
            kids.append(tree(g, depth + 1))
    return (value, g.integer(0, 9), *kids)


@given(st.integers(0, 2**32))
def test_replay_rebuilds_the_recorded_input(seed: int) -> None:
    g = Gen(RandomGuide(seed=seed))
    value = tree(g)
    assert replay(tree, g.choices) == value
    assert replay(tree, list(g.choices), strict=False) == value


def test_strict_replay_errors_name_the_problem() -> None:
    g = Gen(RandomGuide(seed=1))
    value = tree(g)
    choices = g.choices
    with pytest.raises(ReplayError, match="ran out"):
        replay(tree, choices[:-1])
    with pytest.raises(ReplayError, match="does not belong"):
        replay(tree, [*choices, 0])
    with pytest.raises(ReplayError, match="does not fit choice point 'v'"):
        replay(tree, [7, *choices[1:]])
    with pytest.raises(InvalidArgument, match=r"choices\[1\]=-1"):
        replay(tree, [0, -1])
    assert replay(tree, choices) == value


@given(st.lists(st.integers(0, 50), max_size=40))
def test_lenient_replay_turns_any_sequence_into_an_input(choices: list[int]) -> None:
    value = replay(tree, choices, strict=False)
    assert value[0] in "abc"
