"""The choice tree: steering never repeats a finished sequence; exhaustion is exact."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcheck.choice_tree import ChoiceTree
from rlcheck.errors import InvalidArgument

Chooser = Callable[[str, int], int]


def _steered(tree: ChoiceTree, rng: random.Random) -> Chooser:
    """A random chooser that takes only options the tree allows, recording each."""

    def choose(point: str, n: int) -> int:
        allowed = tree.allowed(point, n)
        action = rng.choice(allowed) if allowed is not None else rng.randrange(n)
        tree.step(point, n, action)
        return action

    return choose


def _word(choose: Chooser, max_len: int, alphabet: int) -> tuple[int, ...]:
    """A small generator: letters until a stop choice or ``max_len``."""
    out: list[int] = []
    while len(out) < max_len and choose("more", 2) == 1:
        out.append(choose("letter", alphabet))
    return tuple(out)


def _count_words(max_len: int, alphabet: int) -> int:
    return sum(alphabet**k for k in range(max_len + 1))


def test_steering_enumerates_every_sequence_once_then_reports_exhaustion() -> None:
    tree = ChoiceTree()
    rng = random.Random(0)
    seen = set()
    total = _count_words(3, 3)  # 40 words
    for _ in range(total):
        assert not tree.exhausted
        tree.begin()
        word = _word(_steered(tree, rng), 3, 3)
        tree.finish()
        assert word not in seen
        seen.add(word)
    assert tree.exhausted
    assert len(seen) == total


def test_allowed_is_none_where_nothing_is_exhausted() -> None:
    tree = ChoiceTree()
    tree.begin()
    assert tree.allowed("coin", 2) is None
    tree.step("coin", 2, 0)
    tree.finish()
    tree.begin()
    assert tree.allowed("coin", 2) == [1]


def test_an_inexact_choice_keeps_its_ancestors_open() -> None:
    tree = ChoiceTree()
    for action in (0, 1):
        tree.begin()
        tree.step("bucket", 2, action, exact=action == 0)
        tree.finish()
    tree.begin()
    assert not tree.exhausted
    assert tree.allowed("bucket", 2) == [1]  # the exact leaf is avoided, the open one not


def test_a_choice_that_differs_between_runs_is_left_open_without_error() -> None:
    tree = ChoiceTree()
    tree.begin()
    tree.step("a", 2, 0)
    tree.finish()
    tree.begin()
    tree.step("a", 2, 1)
    tree.finish()
    assert tree.exhausted
    tree.begin()
    assert tree.allowed("b", 3) is None  # a different point where "a" was: not steered
    tree.step("b", 3, 2)
    tree.finish()
    assert not tree.exhausted


def test_a_case_ending_where_another_went_on_is_not_a_leaf() -> None:
    tree = ChoiceTree()
    tree.begin()
    tree.step("a", 2, 0)
    tree.step("b", 2, 0)
    tree.finish()
    tree.begin()
    tree.step("a", 2, 0)
    tree.finish()  # ends early: nondeterministic, so node ("a", 0) is never exhausted
    for path in ([0, 1], [1]):
        tree.begin()
        tree.step("a", 2, path[0])
        for action in path[1:]:
            tree.step("b", 2, action)
        tree.finish()
    assert not tree.exhausted  # every path was run, but ("a", 0) behaved two ways
    tree.begin()
    assert tree.allowed("a", 2) == [0]


def test_memory_is_bounded() -> None:
    tree = ChoiceTree(max_nodes=10)
    rng = random.Random(1)
    for _ in range(100):
        tree.begin()
        _word(_steered(tree, rng), 6, 4)
        tree.finish()
    assert tree.nodes <= 10
    with pytest.raises(InvalidArgument, match="max_nodes=0"):
        ChoiceTree(max_nodes=0)


def test_abandoned_cases_are_not_recorded_as_run() -> None:
    tree = ChoiceTree()
    tree.begin()
    tree.step("coin", 2, 0)
    tree.abandon()
    tree.finish()  # after abandon: a no-op
    tree.begin()
    assert tree.allowed("coin", 2) is None


@given(
    max_len=st.integers(0, 3),
    alphabet=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_any_small_generator_is_enumerated_without_repeats(
    max_len: int, alphabet: int, seed: int
) -> None:
    tree = ChoiceTree()
    rng = random.Random(seed)
    seen = set()
    while not tree.exhausted:
        tree.begin()
        word = _word(_steered(tree, rng), max_len, alphabet)
        tree.finish()
        assert word not in seen
        seen.add(word)
    assert len(seen) == _count_words(max_len, alphabet)


def test_repeats_says_whether_given_steps_lead_only_to_cases_run() -> None:
    tree = ChoiceTree()
    for first, second in ((0, 0), (0, 1), (1, 0)):
        tree.begin()
        tree.step("a", 2, first)
        tree.step("b", 2, second)
        tree.finish()
    tree.begin()
    assert tree.repeats([("a", 2, 0, True)])  # both continuations of a=0 were run
    assert not tree.repeats([("a", 2, 1, True)])  # a=1, b=1 is still new
    assert tree.repeats([("a", 2, 1, True), ("b", 2, 0, True)])
    assert not tree.repeats([("a", 2, 1, True), ("b", 2, 1, True)])
    assert not tree.repeats([("a", 2, 0, False)])  # inexact: the tree cannot tell
    assert not tree.repeats([("z", 3, 0, True)])  # another choice than the one met here
    assert tree.allowed("a", 2) == [1]  # nothing was recorded by asking


def test_untaken_offers_the_other_options_where_every_case_chose_alike() -> None:
    tree = ChoiceTree()
    tree.begin()
    assert tree.untaken("more", 2) is None  # the root was never met
    tree.step("more", 2, 1)
    tree.step("letter", 3, 2)
    tree.step("more", 2, 0)
    tree.finish()
    tree.begin()
    assert tree.untaken("more", 2) == [0]  # every case went on here
    assert tree.untaken("other", 2) is None  # not the choice met here
    tree.step("more", 2, 1)
    assert tree.untaken("letter", 3) == [0, 1]
    tree.step("letter", 3, 0)  # a new branch: nothing below it was run
    assert tree.untaken("more", 2) is None


def test_untaken_choices_first_enumerate_the_shortest_words_first() -> None:
    # Hypothesis's engine's novel prefixes: a choice every earlier case made alike is
    # made otherwise. Steered so (with the 5-in-6 continue of its lists), a generator
    # meets every word of length k before it makes many longer ones.
    tree = ChoiceTree()
    rng = random.Random(0)
    lengths = []
    for _ in range(40):
        tree.begin()

        def choose(point: str, n: int) -> int:
            options = tree.untaken(point, n) or tree.allowed(point, n)
            if options is None:
                action = int(rng.random() < 5 / 6) if point == "more" else rng.randrange(n)
            else:
                action = rng.choice(options)
            tree.step(point, n, action)
            return action

        lengths.append(len(_word(choose, 50, 2)))
        tree.finish()
    # all 15 words of length <= 3 within the first 40 cases, few long ones
    words_up_to_3 = sum(1 for n in lengths if n <= 3)
    assert words_up_to_3 == 15
    assert sorted(lengths)[len(lengths) // 2] <= 5
