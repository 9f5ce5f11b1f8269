"""The greybox guide (coverage-guided mutation) and the RL guide with restarts."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

import rlcheck
from rlcheck import Gen, InvalidArgument, RandomGuide
from rlcheck.guides import GreyboxGuide, RestartingRLGuide

SECRET = (3, 1, 4, 1, 5)


def digits(g: Gen) -> tuple[int, ...]:
    return tuple(g.integer(0, 9, label="digit") for _ in SECRET)


def prefix_measure(value: tuple[int, ...]) -> tuple[bool, frozenset[Hashable]]:
    """Branches = how far the input matches SECRET (a magic-number comparison)."""
    n = 0
    while n < len(SECRET) and value[n] == SECRET[n]:
        n += 1
    return n == len(SECRET), frozenset(range(n + 1))


def test_coverage_guidance_finds_what_random_does_not() -> None:
    guide = GreyboxGuide(seed=0)
    grey = rlcheck.run(digits, guide.observe(prefix_measure), guide=guide, trials=3000)
    rnd = rlcheck.run(
        digits, lambda v: prefix_measure(v)[0], guide=RandomGuide(seed=0), trials=3000
    )
    assert grey.unique_valid == 1 and rnd.unique_valid == 0  # random: 1 in 100 000
    assert len(guide.corpus) <= 6  # only inputs that reached a new branch are kept
    assert guide.branches_covered == len(SECRET) + 1


def test_same_seed_same_inputs() -> None:
    def inputs(seed: int) -> list[Any]:
        guide = GreyboxGuide(seed=seed)
        seen: list[Any] = []

        def check(value: Any) -> bool:
            seen.append(value)
            return prefix_measure(value)[0]

        def measured(value: Any) -> tuple[bool, frozenset[Hashable]]:
            return check(value), prefix_measure(value)[1]

        rlcheck.run(digits, guide.observe(measured), guide=guide, trials=300)
        return seen

    assert inputs(1) == inputs(1)
    assert inputs(1) != inputs(2)


def test_mutated_sequences_replay_leniently() -> None:
    guide = GreyboxGuide(seed=0, max_mutations=8)
    guide.corpus.append((9, 9, 9))
    for _ in range(200):
        guide.start_episode()
        g = Gen(guide)
        value = (g.boolean(), g.integer(0, 2), g.choice("ab"), g.integer(0, 5))
        assert value[1] in range(3) and value[2] in "ab" and value[3] in range(6)
        guide.end_episode(valid=False, new=False)


def test_without_coverage_it_keeps_new_valid_inputs() -> None:
    guide = GreyboxGuide(seed=0)
    result = rlcheck.run(lambda g: g.integer(0, 20), lambda x: x % 2 == 0, guide=guide, trials=500)
    assert len(guide.corpus) == result.unique_valid == 11


def test_bad_arguments() -> None:
    with pytest.raises(InvalidArgument):
        GreyboxGuide(max_mutations=0)
    with pytest.raises(InvalidArgument):
        GreyboxGuide(fresh=1.5)
    with pytest.raises(InvalidArgument):
        RestartingRLGuide(patience=0)


def test_restarts_when_nothing_new_comes() -> None:
    guide = RestartingRLGuide(patience=20, seed=0)
    result = rlcheck.run(lambda g: g.integer(0, 3, label="x"), bool, guide=guide, trials=400)
    assert result.unique_valid == 3
    # 397 stale episodes, patience doubling from 20: 20 + 40 + 80 + 160 < 397 < + 320.
    assert guide.restarts == 4
    assert guide.describe()["guide"] == "rl-restart"


def test_repeats_are_punished_like_invalid_inputs() -> None:
    guide = RestartingRLGuide(patience=10**6, seed=0)
    rlcheck.run(lambda g: g.boolean(label="coin"), lambda b: True, guide=guide, trials=200)
    values = [guide.policy.table("coin").value((), a)[0] for a in (0, 1)]
    # Each side earned +20 once, then −1 on every repeat.
    assert all(v < 0 for v in values)
