"""Mutation of earlier valid cases: the pool, the plans, and the backend's use of them."""

from __future__ import annotations

import contextlib
import itertools
import random
from types import MappingProxyType
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, assume, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from hypothesis.internal.conjecture.providers import AVAILABLE_PROVIDERS

from rlcheck.errors import InvalidArgument
from rlcheck.hypothesis.compat import IntervalSet, choice_permitted
from rlcheck.hypothesis.provider import RLCheckProvider, _boundary_values
from rlcheck.mutation import (
    FRESH,
    OPERATORS,
    SIMPLEST,
    CasePool,
    Plan,
    duplicated,
    other_integer,
)

A, B = ("i", 0, 9), ("b", 0.5)


def test_a_plan_replays_around_the_changed_draw() -> None:
    plan = Plan(((A, 1), (B, True), (A, 7)), 1)
    assert [plan.next(A), plan.next(B), plan.next(A)] == [1, FRESH, 7]
    assert plan.next(A) is FRESH  # past the recorded case: fresh


def test_a_draw_that_does_not_line_up_makes_the_rest_fresh() -> None:
    plan = Plan(((A, 1), (B, True), (A, 7), (A, 8)), 0)
    assert plan.next(A) is FRESH
    assert plan.next(A) is FRESH  # recorded B here: the change moved the rest
    assert plan.next(A) is FRESH  # never lines up again


def test_a_plan_exposes_the_recorded_value_at_the_changed_draw_only() -> None:
    plan = Plan(((A, 4), (A, 5)), 1, operator="boundary")
    assert plan.next(A) == 4 and plan.changed() is FRESH
    assert plan.next(A) is FRESH and plan.changed() == 5 and plan.boundary


def test_a_copy_takes_the_value_of_a_like_draw_of_the_same_case() -> None:
    plan = Plan(((A, 1), (B, True), (A, 7)), 2, operator="copy", source=0)
    assert [plan.next(A), plan.next(B), plan.next(A)] == [1, True, 1]
    with pytest.raises(InvalidArgument):
        Plan(((A, 1), (B, True)), 0, operator="copy", source=1)  # not a like draw


def test_a_replay_plan_replays_its_draws_then_leaves_the_rest_fresh() -> None:
    plan = Plan.replay(((A, 1), (B, True)))
    assert [plan.next(A), plan.next(B)] == [1, True]
    assert plan.changed() is FRESH  # nothing changed, at the end either
    assert plan.next(A) is FRESH and plan.changed() is FRESH


def test_a_duplication_copies_one_span_onto_another_of_its_label() -> None:
    draws = ((A, 1), (B, True), (A, 7), (B, False))
    spans = [("e", 0, 2), ("e", 2, 4), ("whole", 0, 4), ("empty", 4, 4), ("empty", 4, 4)]
    made = {duplicated(draws, spans, random.Random(s)) for s in range(50)}
    assert made == {
        ((A, 1), (B, True), (A, 1), (B, True)),
        ((A, 7), (B, False), (A, 7), (B, False)),
    }


def test_a_duplication_of_a_span_inside_one_of_its_label_repeats_the_outer_part() -> None:
    # a tree: the outer span's draws before the inner one are repeated (a copy of the path)
    draws = ((A, 1), (A, 2), (A, 3))
    spans = [("t", 1, 3), ("t", 0, 3)]
    assert duplicated(draws, spans, random.Random(0)) == ((A, 1), (A, 1), (A, 2), (A, 3))


def test_no_duplication_without_two_spans_of_one_label() -> None:
    rng = random.Random(0)
    assert duplicated(((A, 1),), [("e", 0, 1), ("f", 0, 1)], rng) is None
    assert duplicated(((A, 1),), [("g", 1, 1), ("g", 1, 1), ("e", 0, 1)], rng) is None
    assert duplicated((), [], rng) is None


def test_simplest_and_small_plans_answer_every_draw_from_the_position_on() -> None:
    for operator in ("simplest", "small"):
        plan = Plan(((A, 1), (B, True)), 1, operator=operator, seed=3)
        assert plan.next(A) == 1
        assert plan.next(B) is SIMPLEST and plan.next(A) is SIMPLEST  # past the case too
    assert {Plan(((A, 1),), 0, operator="simplest").small_index() for _ in range(20)} == {0}
    small = Plan(((A, 1),), 0, operator="small", seed=3)
    indices = [small.small_index() for _ in range(400)]
    assert set(indices) == {0, 1, 2, 3} and 150 < indices.count(0) < 250
    again = Plan(((A, 1),), 0, operator="small", seed=3)
    assert [again.small_index() for _ in range(400)] == indices  # deterministic


def test_a_suffix_plan_exposes_the_recorded_value_at_its_position_only() -> None:
    for operator in ("simplest", "small"):
        plan = Plan(((A, 1), (B, True), (A, 7)), 1, operator=operator)
        assert plan.next(A) == 1 and plan.replaced(A) is FRESH
        assert plan.next(B) is SIMPLEST and plan.replaced(B) is True
        assert plan.next(A) is SIMPLEST and plan.replaced(A) is FRESH  # past the position
    moved = Plan(((A, 1), (B, True)), 1, operator="small")
    assert moved.next(B) is FRESH  # recorded A here: the draws no longer line up
    assert moved.next(B) is SIMPLEST and moved.replaced(B) is FRESH
    assert Plan(((A, 4),), 0, operator="change").replaced(A) is FRESH


def test_the_pool_mutates_the_newest_case_its_recent_share_of_the_time() -> None:
    old, new = ((A, 1),), ((A, 2), (B, True))
    pool = CasePool(recent=1.0, seed=0)
    pool.add(*old)
    pool.add(*new)
    plans = [pool.plan() for _ in range(50)]
    assert all(p is not None and p._draws == new for p in plans)
    half = CasePool(recent=0.5, seed=0)
    half.add(*old)
    half.add(*new)
    newest = sum(p is not None and p._draws == new for p in (half.plan() for _ in range(400)))
    assert 250 < newest < 350  # 1/2 + 1/2 * 1/2 of the plans
    with pytest.raises(InvalidArgument):
        CasePool(recent=1.5)


def test_the_pool_never_makes_a_deterministic_plan_twice() -> None:
    pool = CasePool(operators={"simplest": 1.0}, seed=0)
    pool.add((A, 1), (A, 2))
    made = [pool.plan(position=1) for _ in range(3)]
    assert made[0] is not None and made[1] is None and made[2] is None
    # "change" plans are random, so they are made as often as asked
    changing = CasePool(seed=0)
    changing.add((A, 1), (A, 2))
    assert all(changing.plan(position=1) is not None for _ in range(5))
    # a copy with nothing to copy from (no like draw of another value) changes instead
    copying = CasePool(operators={"copy": 1.0}, seed=0)
    copying.add((A, 1), (B, True))
    plan = copying.plan(position=0)
    assert plan is not None and plan.operator == "change"


_INT = {"weights": None, "shrink_towards": 0}
_FLOAT = {"allow_nan": False, "smallest_nonzero_magnitude": 1e-3}


def test_operators_that_make_no_new_valid_inputs_are_chosen_less() -> None:
    pool = CasePool(operators={"change": 1.0, "small": 1.0}, seed=0)
    pool.add((A, 1), (A, 2))
    for _ in range(50):
        pool.credit("change", True)
        pool.credit("small", False)  # repeats or invalid inputs only
    made = [pool.plan() for _ in range(400)]
    small = sum(p is not None and p.operator == "small" for p in made)
    assert 0 < small < 0.1 * len(made)  # about 1/52 of the change plans' score, never 0


def test_cases_whose_mutations_make_no_new_valid_inputs_are_mutated_less() -> None:
    pool = CasePool(operators={"change": 1.0}, energy=True, seed=0)
    leaf, fertile = ((A, 1), (A, 2)), ((A, 3), (A, 4))
    pool.add(*leaf)
    pool.add(*fertile)
    for _ in range(200):  # credited to the case each plan mutated
        plan = pool.plan()
        assert plan is not None
        pool.credit(plan.operator, plan._draws == fertile, plan)
    made = [pool.plan() for _ in range(400)]
    picked_leaf = sum(p is not None and p._draws == leaf for p in made)
    assert 0 < picked_leaf < 0.15 * len(made)
    # a case replaced since its plan was made is not credited
    uniform = CasePool(operators={"change": 1.0}, size=1, energy=True, seed=0)
    uniform.add(*leaf)
    plan = uniform.plan()
    uniform.add(*fertile)  # replaces it
    assert plan is not None
    uniform.credit(plan.operator, True, plan)
    assert uniform._case_stats == [[0, 0]]


@pytest.mark.parametrize(
    ("kind", "constraints", "recorded"),
    [
        ("boolean", {"p": 0.5}, True),
        ("integer", {"min_value": 3, "max_value": 40, **_INT}, 3),
        ("integer", {"min_value": None, "max_value": None, **_INT}, 7),
        ("float", {"min_value": -1.0, "max_value": 2.5, **_FLOAT}, 0.0),
        ("string", {"intervals": IntervalSet.from_string("xy"), "min_size": 1, "max_size": 2}, "x"),
        ("bytes", {"min_size": 0, "max_size": 3}, b""),
    ],
)
def test_boundary_values_are_permitted_and_differ_from_the_recorded_one(
    kind: str, constraints: dict[str, object], recorded: object
) -> None:
    values = _boundary_values(kind, constraints, recorded)
    assert values and recorded not in values
    assert all(choice_permitted(v, constraints) for v in values)  # type: ignore[arg-type]
    if kind == "integer" and constraints["max_value"] is not None:
        assert {4, 5, 40} <= set(values)  # simplest permitted, the bounds, the neighbour
    if kind == "float":
        assert {-1.0, 2.5} <= set(values)  # the bounds


def test_changed_integers_differ_from_the_recorded_one() -> None:
    rng = random.Random(0)
    assert {other_integer(rng, 0, 3, 2) for _ in range(200)} == {0, 1, 3}
    assert other_integer(rng, 4, 4, 4) == 4


def test_the_pool_is_bounded_and_skips_empty_or_long_cases() -> None:
    pool = CasePool(size=3, max_draws=2, seed=1)
    pool.add()
    pool.add((A, 1), (A, 2), (A, 3))
    assert len(pool) == 0 and pool.plan() is None
    for i in range(10):
        pool.add((A, i))
    assert len(pool) == 3 and pool.added == 10
    with pytest.raises(InvalidArgument):
        CasePool(size=0)
    with pytest.raises(InvalidArgument):
        CasePool(operators={"flip": 1.0})


class _Mutating(RLCheckProvider):
    default_tail = 0.0
    mutate_share = 0.5
    mutate_operators = MappingProxyType(dict.fromkeys(OPERATORS, 1.0))


AVAILABLE_PROVIDERS.setdefault("rlcheck-test-mutate", f"{__name__}._Mutating")
QUIET = {"deadline": None, "suppress_health_check": list(HealthCheck), "database": None}


def _strictly_increasing_inputs(backend: str, run_seed: int) -> list[list[int]]:
    seen: list[list[int]] = []

    @seed(run_seed)
    @settings(backend=backend, max_examples=80, phases=[Phase.generate], **QUIET)
    @given(st.lists(st.integers(0, 20), max_size=6))
    def test(xs: list[int]) -> None:
        assume(len(xs) >= 3 and all(a < b for a, b in itertools.pairwise(xs)))
        seen.append(xs)

    test()
    return seen


def test_mutating_backend_runs_valid_cases_deterministically() -> None:
    first = _strictly_increasing_inputs("rlcheck-test-mutate", 3)
    assert first == _strictly_increasing_inputs("rlcheck-test-mutate", 3)
    # The run still reaches max_examples distinct valid inputs; a mutated case that
    # repeats one runs, but is discarded (not counted), and costs at most a few.
    assert len({tuple(x) for x in first}) >= 75
    assert len(first) <= 1.5 * 80


@pytest.mark.slow
def test_mutating_backend_finds_a_bug_near_valid_inputs() -> None:
    # A bug on a valid input one step from others: mutation of valid cases reaches it.
    @seed(0)
    @settings(backend="rlcheck-test-mutate", max_examples=300, phases=[Phase.generate], **QUIET)
    @given(st.lists(st.integers(0, 20), max_size=6))
    def test(xs: list[int]) -> None:
        assume(len(xs) >= 3 and all(a < b for a, b in itertools.pairwise(xs)))
        assert xs[-1] - xs[0] != 3

    with pytest.raises(AssertionError):
        test()


class _Copying(RLCheckProvider):
    default_tail = 0.0
    mutate_share = 0.5
    mutate_operators = MappingProxyType({"copy": 1.0})


AVAILABLE_PROVIDERS.setdefault("rlcheck-test-copy", f"{__name__}._Copying")


def test_mutation_replays_every_kind_of_draw_and_copies_equal_parts() -> None:
    # Two floats equal (inside the range): a copy of one draw onto the other, which needs
    # the recorded float draws to line up with the replayed ones (they did not: the
    # recorded ones had another key).
    found = []

    @seed(1)
    @settings(backend="rlcheck-test-copy", max_examples=200, phases=[Phase.generate], **QUIET)
    @given(st.floats(0.5, 1.0), st.text("ab", min_size=2, max_size=4), st.floats(0.5, 1.0))
    def test(x: float, s: str, y: float) -> None:
        assume(s[0] != s[-1])
        if x == y and 0.51 < x < 0.99:  # not near a bound: those the draws make often
            found.append((x, y))
            raise AssertionError

    with pytest.raises(AssertionError):
        test()
    assert found


class _SharingByRate(_Mutating):
    mutate_share_bounds = (0.25, 0.75)


AVAILABLE_PROVIDERS.setdefault("rlcheck-test-share", f"{__name__}._SharingByRate")


def test_a_share_by_rate_follows_the_arms_within_its_bounds() -> None:
    provider = _SharingByRate(None, seed=0, persist=False)
    assert provider._mutate_share() == 0.5  # the priors alone: a half
    provider._arm_cases, provider._arm_hits = [40, 40], [2, 30]  # mutation pays
    assert provider._mutate_share() == 0.75  # held at the upper bound
    provider._arm_cases, provider._arm_hits = [40, 40], [12, 6]  # fresh cases pay
    assert 0.25 < provider._mutate_share() < 0.5
    provider._arm_cases, provider._arm_hits = [40, 40], [30, 0]
    assert provider._mutate_share() == 0.25
    # the fixed share where no bounds are set
    assert _Mutating(None, seed=0, persist=False)._mutate_share() == 0.5


def test_a_share_by_rate_counts_the_learned_cases_of_a_run() -> None:
    made: list[RLCheckProvider] = []
    original = _SharingByRate.__init__

    def spy(self: _SharingByRate, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    _SharingByRate.__init__ = spy  # type: ignore[method-assign]
    try:
        inputs = _strictly_increasing_inputs("rlcheck-test-share", 3)
    finally:
        _SharingByRate.__init__ = original  # type: ignore[method-assign]
    assert len({tuple(x) for x in inputs}) >= 75
    (provider,) = made
    # both kinds of learned case ran, and each was credited with its new valid inputs
    assert provider._arm_cases[0] > 0 and provider._arm_cases[1] > 0
    assert 0 < sum(provider._arm_hits) <= sum(provider._arm_cases)
    assert provider._arm_hits[1] <= provider._arm_cases[1]


class _Duplicating(RLCheckProvider):
    """Records, per case, whether it was a duplication and whether it was valid."""

    default_tail = 0.0
    duplicate_until_valid = 5  # off by default (README)
    cases: ClassVar[list[tuple[bool, bool]]] = []

    def _learn(self, outcome: Any) -> None:
        type(self).cases.append((self._duplicating, outcome == "valid"))
        super()._learn(outcome)


class _NotDuplicating(_Duplicating):
    duplicate_until_valid = 0


AVAILABLE_PROVIDERS.setdefault("rlcheck-test-dup", f"{__name__}._Duplicating")
AVAILABLE_PROVIDERS.setdefault("rlcheck-test-nodup", f"{__name__}._NotDuplicating")


def _first_valid_of_equal_large_pairs(backend: type[_Duplicating], run_seed: int) -> int | None:
    backend.cases = []
    name = "rlcheck-test-dup" if backend is _Duplicating else "rlcheck-test-nodup"

    @seed(run_seed)
    @settings(backend=name, max_examples=5, phases=[Phase.generate], **QUIET)
    @given(st.tuples(st.integers(0, 2**40), st.integers(0, 2**40)))
    def test(pair: tuple[int, int]) -> None:
        # equal, and not a value Hypothesis draws often (a bound, a small number)
        assume(pair[0] == pair[1] and 2**20 < pair[0] < 2**40 - 2**20)

    with contextlib.suppress(Unsatisfiable):
        test()
    return next((i for i, (_, valid) in enumerate(backend.cases) if valid), None)


def test_before_the_first_valid_case_learned_cases_copy_spans_as_the_engine_does() -> None:
    # Two equal large integers: chance never makes them, a copy of one tuple element's
    # span onto the other does (the engine's generate_mutations_from does it too).
    for run_seed in range(3):
        first = _first_valid_of_equal_large_pairs(_Duplicating, run_seed)
        assert first is not None and first < 100
        assert _Duplicating.cases[first][0]  # a duplication made it
        # without: nothing valid in the run's first 200 cases
        first = _first_valid_of_equal_large_pairs(_NotDuplicating, run_seed)
        assert first is None or first > 200
    assert not any(dup for dup, _ in _NotDuplicating.cases)
