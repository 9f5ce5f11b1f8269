"""The learning rule: MC running means, ε-greedy selection, bounded tables, persistence."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcheck.errors import InvalidArgument, PolicyFileError
from rlcheck.learner import Policy, QTable, Visit, reward_for
from rlcheck.state import SequenceState


def test_update_is_running_mean_of_returns() -> None:
    t = QTable()
    for r in (20.0, 0.0, -1.0, 20.0):
        t.update("s", 2, r)
    q, n = t.value("s", 2)
    assert n == 4
    assert q == pytest.approx((20.0 + 0.0 - 1.0 + 20.0) / 4)
    assert t.value("s", 0) == (0.0, 0)
    assert t.value("other", 0) == (0.0, 0)


def test_unvisited_action_beats_negative_one() -> None:
    t = QTable()
    t.update("s", 0, -1.0)
    rng = random.Random(0)
    assert {t.best("s", 2, rng) for _ in range(50)} == {1}


def test_ties_are_broken_at_random() -> None:
    t = QTable()
    t.update("s", 0, 5.0)
    t.update("s", 1, 5.0)
    rng = random.Random(0)
    assert {t.best("s", 3, rng) for _ in range(200)} == {0, 1}


def test_unseen_state_is_uniform() -> None:
    rng = random.Random(0)
    picks = [QTable().best("nowhere", 4, rng) for _ in range(4000)]
    for a in range(4):
        assert 850 < picks.count(a) < 1150


def test_greedy_policy_follows_learned_values() -> None:
    p = Policy(epsilon=0.0, seed=0)
    p.learn([("pt", "s", 3)], 20.0)
    assert all(p.choose("pt", "s", 5) == 3 for _ in range(20))


def test_epsilon_explores() -> None:
    p = Policy(epsilon=0.25, seed=0)
    p.learn([("pt", "s", 0)], 20.0)
    picks = [p.choose("pt", "s", 4) for _ in range(4000)]
    # greedy 0.75 + 0.25/4 explored onto 0
    assert picks.count(0) / 4000 == pytest.approx(0.8125, abs=0.03)


def test_same_seed_same_choices() -> None:
    def run(seed: int) -> list[int]:
        p = Policy(seed=seed)
        out = []
        for i in range(200):
            a = p.choose("pt", i % 3, 5)
            p.learn([("pt", i % 3, a)], reward_for(valid=a % 2 == 0, new=i % 5 == 0))
            out.append(a)
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_tables_are_bounded() -> None:
    t = QTable(max_states=10)
    for s in range(1000):
        t.update(s, 0, 1.0)
    assert len(t) == 10
    assert t.value(999, 0) == (1.0, 1)
    assert t.value(0, 0) == (0.0, 0)


def test_bad_arguments_rejected() -> None:
    with pytest.raises(InvalidArgument, match="epsilon"):
        Policy(epsilon=1.5)
    with pytest.raises(InvalidArgument, match="n_actions"):
        Policy().choose("p", (), 0)
    with pytest.raises(InvalidArgument, match="max_states"):
        QTable(max_states=0)


keys = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.tuples(inner, inner) | st.tuples(inner),
    max_leaves=6,
)


@given(st.lists(st.tuples(keys, keys, st.integers(0, 5), st.sampled_from([20.0, 0.0, -1.0]))))
def test_policy_round_trips_through_json(visits: list[tuple[object, object, int, float]]) -> None:
    p = Policy(seed=0)
    for point, state, action, reward in visits:
        p.learn([(point, state, action)], reward)  # type: ignore[list-item]
    q = Policy(seed=0)
    q.load_dict(json.loads(json.dumps(p.to_dict())))
    assert q.to_dict() == p.to_dict()


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"format": "x"},
        {"format": "rlcheck-policy", "version": 99, "tables": []},
        {"format": "rlcheck-policy", "version": 1, "tables": [[1, [["s", [1.0, -3.0]]]]]},
        {"format": "rlcheck-policy", "version": 1, "tables": [[1, [["s", [1.0]]]]]},
        {"format": "rlcheck-policy", "version": 1, "tables": "garbage"},
    ],
)
def test_corrupt_snapshot_rejected_and_policy_unchanged(data: object) -> None:
    p = Policy(seed=0)
    p.learn([("pt", "s", 1)], 20.0)
    before = p.to_dict()
    with pytest.raises(PolicyFileError):
        p.load_dict(data)
    assert p.to_dict() == before


class _OneState(SequenceState):
    """A window that never moves: every choice reads (and credits) the same row."""

    __slots__ = ()

    def record(self, token: object) -> None:
        pass


@given(
    st.lists(st.tuples(st.integers(2, 6), st.sampled_from([20.0, 0.0, -1.0, 3.5])), max_size=60),
    st.sampled_from([0.0, 0.25]),
    st.integers(0, 2**32),
)
def test_cached_greedy_action_is_what_a_scan_finds(
    steps: list[tuple[int, float]], epsilon: float, seed: int
) -> None:
    # One row chosen and credited over and over, with the number of options changing
    # (the cache is only valid for the n it was made for): the fast path's choices and
    # values are the plain rule's.
    fast, plain = Policy(epsilon=epsilon, seed=seed), Policy(epsilon=epsilon, seed=seed)
    visits: list[Visit] = []
    choose = fast.window_driver(visits, _OneState(k=1)).choose
    for n, reward in steps:
        action = choose("p", range(n))
        assert action == plain.choose("p", (), n)
        fast.learn_rows(visits, reward)
        visits.clear()
        plain.learn([("p", (), action)], reward)
    assert fast.to_dict() == plain.to_dict()


@given(
    st.lists(st.tuples(st.integers(2, 4), st.sampled_from([20.0, 0.0, -1.0])), max_size=60),
    st.sampled_from([0.0, 0.25, 1.0]),
    st.booleans(),
    st.integers(0, 2**32),
)
def test_prior_chooser_is_the_plain_rule_with_a_prior(
    steps: list[tuple[int, float]], epsilon: float, with_prior: bool, seed: int
) -> None:
    # The Hypothesis backend's fast path (exploration following a prior, the yes/no
    # twist) makes the plain rule's choices from the same seed and learns the same values.
    fast, plain = Policy(epsilon=epsilon, seed=seed), Policy(epsilon=epsilon, seed=seed)
    visits: list[Visit] = []
    choose = fast.prior_chooser(visits, _OneState(k=1))
    for n, reward in steps:
        weights = [0.1 + i for i in range(n)] if with_prior else None
        cumulative = tuple(itertools.accumulate(weights)) if weights else None
        action = choose("p", n, cumulative)
        assert action == plain.choose("p", (), n, weights)
        fast.learn_rows(visits, reward)
        visits.clear()
        plain.learn([("p", (), action)], reward)
    assert fast.to_dict() == plain.to_dict()


def test_exploration_follows_the_prior() -> None:
    policy = Policy(epsilon=1.0, seed=0)
    picks = [policy.choose("p", (), 3, [0.0, 1.0, 3.0]) for _ in range(4000)]
    assert picks.count(0) == 0 and 0.7 < picks.count(2) / 4000 < 0.8
    # Yes/no with a prior: once every tried answer scored < 0, the prior is followed.
    greedy = Policy(epsilon=0.0, seed=0)
    greedy.learn([("more", (), 0)], -1.0)
    picks = [greedy.choose("more", (), 2, [0.9, 0.1]) for _ in range(2000)]
    assert 0.85 < picks.count(0) / 2000 < 0.95


def test_window_driver_records_tokens_and_indices() -> None:
    window = SequenceState(k=3)
    choose = Policy(seed=0).window_driver([], window).choose
    marker = object()
    choose("one", ("only",))
    choose("objects", (marker, marker))  # not a token type: the index stands in
    choose("ints", range(5, 6))
    assert window.state[0] == "only" and window.state[1] in (0, 1) and window.state[2] == 5


def test_policy_settings_are_read_only() -> None:
    p = Policy(epsilon=0.1, seed=0)
    with pytest.raises(AttributeError):
        p.epsilon = 0.5  # type: ignore[misc]
    p.rng.seed(3)  # reseeding in place is how to restart the stream
    assert p.epsilon == 0.1


def test_non_finite_values_in_a_snapshot_are_rejected() -> None:
    data = {"format": "rlcheck-policy", "version": 1, "tables": [[1, [["s", [float("nan"), 1.0]]]]]}
    with pytest.raises(PolicyFileError, match="malformed"):
        Policy().load_dict(data)


@pytest.mark.parametrize("row", [[10**400, 1], [1.0, 10**400], [10**400, 10**400]])
def test_an_integer_too_large_for_a_float_in_a_snapshot_is_rejected(row: list[int]) -> None:
    # JSON holds integers of any size: a stored row with one must be refused as malformed
    # (a skipped value), not raise OverflowError out of the policy store's load.
    data = {"format": "rlcheck-policy", "version": 1, "tables": [[1, [["s", row]]]]}
    with pytest.raises(PolicyFileError, match="malformed"):
        Policy().merge_dict(data)
    with pytest.raises(PolicyFileError, match="malformed"):
        Policy().load_dict(data)


# -- a run's load: the bulk path against the row-by-row reference ----------------------

_ROWS = st.lists(
    st.tuples(
        st.integers(0, 6),  # states: few, so contributions overlap and tables repeat one
        st.lists(
            st.tuples(st.integers(-20, 20).map(float), st.integers(0, 9).map(float)),
            min_size=1,
            max_size=3,
        ).map(lambda pairs: [x for pair in pairs for x in pair]),
    ),
    max_size=8,
)
_CONTRIBUTIONS = st.lists(
    st.lists(st.tuples(st.sampled_from("abc"), _ROWS), max_size=4), min_size=1, max_size=3
)


def _row_by_row(monkeypatch: pytest.MonkeyPatch, policy: Policy, contributions: list) -> object:
    """The reference: each row merged on its own (no bulk fill), then a copy of each row."""
    with monkeypatch.context() as m:
        m.setattr(QTable, "_fill", lambda self, rows: False)
        for tables in contributions:
            policy.merge_tables(tables)
    return policy.mark()


@given(contributions=_CONTRIBUTIONS, caps=st.sampled_from([(10_000, 200_000), (2, 3)]))
def test_a_load_in_bulk_is_the_merge_row_by_row(contributions: list, caps: tuple) -> None:
    max_tables, max_states = caps
    with pytest.MonkeyPatch.context() as monkeypatch:
        plain = Policy(seed=0, max_tables=max_tables, max_states=max_states)
        reference = _row_by_row(monkeypatch, plain, contributions)
    bulk = Policy(seed=0, max_tables=max_tables, max_states=max_states)
    mark = bulk.merge_contributions(json.loads(json.dumps(contributions)))
    assert bulk.tables_since() == plain.tables_since()  # same rows, same order
    assert {p: t._order for p, t in bulk._tables.items()} == {  # same eviction order
        p: t._order for p, t in plain._tables.items()
    }
    assert mark.rows == reference.rows
    # What is learned next is told apart from what was loaded alike.
    for policy in (bulk, plain):
        for point in "ab":
            policy.learn([(point, 0, 1), (point, 9, 0)], 20.0)
    assert bulk.tables_since(mark) == plain.tables_since(reference)


def test_a_load_marks_the_incoming_rows_and_copies_only_merged_ones() -> None:
    first = [("p", [(0, [1.0, 1.0]), (1, [2.0, 1.0])])]
    second = [("p", [(1, [4.0, 1.0])])]
    policy = Policy(seed=0)
    mark = policy.merge_contributions([first, second])
    assert mark.rows["p"][0] is first[0][1][0][1]  # from one contribution: not copied
    assert mark.rows["p"][1] == [3.0, 2.0]  # merged from both: the merged row, a copy
    row = policy.table("p")._rows[0]
    assert row is not mark.rows["p"][0]  # the table's row is its own
    policy.learn([("p", 0, 0)], 10.0)
    assert mark.rows["p"][0] == [1.0, 1.0]
    assert policy.tables_since(mark) == [("p", [(0, [10.0, 1.0])])]


def _visits_until_below_zero(step: float) -> int:
    """Visits of a choice credited +20 once (a new input), then -1 each time (every
    extension invalid), until its value falls below an untried choice's 0."""
    p = Policy(seed=0)
    row = p.table("point").row("s")
    row.extend([0.0, 0.0])  # action 0's Q and count, at 3 and 4 (as a chooser grows it)
    p.learn_rows([(row, 3)], 20.0, step=step)
    visits = 1
    while p.table("point").value("s", 0)[0] >= 0.0:
        p.learn_rows([(row, 3)], -1.0, step=step)
        visits += 1
    return visits


def test_a_step_floor_forgets_a_reward_that_stopped_coming() -> None:
    # the plain running mean keeps the +20 above 0 for 20 visits; a floor of 1/2 for 5
    assert _visits_until_below_zero(0.0) == 21
    assert _visits_until_below_zero(0.25) == 10
    assert _visits_until_below_zero(0.5) == 6


def test_a_step_floor_is_the_running_mean_over_its_first_visits() -> None:
    plain, floored = Policy(seed=0), Policy(seed=0)
    rows = [plain.table("p").row("s"), floored.table("p").row("s")]
    for row in rows:
        row.extend([0.0, 0.0])
    for r in (20.0, 0.0, -1.0, 20.0):  # 4 visits: 1/N >= 1/4 throughout
        plain.learn_rows([(rows[0], 3)], r)
        floored.learn_rows([(rows[1], 3)], r, step=0.25)
    assert plain.table("p").value("s", 0) == floored.table("p").value("s", 0)
    plain.learn_rows([(rows[0], 3)], -1.0)
    floored.learn_rows([(rows[1], 3)], -1.0, step=0.25)
    q = (20.0 + 0.0 - 1.0 + 20.0) / 4
    assert plain.table("p").value("s", 0) == (pytest.approx(q + (-1.0 - q) / 5), 5)
    assert floored.table("p").value("s", 0) == (pytest.approx(q + (-1.0 - q) / 4), 5)
