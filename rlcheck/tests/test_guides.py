"""Guides: the random baseline, the RL guide (each state abstraction), policy files."""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rlcheck
from rlcheck import (
    AncestorState,
    Gen,
    InvalidArgument,
    LabelledAncestorState,
    RandomGuide,
    RLCheckWarning,
    RLGuide,
    SequenceState,
    learner,
)
from rlcheck.learner import Policy, QTable, reward_for
from rlcheck.state import TOKEN_TYPES


def scoped(g: Gen) -> tuple[Any, ...]:
    """value, then a child in a LEFT scope: enough to tell the abstractions apart."""
    v = g.integer(0, 2, label="value")
    with g.scope("LEFT"):
        w = g.integer(0, 2, label="value")
    return (v, w, g.boolean(label="flag"))


def test_random_guide_is_uniform_and_seeded() -> None:
    g = Gen(RandomGuide(seed=4))
    picks = [g.integer(0, 3) for _ in range(4000)]
    assert all(850 < picks.count(i) < 1150 for i in range(4))
    again = Gen(RandomGuide(seed=4))
    assert [again.integer(0, 3) for _ in range(4000)] == picks
    other = RandomGuide(seed=99)
    other.reseed(4)
    assert [Gen(other).integer(0, 3) for _ in range(4000)] == picks


def test_rl_guide_accepts_names_and_instances() -> None:
    assert isinstance(RLGuide().abstraction, LabelledAncestorState)
    assert isinstance(RLGuide("sequence", k=7).abstraction, SequenceState)
    assert RLGuide("sequence", k=7).abstraction.k == 7
    inst = AncestorState(k=2)
    assert RLGuide(inst).abstraction is inst
    with pytest.raises(InvalidArgument, match="state=3"):
        RLGuide(3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="'tree'"):
        RLGuide("tree")
    with pytest.raises(InvalidArgument, match="epsilon"):
        RLGuide(epsilon=2.0)
    d = RLGuide("ancestor", k=3, seed=5).describe()
    assert d == {"guide": "rl", "seed": 5, "epsilon": 0.25, "state": "ancestor", "k": 3}


@pytest.mark.parametrize(
    ("state", "child_state", "flag_state"),
    [
        # the child's value sees the parent's value; the flag after the scope also sees the
        # child's value in sequence, but not along the ancestor path
        ("sequence", lambda v, w: (v,), lambda v, w: (v, w)),
        ("ancestor", lambda v, w: (v,), lambda v, w: (v,)),
        ("labelled", lambda v, w: (v, "LEFT"), lambda v, w: (v,)),
    ],
)
def test_rl_guide_keys_values_by_its_abstraction(
    state: str, child_state: Any, flag_state: Any
) -> None:
    guide = RLGuide(state, k=4, seed=0)
    guide.start_episode()
    v, w, _ = scoped(Gen(guide))
    guide.end_episode(valid=True, new=True)
    assert {s for s, _ in guide.policy.table("value").items()} == {(), child_state(v, w)}
    assert {s for s, _ in guide.policy.table("flag").items()} == {flag_state(v, w)}
    assert guide.policy.table("value").value((), v) == (20.0, 1)


def test_rewards_follow_the_rlcheck_scheme() -> None:
    guide = RLGuide("sequence", seed=0)
    for valid, new in [(True, True), (True, False), (False, False)]:
        guide.start_episode()
        Gen(guide).boolean(label="b")
        guide.end_episode(valid=valid, new=new)
    row = next(iter(guide.policy.table("b").items()))[1]
    visits = row[1::2]
    assert sum(visits) == 3
    q_weighted = sum(q * n for q, n in zip(row[::2], row[1::2], strict=True))
    assert q_weighted == pytest.approx(20.0 + 0.0 - 1.0)


def collect(guide: rlcheck.Guide, trials: int = 300) -> list[Any]:
    seen: list[Any] = []

    def check(v: Any) -> bool:
        seen.append(v)
        return v[0] < v[1]

    rlcheck.run(scoped, check, guide=guide, trials=trials)
    return seen


@pytest.mark.parametrize("state", ["sequence", "ancestor", "labelled"])
def test_rl_guide_is_deterministic_under_a_seed(state: str) -> None:
    a = collect(RLGuide(state, seed=11))
    assert collect(RLGuide(state, seed=11)) == a
    assert collect(RLGuide(state, seed=12)) != a
    reseeded = RLGuide(state, seed=12)
    reseeded.reseed(11)
    assert collect(reseeded) == a


def test_rl_guide_steers_towards_valid_inputs() -> None:
    def digits(g: Gen) -> tuple[int, ...]:
        return tuple(g.integer(0, 9, label=f"d{i}") for i in range(3))

    def check(d: tuple[int, ...]) -> bool:
        return d[0] == 7  # 10 % of random inputs; 100 distinct valid ones

    rl = rlcheck.run(digits, check, guide=RLGuide(seed=0), trials=2000)
    rnd = rlcheck.run(digits, check, guide=RandomGuide(seed=0), trials=2000)
    assert rnd.valid < 300
    assert rl.valid > 2 * rnd.valid
    assert rl.unique_valid >= rnd.unique_valid


class PlainRLGuide(rlcheck.Guide):
    """The RL guide written with the plain rule, one call per step: Policy.choose at each
    choice, Policy.learn at the end of the episode, the abstraction's own methods."""

    def __init__(self, state: str, k: int, seed: int) -> None:
        self.abstraction = rlcheck.make_state(state, k=k)
        self.policy = Policy(seed=seed)
        self.visits: list[tuple[Any, Any, int]] = []

    def start_episode(self) -> None:
        self.abstraction.reset()
        self.visits = []

    def choose(self, point: Any, options: Any) -> int:
        state = self.abstraction.state
        index = self.policy.choose(point, state, len(options))
        if len(options) > 1:
            self.visits.append((point, state, index))
        token = options[index]
        self.abstraction.record(token if type(token) in TOKEN_TYPES else index)
        return index

    def enter_scope(self, label: Any) -> None:
        self.abstraction.push(label)

    def exit_scope(self) -> None:
        self.abstraction.pop()

    def end_episode(self, *, valid: bool, new: bool) -> None:
        self.policy.learn(self.visits, reward_for(valid=valid, new=new))


def expression(g: Gen, depth: int = 0) -> Any:
    """Every kind of choice: integers, booleans, non-token options, single options, scopes."""
    op = g.choice([("+",), ("-",), ("leaf",)], label="op") if depth < 3 else ("leaf",)
    if op == ("leaf",):
        return g.integer(0, 6, label="leaf") + g.integer(7, 7, label="one option")
    with g.scope("L"):
        left = expression(g, depth + 1)
    with g.scope(("R", depth)):
        right = expression(g, depth + 1)
    return (op[0], left, right, g.boolean(label="flag"))


@pytest.mark.parametrize(("state", "k"), [("sequence", 4), ("ancestor", 4), ("labelled", 5)])
def test_fast_path_chooses_and_learns_exactly_like_the_plain_rule(state: str, k: int) -> None:
    # The guide's fused closure (cached greedy actions, rows held by the visits) against
    # the plain Policy.choose / Policy.learn: same seed, same inputs, same Q-tables.
    def check(value: Any) -> bool:
        return str(value).count("6") < 2

    fast_inputs: list[Any] = []
    plain_inputs: list[Any] = []
    fast, plain = RLGuide(state, k=k, seed=5), PlainRLGuide(state, k, seed=5)
    rlcheck.run(expression, lambda v: fast_inputs.append(v) or check(v), guide=fast, trials=3000)
    rlcheck.run(expression, lambda v: plain_inputs.append(v) or check(v), guide=plain, trials=3000)
    assert fast_inputs == plain_inputs
    assert len(set(map(str, fast_inputs))) > 300  # the runs explored, not one input repeated
    assert fast.policy.to_dict() == plain.policy.to_dict()


class _Forgetful:
    """Start every ``every``-th episode from an empty policy (as RestartingRLGuide does)."""

    every = 700
    episodes = 0

    def start_episode(self) -> None:
        self.episodes += 1
        if self.episodes % self.every == 0:
            self.policy.load_dict(Policy().to_dict())  # type: ignore[attr-defined]
        super().start_episode()  # type: ignore[misc]


class _ForgetfulRL(_Forgetful, RLGuide):
    pass


class _ForgetfulPlain(_Forgetful, PlainRLGuide):
    pass


@pytest.mark.parametrize("state", ["ancestor", "labelled"])
def test_fast_path_follows_reloads_and_its_own_memory_bound(
    state: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The driver memoises rows in its interned states: a load_dict (a restart) detaches
    # them, and past _MAX_NODES states it starts over; neither may change a choice.
    monkeypatch.setattr(learner, "_MAX_NODES", 50)
    fast_inputs: list[Any] = []
    plain_inputs: list[Any] = []
    fast, plain = _ForgetfulRL(state, k=4, seed=3), _ForgetfulPlain(state, 4, seed=3)
    rlcheck.run(expression, lambda v: fast_inputs.append(v) or True, guide=fast, trials=2000)
    rlcheck.run(expression, lambda v: plain_inputs.append(v) or True, guide=plain, trials=2000)
    assert fast_inputs == plain_inputs
    assert fast.policy.to_dict() == plain.policy.to_dict()


def test_fast_path_uses_the_tables_row_after_an_eviction() -> None:
    # A table of 3 states over 5 windows: rows are evicted all the time, and the row each
    # choice reads and credits must be the table's (a memoised evicted row is dropped).
    policy = Policy(seed=0, max_states=3)
    window = rlcheck.make_state("sequence", k=1)
    visits: list[Any] = []
    driver = policy.window_driver(visits, window)
    for _ in range(300):
        driver.reset()
        visits.clear()
        for _ in range(4):
            state = window.state
            driver.choose("p", range(5))
            assert policy.table("p")._rows[state] is visits[-1][0]
        policy.learn_rows(visits, 20.0)
    assert len(policy.table("p")) == 3


def reference_best(row: list[float], n: int, rng: random.Random) -> int:
    """The greedy rule written plainly: highest Q, unvisited = 0, ties at random."""
    qs = [row[2 * a] if 2 * a < len(row) else 0.0 for a in range(n)]
    ties = [a for a in range(n) if qs[a] == max(qs)]
    return ties[0] if len(ties) == 1 else ties[int(rng.random() * len(ties))]


@given(
    st.lists(st.tuples(st.integers(0, 6), st.sampled_from([20.0, 0.0, -1.0])), min_size=1),
    st.integers(1, 8),
    st.integers(0, 2**32),
)
def test_greedy_scan_matches_the_plain_rule(
    updates: list[tuple[int, float]], n: int, seed: int
) -> None:
    t = QTable()
    for action, ret in updates:
        t.update("s", action, ret)
    row = next(iter(t.items()))[1]
    assert t.best("s", n, random.Random(seed)) == reference_best(row, n, random.Random(seed))


def test_policy_save_and_load_through_the_guide(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    trained = RLGuide("ancestor", seed=0)
    rlcheck.run(scoped, lambda v: v[0] < v[1], guide=trained, trials=200)
    trained.save(path)
    fresh = RLGuide("ancestor", seed=1)
    assert fresh.load(path)
    assert fresh.policy.to_dict() == trained.policy.to_dict()
    # another abstraction: incompatible, ignored with one warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not RLGuide("sequence").load(path)
    assert len(caught) == 1 and issubclass(caught[0].category, RLCheckWarning)
    assert "state='ancestor'" in str(caught[0].message)


def test_policy_file_persists_learning_across_campaigns(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    first = RLGuide(seed=0, policy_file=path)
    rlcheck.run(scoped, lambda v: v[0] < v[1], guide=first, trials=300)
    assert path.exists()
    second = RLGuide(seed=1, policy_file=path)
    second.start_campaign(rlcheck.campaign._name_of(scoped))
    assert second.policy.to_dict() == first.policy.to_dict()
    # a corrupt file: the campaign still runs, learning from scratch, and rewrites it
    path.write_text('{"format": "rlcheck-policy-file", "vers')
    with pytest.warns(RLCheckWarning, match="not valid JSON"):
        result = rlcheck.run(
            scoped, lambda v: True, guide=RLGuide(seed=2, policy_file=path), trials=50
        )
    assert result.trials == 50
    fixed = RLGuide(seed=3)
    fixed.start_campaign(rlcheck.campaign._name_of(scoped))
    assert fixed.load(path)


def test_policy_for_another_generator_is_not_loaded(tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    rlcheck.run(scoped, lambda v: True, guide=RLGuide(seed=0, policy_file=path), trials=20)

    def other(g: Gen) -> bool:
        return g.boolean()

    with pytest.warns(RLCheckWarning, match="generator="):
        rlcheck.run(other, bool, guide=RLGuide(seed=0, policy_file=path), trials=20)


def test_reward_helper_matches_design() -> None:
    assert [reward_for(valid=v, new=n) for v, n in [(1, 1), (1, 0), (0, 0)]] == [20.0, 0.0, -1.0]


def test_state_cap_evicts_oldest_first_and_survives_reloads() -> None:
    p = Policy(seed=0, max_states=3)
    for s in ("a", "b", "c"):
        p.learn([("pt", s, 0)], 1.0)
    p.learn([("pt", "a", 0)], 1.0)  # an update does not make a state younger
    p.learn([("pt", "d", 0)], 1.0)
    assert [s for s, _ in p.table("pt").items()] == ["b", "c", "d"]
    q = Policy(seed=0, max_states=3)
    q.load_dict(p.to_dict())
    visits: list[tuple[list[float], int]] = []
    q.choose_row("pt", "e", 2, visits)  # the fast path inserts too
    q.learn_rows(visits, 1.0)
    assert [s for s, _ in q.table("pt").items()] == ["c", "d", "e"]


def test_eviction_stays_cheap_on_a_full_table() -> None:
    # Taking a dict's first key after many deletions is O(deleted): evicting that way, these
    # 100 000 evictions took 3.3 s of CPU on the (loaded) development machine; with the
    # deque of insertion order, 0.2 s.
    import time

    t = QTable(max_states=50_000)
    start = time.process_time()
    for s in range(150_000):
        t.update(s, 0, 1.0)
    assert time.process_time() - start < 1.5
    assert len(t) == 50_000 and t.value(149_999, 0) == (1.0, 1) and t.value(99_999, 0)[1] == 0


def test_a_policy_that_cannot_be_saved_does_not_lose_the_campaign(tmp_path: Path) -> None:
    def odd_labels(g: Gen) -> bool:
        return g.boolean(label=frozenset({"not", "json"}))

    guide = RLGuide(seed=0, policy_file=tmp_path / "p.json")
    with pytest.warns(RLCheckWarning, match="could not save the learned policy"):
        result = rlcheck.run(odd_labels, bool, guide=guide, trials=50)
    assert result.trials == 50
    missing_dir = RLGuide(seed=0, policy_file=tmp_path / "no" / "such" / "dir" / "p.json")
    with pytest.warns(RLCheckWarning, match="could not save"):
        rlcheck.run(scoped, bool, guide=missing_dir, trials=20)
