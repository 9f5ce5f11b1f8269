"""The provider never breaks a test (RELIABILITY rlcheck #2 and #10).

Three parts: every kind of Hypothesis test and every argument Hypothesis passes to a
provider, run on both rlcheck backends with no internal error; Hypothesis's own
conformance test (through ``compat``); and an exception injected at each provider hook,
after which the test still passes (one warning, the run on Hypothesis's own backend) and
a real failure still fails with its own exception, replayed on the default backend.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import (
    HealthCheck,
    assume,
    event,
    example,
    find,
    given,
    note,
    settings,
    target,
)
from hypothesis import strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import FlakyBackendFailure
from hypothesis.internal.intervalsets import IntervalSet
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import rlcheck.hypothesis.provider as provider_module
import rlcheck.learner as learner_module
from rlcheck.choice_tree import ChoiceTree
from rlcheck.errors import RLCheckWarning
from rlcheck.hypothesis import buckets
from rlcheck.hypothesis.compat import choice_permitted, run_conformance
from rlcheck.hypothesis_backend import (
    BackendStats,
    FastRLCheckProvider,
    RLCheckProvider,
)
from rlcheck.learner import Policy
from rlcheck.ledger import Ledger
from rlcheck.policy_store import DatabasePolicy
from rlcheck.state import SpanState

BACKENDS = ["rlcheck", "rlcheck-fast"]
QUIET = {"deadline": None, "database": None, "suppress_health_check": list(HealthCheck)}


pytestmark = pytest.mark.usefixtures("always_guided")  # no run steps aside


def _run_clean(test: Callable[[], None]) -> None:
    """Run ``test``; the backend must report no internal error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        test()
    ours = [str(w.message) for w in caught if issubclass(w.category, RLCheckWarning)]
    assert ours == []


# -- every kind of test, every argument ---------------------------------------------------


@st.composite
def _labelled(draw: st.DrawFn) -> tuple[int, bool]:
    # The JSON-schema library's pattern: string labels on draws inside a composite.
    n = draw(st.integers(0, 9), label="count")
    flag = draw(st.booleans(), label="exclusiveMinimum")
    draw(st.none(), label=("a", "tuple"))  # any object: Hypothesis passes it on
    return n, flag


TREES = st.recursive(
    st.integers(0, 3),
    lambda children: st.lists(children, max_size=3) | st.tuples(children, children),
    max_leaves=8,
)

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "string labels in composite": _labelled(),
    "recursive": TREES,
    "integers: bounds of every kind": st.tuples(
        st.integers(),
        st.integers(min_value=5),
        st.integers(max_value=-5),
        st.integers(-(10**30), 10**30),
        st.integers(3, 3),
    ),
    "floats: every option": st.tuples(
        st.floats(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(0.0, 1.0, exclude_min=True, exclude_max=True),
        st.floats(allow_subnormal=False),
        st.floats(width=16),
        st.floats(width=32, min_value=-1.0, max_value=2.0),
        st.floats(min_value=1e300),
        st.floats(-0.0, 0.0),
    ),
    "strings: alphabets and sizes": st.tuples(
        st.text(),
        st.text(alphabet="ab", min_size=2, max_size=4),
        st.text(st.characters(codec="ascii"), min_size=1),
        st.text(st.characters(categories=["Lu", "Nd"]), max_size=3),
        st.text(alphabet=st.sampled_from(["x"]), min_size=0, max_size=0),
        st.from_regex(r"[a-c]{2}\d", fullmatch=True),
    ),
    "bytes: sizes": st.tuples(
        st.binary(), st.binary(min_size=3, max_size=3), st.binary(max_size=1)
    ),
    "collections": st.tuples(
        st.lists(st.integers(0, 5), unique=True),
        st.sets(st.sampled_from("abcdef"), min_size=2),
        st.dictionaries(st.text(max_size=2), st.booleans(), max_size=4),
        st.frozensets(st.integers(0, 3)),
    ),
    "one_of, sampled_from, just, none": st.one_of(
        st.just(1), st.none(), st.sampled_from([1.5, "x", b"y"]), st.booleans()
    ),
    "filter and map": st.integers(0, 100).filter(lambda n: n % 3 == 0).map(str),
    "builds and from_type": st.builds(complex, st.floats(0, 1), st.floats(0, 1))
    | st.from_type(int),
    "datetimes, decimals, fractions, uuids": st.tuples(
        st.datetimes(), st.decimals(allow_nan=False), st.fractions(), st.uuids()
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_runs_with_no_internal_error(backend: str, name: str) -> None:
    strategy = STRATEGIES[name]

    @settings(backend=backend, max_examples=40, **QUIET)
    @given(strategy)
    def inner(value: Any) -> None:
        pass

    _run_clean(inner)


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_target_event_note_assume(backend: str) -> None:
    @settings(backend=backend, max_examples=60, **QUIET)
    @given(st.data(), st.lists(st.integers(0, 20)))
    def inner(data: st.DataObject, xs: list[int]) -> None:
        assume(len(xs) != 1)
        i = data.draw(st.integers(0, max(len(xs) - 1, 0)), label="index")
        data.draw(st.text(max_size=3))  # unlabelled
        target(float(len(xs)), label="length")
        target(-float(i))
        event("empty" if not xs else "nonempty")
        event("size", payload=len(xs))
        note(f"index {i}")

    _run_clean(inner)


@pytest.mark.parametrize("backend", BACKENDS)
def test_explicit_examples_and_filters(backend: str) -> None:
    seen: list[int] = []

    @settings(backend=backend, max_examples=30, **QUIET)
    @example(-1)
    @example(10**40)
    @given(st.integers().filter(lambda n: n % 2 == 0))
    def inner(n: int) -> None:
        seen.append(n)

    _run_clean(inner)
    assert seen[:2] == [-1, 10**40]


@pytest.mark.parametrize("backend", BACKENDS)
def test_find_runs_on_the_backend(backend: str) -> None:
    found = find(
        st.lists(st.integers(0, 9)),
        lambda xs: sum(xs) >= 12,
        settings=settings(backend=backend, max_examples=500, **QUIET),
    )
    assert sum(found) >= 12


class _Bank(RuleBasedStateMachine):
    """Bundles (consumed and not), an initialize rule, preconditions, invariants."""

    accounts = Bundle("accounts")

    def __init__(self) -> None:
        super().__init__()
        self.balances: dict[str, int] = {}
        self.closed = 0

    @initialize(target=accounts, name=st.just("first"))
    def open_first(self, name: str) -> str:
        self.balances[name] = 0
        return name

    @rule(target=accounts, name=st.text(alphabet="abc", min_size=1, max_size=3))
    def open_account(self, name: str) -> str:
        self.balances.setdefault(name, 0)
        return name

    @rule(name=accounts, amount=st.integers(1, 100))
    def deposit(self, name: str, amount: int) -> None:
        if name in self.balances:
            self.balances[name] += amount

    @precondition(lambda self: len(self.balances) > 1)
    @rule(name=consumes(accounts))
    def close(self, name: str) -> None:
        if self.balances.pop(name, None) is not None:
            self.closed += 1

    @rule(data=st.data())
    def peek(self, data: st.DataObject) -> None:
        if self.balances:
            name = data.draw(st.sampled_from(sorted(self.balances)), label="peek")
            assert self.balances[name] >= 0

    @invariant()
    def non_negative(self) -> None:
        assert all(b >= 0 for b in self.balances.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_stateful_machine_with_bundles_preconditions_invariants(backend: str) -> None:
    _run_clean(
        lambda: run_state_machine_as_test(
            _Bank, settings=settings(backend=backend, max_examples=25, **QUIET)
        )
    )


# -- the provider API called directly: every argument form --------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.data(),
    st.sampled_from([RLCheckProvider, FastRLCheckProvider]),
)
def test_every_draw_argument_gives_a_permitted_choice(data: st.DataObject, cls: type) -> None:
    provider = cls(None, seed=data.draw(st.integers(0, 2**32)), persist=False)
    lo = data.draw(st.none() | st.integers(-(2**70), 2**70))
    hi = data.draw(st.none() | st.integers(0, 2**40).map(lambda d: (lo or 0) + d))
    weights = None
    if lo is not None and hi is not None and 0 < hi - lo <= 50:
        values = data.draw(st.lists(st.integers(lo, hi), unique=True, min_size=1, max_size=5))
        weights = {v: 0.9 / len(values) for v in values}
    towards = data.draw(st.integers(-5, 5))
    low = data.draw(st.floats(allow_nan=False) | st.just(-math.inf))
    high = data.draw(st.floats(min_value=low, allow_nan=False) | st.just(math.inf))
    magnitude = data.draw(st.sampled_from([2.2250738585072014e-308, 5e-324, 1e-5, 1.0]))
    allow_nan = data.draw(st.booleans())
    floats = {
        "min_value": low,
        "max_value": high,
        "allow_nan": allow_nan,
        "smallest_nonzero_magnitude": magnitude,
    }
    # Hypothesis never asks for an empty float range (all of it below the magnitude).
    assume(any(choice_permitted(v, floats) for v in (low, high, 0.0, magnitude, -magnitude)))
    intervals = IntervalSet.from_string(data.draw(st.text(min_size=0, max_size=6)))
    size_lo = data.draw(st.integers(0, 5 if len(intervals) else 0))  # as Hypothesis asks
    size_hi = data.draw(st.integers(size_lo, 60))
    with provider.per_test_case_context_manager():
        provider.span_start(data.draw(st.integers(0, 2**64 - 1) | st.text(max_size=3)))
        b = provider.draw_boolean(data.draw(st.floats(0, 1)))
        n = provider.draw_integer(lo, hi, weights=weights, shrink_towards=towards)
        x = provider.draw_float(**floats)
        s = provider.draw_string(intervals, min_size=size_lo, max_size=size_hi)
        y = provider.draw_bytes(size_lo, size_hi)
        provider.span_end(data.draw(st.booleans()))
        provider.span_end(False)  # one more than opened: ignored
    assert isinstance(b, bool)
    assert choice_permitted(
        n, {"min_value": lo, "max_value": hi, "weights": weights, "shrink_towards": towards}
    )
    assert choice_permitted(x, floats)
    assert choice_permitted(s, {"intervals": intervals, "min_size": size_lo, "max_size": size_hi})
    assert choice_permitted(y, {"min_size": size_lo, "max_size": size_hi})
    assert provider._broken is None


@pytest.mark.parametrize("cls", [RLCheckProvider, FastRLCheckProvider])
def test_hypothesis_conformance_test_quick(cls: type) -> None:
    run_conformance(cls, max_examples=15, check_findability=False)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [RLCheckProvider, FastRLCheckProvider])
def test_hypothesis_conformance_test_full(cls: type) -> None:
    run_conformance(cls)


# -- an exception injected at each hook ---------------------------------------------------


def _injectors() -> dict[str, tuple[Any, str]]:
    """Where to inject, per provider hook: (owner, attribute) of what the hook calls."""
    return {
        "span_start": (SpanState, "push"),
        "span_end": (SpanState, "pop"),
        "per_test_case begin (first case)": (provider_module, "current_test"),
        "per_test_case begin": (ChoiceTree, "begin"),
        "per_test_case end: ledger": (Ledger, "record"),
        "per_test_case end: learning": (Policy, "learn_rows"),
        "draw_boolean/draw_integer: chooser": (learner_module, "_sample"),
        "every draw: choice tree": (ChoiceTree, "step"),
        "draw_integer: buckets": (buckets, "integer_buckets"),
        "draw_float: buckets": (buckets, "float_buckets"),
        "draw_float: sampling": (buckets, "sample_range"),
        "draw_string: classes": (buckets, "char_classes"),
        "draw_string/draw_bytes: sizes": (RLCheckProvider, "_sizes"),
        "realize": (RLCheckProvider, "_should_discard"),
        "statistics": (BackendStats, "update"),
        "policy load": (DatabasePolicy, "load"),
        "policy save": (DatabasePolicy, "save"),
    }


INJECTED = "injected rlcheck failure"

# Every primitive draw, spans with int and string labels, a filter.
EVERYTHING = st.tuples(
    st.booleans(),
    st.integers(0, 9),
    st.integers(),
    st.floats(),
    st.text(max_size=4),
    st.binary(max_size=4),
    _labelled(),
).filter(lambda t: t[1] != 7)


def _inject(monkeypatch: pytest.MonkeyPatch, where: str, after: int) -> list[int]:
    """Make the hook's helper raise from its ``after``-th call on; returns the call count."""
    owner, name = _injectors()[where]
    original = getattr(owner, name)
    calls = [0]

    def broken(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] > after:
            raise RuntimeError(INJECTED)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, broken)
    return calls


@pytest.mark.parametrize("after", [0, 20], ids=["at once", "later"])
@pytest.mark.parametrize("where", sorted(_injectors()))
def test_an_error_at_any_hook_falls_back_and_the_test_passes(
    where: str, after: int, monkeypatch: pytest.MonkeyPatch, stats: BackendStats, tmp_path: Path
) -> None:
    calls = _inject(monkeypatch, where, after)
    runs = 0

    # A directory database, so the policy hooks run.
    @settings(
        backend="rlcheck",
        max_examples=40,
        deadline=None,
        database=DirectoryBasedExampleDatabase(tmp_path),
        suppress_health_check=list(HealthCheck),
    )
    @given(EVERYTHING)
    def inner(value: Any) -> None:
        nonlocal runs
        runs += 1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        inner()
        del inner  # the last save runs when the provider is collected
    ours = [w for w in caught if issubclass(w.category, RLCheckWarning)]
    assert runs >= 40
    if calls[0] > after:  # the helper was reached past the injection point
        assert len(ours) == 1, [str(w.message) for w in ours]
        assert INJECTED in str(ours[0].message)
        if where != "statistics":  # the statistics say so too, unless they are broken
            (test_stats,) = stats.as_dict().values()
            assert test_stats.fallback and INJECTED in test_stats.reason


@pytest.mark.parametrize("where", sorted(_injectors()))
def test_an_error_at_any_hook_never_fails_a_test_under_warnings_as_errors(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _inject(monkeypatch, where, 3)

    @settings(backend="rlcheck", max_examples=30, **QUIET)
    @given(EVERYTHING)
    def inner(value: Any) -> None:
        pass

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inner()


# The default suite replays a failure after an injected error at a few hooks (each run
# shrinks a failure: seconds); every hook under the slow marker.
_REPLAYED_FAST = {"span_start", "every draw: choice tree", "per_test_case end: learning", "realize"}


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(w, marks=() if w in _REPLAYED_FAST else pytest.mark.slow)
        for w in sorted(_injectors())
    ],
)
def test_a_real_failure_still_fails_with_its_own_error_after_an_injected_one(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _inject(monkeypatch, where, 5)

    @settings(backend="rlcheck", max_examples=300, **QUIET)
    @given(st.integers(0, 10**6), EVERYTHING)
    def inner(n: int, value: Any) -> None:
        assert n < 1000, "the planted bug"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RLCheckWarning)
        with pytest.raises(AssertionError, match="the planted bug") as info:
            inner()
    # Replayed on (and shrunk by) Hypothesis's own backend, not a flaky-backend error.
    assert not isinstance(info.value, FlakyBackendFailure)
    assert "n=1000" in "\n".join(getattr(info.value, "__notes__", []))
