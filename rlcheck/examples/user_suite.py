"""A user's Hypothesis suite, for ``pytest --rlcheck`` under pytest-xdist.

    cd rlcheck && pytest examples/user_suite.py -n 2 --rlcheck      # or without --rlcheck

Composite strategies, strict ``assume()`` filters (their health check suppressed, as the
README advises), ``st.data()`` with ``target()``, a parametrized test and a stateful machine
with a bundle, a precondition and an invariant. Every test passes on both backends; the
end of the session prints one table on the controller with every test's row.
"""

import json
from collections import OrderedDict
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, assume, given, note, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)


@st.composite
def intervals(draw):
    lo = draw(st.integers(-100, 100))
    hi = draw(st.integers(lo, lo + 50))
    return lo, hi


@st.composite
def json_docs(draw, depth=3):
    if depth == 0:
        return draw(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=5)))
    kind = draw(st.sampled_from(["leaf", "list", "dict"]))
    if kind == "leaf":
        return draw(json_docs(depth=0))
    if kind == "list":
        return draw(st.lists(json_docs(depth=depth - 1), max_size=3))
    return draw(st.dictionaries(st.text(max_size=3), json_docs(depth=depth - 1), max_size=3))


@given(intervals(), intervals())
def test_interval_overlap_is_symmetric(a, b):
    def overlap(x: tuple[int, int], y: tuple[int, int]) -> bool:
        return max(x[0], y[0]) <= min(x[1], y[1])

    assert overlap(a, b) == overlap(b, a)


@settings(suppress_health_check=[HealthCheck.filter_too_much])
@given(st.lists(st.integers(0, 20), min_size=3))
def test_sorted_unique_triples(xs):
    assume(len(set(xs)) == len(xs))
    assume(xs == sorted(xs))
    assert all(a < b for a, b in pairwise(xs))


@given(json_docs())
def test_json_round_trip(doc):
    assert json.loads(json.dumps(doc)) == doc


@given(st.data())
def test_data_draws_index_in_range(data):
    xs = data.draw(st.lists(st.integers(), min_size=1), label="xs")
    i = data.draw(st.integers(0, len(xs) - 1), label="i")
    note(f"i={i}")
    target(float(len(xs)))
    assert xs[i] in xs


@pytest.mark.parametrize("width", [2, 4, 8])
@settings(suppress_health_check=[HealthCheck.filter_too_much])
@given(st.text(alphabet="()", min_size=2, max_size=16))
def test_balanced_parens(width, s):
    depth = 0
    for c in s:
        depth += 1 if c == "(" else -1
        assume(depth >= 0)
    assume(depth == 0)
    assert s.count("(") == s.count(")")
    assert len(s) % 2 == 0


@settings(max_examples=50)
@given(st.integers(0, 2**16), st.integers(1, 2**8))
def test_divmod(a, b):
    q, r = divmod(a, b)
    assert q * b + r == a and 0 <= r < b


class LRUCacheMachine(RuleBasedStateMachine):
    keys = Bundle("keys")

    @initialize(capacity=st.integers(1, 5))
    def setup(self, capacity):
        self.capacity = capacity
        self.cache = OrderedDict()

    @rule(target=keys, k=st.text(min_size=1, max_size=3))
    def new_key(self, k):
        return k

    @rule(k=keys, v=st.integers())
    def put(self, k, v):
        self.cache[k] = v
        self.cache.move_to_end(k)
        while len(self.cache) > self.capacity:
            self.cache.popitem(last=False)

    @precondition(lambda self: len(self.cache) > 0)
    @rule(data=st.data())
    def get_present(self, data):
        k = data.draw(st.sampled_from(sorted(self.cache)))
        self.cache.move_to_end(k)
        assert k in self.cache

    @invariant()
    def bounded(self):
        assert len(getattr(self, "cache", ())) <= getattr(self, "capacity", 5)


TestLRU = LRUCacheMachine.TestCase
TestLRU.settings = settings(max_examples=30, stateful_step_count=20)
