"""A Hypothesis test with a strict ``assume``: run it on both backends and compare.

    cd rlcheck
    pytest examples/hypothesis_assume.py -p no:randomly --rlcheck-compare -q

``--rlcheck-compare`` runs each test once on Hypothesis's own backend, then once on
``backend="rlcheck"``, and prints cases, valid and unique valid inputs for both. Without
the plugin, the one-line change is ``@settings(backend="rlcheck", ...)``.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st


@settings(
    max_examples=500,
    deadline=None,
    database=None,
    # the default backend fails this health check here: most of its inputs are rejected
    suppress_health_check=[HealthCheck.filter_too_much],
)
@given(st.lists(st.integers(0, 30)))
def test_strictly_increasing_lists(xs: list[int]) -> None:
    assume(len(xs) >= 3 and all(a < b for a, b in itertools.pairwise(xs)))
    assert sorted(set(xs)) == xs
