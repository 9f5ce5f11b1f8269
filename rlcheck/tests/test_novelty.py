"""The RL guide with novelty rewards (count-based bonus, structural novelty)."""

from __future__ import annotations

from typing import Any

import pytest

import rlcheck
from rlcheck.errors import InvalidArgument
from rlcheck.guides import NoveltyRLGuide, RestartingRLGuide


def trap(g: rlcheck.Gen) -> Any:
    """A collapse on purpose: "short" gives one of three valid inputs at once; the long
    branch is valid only for a run of the right digits, each longer run a new input."""
    if g.boolean(label="short"):
        return ("s", g.integer(0, 2, label="s"))
    out = []
    while g.boolean(label="more"):
        out.append(g.integer(0, 3, label="d"))
    return tuple(out)


def trap_ok(x: Any) -> bool:
    if x and x[0] == "s":
        return True
    return len(x) >= 1 and all(d == i % 4 for i, d in enumerate(x))


def test_escapes_the_collapse_plain_rl_falls_into() -> None:
    plain = rlcheck.run(trap, trap_ok, guide=rlcheck.RLGuide(seed=0), trials=3000)
    guide = NoveltyRLGuide(seed=0)
    novel = rlcheck.run(trap, trap_ok, guide=guide, trials=3000)
    # Plain RL settles on the three short inputs and a few short runs of digits.
    assert plain.unique_valid <= 7
    assert novel.unique_valid >= 2 * plain.unique_valid
    assert 0 < guide.novel_inputs <= novel.valid


def test_each_part_alone_beats_plain_rl() -> None:
    plain = rlcheck.run(trap, trap_ok, guide=rlcheck.RLGuide(seed=1), trials=3000)
    for options in ({"bonus": 0.0}, {"novelty": 0.0}):
        guide = NoveltyRLGuide(seed=1, **options)
        part = rlcheck.run(trap, trap_ok, guide=guide, trials=3000)
        assert part.unique_valid > 2 * plain.unique_valid, options


def test_without_its_rewards_it_is_the_restarting_guide() -> None:
    def choices(guide: rlcheck.Guide) -> list[Any]:
        made: list[Any] = []

        def check(x: Any) -> bool:
            made.append(x)
            return trap_ok(x)

        rlcheck.run(trap, check, guide=guide, trials=600)
        return made

    same = NoveltyRLGuide(seed=3, bonus=0, novelty=0, patience=50)
    parent = RestartingRLGuide(seed=3, patience=50)
    assert choices(same) == choices(parent)
    assert same.restarts == parent.restarts > 0


def test_count_bonus_fades_with_visits() -> None:
    guide = NoveltyRLGuide(bonus=2.0, novelty=0, seed=0)
    rlcheck.run(lambda g: g.boolean(label="coin"), lambda b: False, guide=guide, trials=400)
    (q0, n0), (q1, n1) = (guide.policy.table("coin").value((), a) for a in (0, 1))
    # Every input invalid (−1): the mean of −1 + 2/sqrt(i), i = 1..n, rises above −1
    # by less as n grows.
    for q, n in ((q0, n0), (q1, n1)):
        expected = sum(-1 + 2 / i**0.5 for i in range(1, n + 1)) / n
        assert q == pytest.approx(expected)
        assert -1 < q < 0


def test_novelty_counts_valid_inputs_with_a_new_pair() -> None:
    guide = NoveltyRLGuide(bonus=0, seed=0)
    result = rlcheck.run(
        lambda g: g.integer(0, 3, label="x"), lambda x: x != 3, guide=guide, trials=200
    )
    # Three valid values, each a new (state, action) pair exactly once.
    assert result.unique_valid == guide.novel_inputs == 3


def test_a_restart_forgets_the_pairs_valid_inputs_took() -> None:
    guide = NoveltyRLGuide(bonus=0, patience=10, seed=0)
    rlcheck.run(lambda g: g.integer(0, 1, label="x"), lambda x: True, guide=guide, trials=200)
    assert guide.restarts >= 1
    # After each restart the rows are new, and so are the first valid inputs on them.
    assert guide.novel_inputs > 2


@pytest.mark.parametrize(
    "options",
    [{"bonus": -1.0}, {"bonus": float("nan")}, {"novelty": float("inf")}, {"novelty": "1"},
     {"bonus": True}, {"patience": 0}, {"patience": True}],
)  # fmt: skip
def test_bad_arguments(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgument):
        NoveltyRLGuide(**options)


def test_describe_names_its_options() -> None:
    d = NoveltyRLGuide(bonus=0.5, novelty=3, seed=2).describe()
    assert (d["guide"], d["bonus"], d["novelty"], d["patience"]) == ("rl-novelty", 0.5, 3.0, None)
