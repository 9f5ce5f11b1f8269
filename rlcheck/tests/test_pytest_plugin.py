"""``pytest --rlcheck`` and ``--rlcheck-compare`` on a small suite."""

from __future__ import annotations

import pytest

from rlcheck.pytest_plugin import CaseCounts, format_table

pytest_plugins = ["pytester"]

SUITE = """
from hypothesis import HealthCheck, assume, given, settings, strategies as st

QUIET = dict(max_examples=30, database=None, deadline=None,
             suppress_health_check=list(HealthCheck))

@settings(**QUIET)
@given(st.lists(st.integers(0, 9)))
def test_sorted_pairs(xs):
    assume(len(xs) >= 2 and xs[0] < xs[1])
    # the backend in use is visible to the test through the current settings
    print("BACKEND", settings().backend)

class TestInClass:
    @settings(**QUIET)
    @given(st.text(alphabet="ab"))
    def test_method(self, s):
        assume(s)

def test_not_hypothesis():
    pass
"""


def test_rlcheck_option_runs_hypothesis_tests_on_the_backend(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--rlcheck", "-s", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "BACKEND rlcheck" in out and "BACKEND hypothesis" not in out
    assert "rlcheck: Hypothesis backend" in out
    assert "test_suite.py::test_sorted_pairs" in out
    assert "test_suite.py::TestInClass::test_method" in out
    assert "test_not_hypothesis" not in out.split("rlcheck: Hypothesis backend")[1]
    assert "default: cases" not in out


def test_compare_option_adds_the_default_backend(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--rlcheck-compare", "-s", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "BACKEND hypothesis" in out and "BACKEND rlcheck" in out
    table = out.split("rlcheck: Hypothesis backend")[1]
    assert "default: cases" in table and "unique x" in table
    row = next(line for line in table.splitlines() if "test_sorted_pairs" in line)
    numbers = [int(x) for x in row.split()[1:7]]
    cases, valid, unique, base_cases, base_valid, base_unique = numbers
    assert cases >= valid >= unique > 0
    assert base_cases >= base_valid >= base_unique > 0


def test_without_the_option_nothing_changes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-s", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "BACKEND hypothesis" in out and "BACKEND rlcheck" not in out
    assert "rlcheck: Hypothesis backend" not in out


def test_failures_are_reported_as_usual(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_bug="""
from hypothesis import given, settings, strategies as st

@settings(max_examples=200, database=None, deadline=None)
@given(st.integers(0, 100))
def test_bug(n):
    assert n < 50
"""
    )
    result = pytester.runpytest("--rlcheck", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 50 < 50*", "*n=50,*"])


def test_case_counts_and_table() -> None:
    counts = CaseCounts()

    class Node:
        def __init__(self, value: object) -> None:
            self.value = value

    class Obs:
        type = "test_case"

        def __init__(self, status: str, choices: tuple[object, ...]) -> None:
            self.status = status
            self.metadata = {"choice_nodes": [Node(c) for c in choices]}

    for status, choices in [
        ("passed", (1,)),
        ("passed", (1,)),
        ("gave_up", (2,)),
        ("failed", (3,)),
    ]:
        counts.observe(Obs(status, choices))
    # One definition of unique (the episode ledger's, by choice sequence); failures apart.
    assert (counts.cases, counts.valid, counts.unique_valid) == (4, 2, 1)
    base = CaseCounts()
    base.ledger.record("valid", (0,))
    base.ledger.record("invalid")
    table = format_table({"t::x": {"rlcheck": counts, "hypothesis": base}}, compare=True)
    assert table.splitlines()[2].split() == ["t::x", "4", "2", "1", "2", "1", "1", "1.0"]
