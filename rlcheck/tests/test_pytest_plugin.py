"""``pytest --rlcheck`` and ``--rlcheck-compare`` on a small suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlcheck.hypothesis import BackendStats
from rlcheck.ledger import Counts
from rlcheck.pytest_plugin import CaseCounts, Row, format_table

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


def _passing(pytester: pytest.Pytester, *args: str, passed: int, **files: str) -> str:
    """The output of pytest with ``args`` (and ``-p no:randomly``) on the test ``files``
    (module name to source), after asserting that ``passed`` tests passed and no other
    outcome."""
    pytester.makepyfile(**files)
    result = pytester.runpytest(*args, "-p", "no:randomly")
    result.assert_outcomes(passed=passed)
    return result.stdout.str()


def test_rlcheck_option_runs_hypothesis_tests_on_the_backend(
    pytester: pytest.Pytester,
) -> None:
    out = _passing(pytester, "--rlcheck", "-s", passed=3, test_suite=SUITE)
    assert "BACKEND rlcheck" in out and "BACKEND hypothesis" not in out
    assert "rlcheck: Hypothesis backend" in out
    assert "test_suite.py::test_sorted_pairs" in out
    assert "test_suite.py::TestInClass::test_method" in out
    assert "test_not_hypothesis" not in out.split("rlcheck: Hypothesis backend")[1]
    assert "default: cases" not in out


def test_fast_option_runs_the_tests_on_the_fast_backend(pytester: pytest.Pytester) -> None:
    out = _passing(pytester, "--rlcheck-fast", "-s", passed=3, test_suite=SUITE)
    assert "BACKEND rlcheck-fast" in out and "BACKEND hypothesis" not in out
    table = out.split("rlcheck: Hypothesis backend")[1]
    row = next(line for line in table.splitlines() if "test_sorted_pairs" in line)
    cases, valid = (int(x) for x in row.split()[1:3])
    assert valid > 0 and cases >= valid


def test_compare_option_adds_the_default_backend(pytester: pytest.Pytester) -> None:
    out = _passing(pytester, "--rlcheck-compare", "-s", passed=3, test_suite=SUITE)
    assert "BACKEND hypothesis" in out and "BACKEND rlcheck" in out
    table = out.split("rlcheck: Hypothesis backend")[1]
    assert "default: cases" in table and "valid/case x" in table and "speed x" in table
    row = next(line for line in table.splitlines() if "test_sorted_pairs" in line).split()
    cases, valid, base_cases, base_valid = int(row[1]), int(row[2]), int(row[5]), int(row[6])
    assert cases >= valid == 30 and base_cases >= base_valid == 30  # both reached max_examples
    assert float(row[3]) == pytest.approx(valid / cases, abs=0.01)
    assert row[4].endswith("s") and row[8].endswith("s")  # the time to reach it
    assert float(row[9]) == pytest.approx(float(row[3]) / float(row[7]), rel=0.05)


def test_without_the_option_nothing_changes(pytester: pytest.Pytester) -> None:
    out = _passing(pytester, "-s", passed=3, test_suite=SUITE)
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


def _statistics(statuses: list[str], seconds: float, stopped: str) -> dict[str, Any]:
    cases = [{"status": status} for status in statuses]
    return {
        "generate-phase": {"duration-seconds": seconds, "test-cases": cases},
        "stopped-because": stopped,
    }


def test_case_counts_and_table() -> None:
    counts = CaseCounts()
    # Two runs of one test: counts add up; the generation phase's cases only.
    counts.add_statistics(
        _statistics(["valid", "invalid", "valid"], 0.5, "settings.max_examples=2")
    )
    counts.add_statistics(_statistics(["overrun", "interesting"], 0.25, "nothing left to do"))
    stats = BackendStats()
    stats.update("t.x", stats.start_run("t.x"), Counts(cases=3, valid=2), stepped_aside=True)
    counts.add_backend(stats)
    assert counts.row == Row(
        cases=5,
        valid=2,
        seconds=0.75,
        reached_max=True,
        found_failure=True,
        guided=3,
        status="stepped aside",
        counted=True,
    )
    base = Row(8, 2, 1.5, True)
    table = format_table({"t::x": {"rlcheck": counts.row, "hypothesis": base}}, compare=True)
    assert table.splitlines()[2].split() == (
        [
            "t::x",
            "5",
            "2",
            "0.40",
            "0.75s",
            "8",
            "2",
            "0.25",
            "1.50s",
            "1.60",
            "2.00",
            "rlcheck",
            "stepped",
            "aside",
            "after",
            "3",
        ]
    )


def test_the_table_marks_a_fallback_and_lists_its_reason() -> None:
    rows = {
        "t::ok": {"rlcheck": Row(10, 10, 0.1, True, guided=10, status="guided")},
        "t::bad": {
            "rlcheck": Row(10, 10, 0.1, True, guided=4, status="fell back", reason="E: " + "x" * 80)
        },
    }
    lines = format_table(rows, compare=False).splitlines()
    assert lines[2].endswith("guided 10")
    assert "FELL BACK after 4: E: xxx" in lines[3] and lines[3].endswith("...")
    assert "rlcheck fell back on 1 test(s)" in lines[5]
    assert lines[6] == "  t::bad: E: " + "x" * 80


def test_a_test_rlcheck_falls_back_on_passes_and_is_marked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_broken="""
import pytest
from hypothesis import given, settings, strategies as st
from rlcheck.state import SpanState

@pytest.fixture(autouse=True)
def broken_state(monkeypatch):
    def push(self, label):
        raise RuntimeError("injected")
    monkeypatch.setattr(SpanState, "push", push)

@settings(max_examples=30, database=None)
@given(st.lists(st.integers()))
def test_fine(xs):
    pass
"""
    )
    result = pytester.runpytest("--rlcheck", "-p", "no:randomly", "-W", "error")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "FELL BACK after 0: RuntimeError: injected" in out
    assert "rlcheck fell back on 1 test(s)" in out


def test_a_test_with_nothing_to_learn_is_marked_stepped_aside(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_easy="""
from hypothesis import given, settings, strategies as st

@settings(max_examples=100, database=None)
@given(st.binary(min_size=8))
def test_easy(xs):
    pass
"""
    )
    # The probe judges valid cases, not new ones: plain lists of integers, whose short
    # lists Hypothesis's provider repeats, step aside too
    # (test_plain_lists_of_integers_step_aside_in_every_run).
    result = pytester.runpytest("--rlcheck", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    row = next(line for line in result.stdout.lines if "test_easy.py::test_easy" in line)
    cases, valid = (int(x) for x in row.split()[1:3])
    # (Hypothesis 6.140 counts a few more valid cases than max_examples here; 6.170 not.)
    # the probe: 20 cases of Hypothesis's provider and 10 simplest extensions
    assert cases >= valid >= 100 and row.endswith("stepped aside after 30")


def test_a_test_that_ends_inside_the_probe_is_marked_probe_only(
    pytester: pytest.Pytester,
) -> None:
    # max_examples=20 (hypothesis-jsonschema's corpus tests): every case is the probe's,
    # Hypothesis's own provider's; the table said "guided 19".
    pytester.makepyfile(
        test_short="""
from hypothesis import given, settings, strategies as st

@settings(max_examples=20, database=None)
@given(st.integers())
def test_short(x):
    pass
"""
    )
    result = pytester.runpytest("--rlcheck", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    row = next(line for line in result.stdout.lines if "test_short.py::test_short" in line)
    assert "probe only" in row and "guided" not in row


def test_a_test_rlcheck_ran_no_case_of_is_not_called_guided(pytester: pytest.Pytester) -> None:
    # Explicit examples only: the backend never ran a case; the table said "guided 0".
    pytester.makepyfile(
        test_explicit="""
from hypothesis import Phase, example, given, settings, strategies as st

@settings(phases=[Phase.explicit], database=None)
@example(3)
@given(st.integers())
def test_explicit(x):
    pass
"""
    )
    result = pytester.runpytest("--rlcheck", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    rows = [line for line in result.stdout.lines if "test_explicit.py::test_explicit" in line]
    assert rows and all("guided" not in row for row in rows), rows


STATEFUL = """
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

class Counter(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.n = 0

    @rule(k=st.integers(0, 5))
    def add(self, k):
        self.n += k
        print("BACKEND", settings().backend)

    @invariant()
    def nonneg(self):
        assert self.n >= 0

TestCounter = Counter.TestCase
TestCounter.settings = settings(max_examples=10, stateful_step_count=5, database=None)
"""


def test_stateful_tests_run_on_the_backend(pytester: pytest.Pytester) -> None:
    out = _passing(pytester, "--rlcheck", "-s", passed=1, test_machine=STATEFUL)
    assert "BACKEND rlcheck" in out and "BACKEND hypothesis" not in out
    row = next(line for line in out.splitlines() if "TestCounter::runTest" in line)
    assert int(row.split()[1]) >= 10


def test_compare_says_which_backend_found_the_failure(pytester: pytest.Pytester) -> None:
    # The default backend's pass finds the bug and saves it; the rlcheck pass replays it
    # from the database: the table must not credit rlcheck with it.
    pytester.makepyfile(
        test_bug="""
from hypothesis import given, settings, strategies as st
from hypothesis.database import DirectoryBasedExampleDatabase

# A database of this run's own (the process-wide default one may hold this failure)
@settings(max_examples=300, deadline=None, database=DirectoryBasedExampleDatabase("db"))
@given(st.integers(0, 1000))
def test_bug(n):
    assert n < 10
"""
    )
    result = pytester.runpytest("--rlcheck-compare", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    table = result.stdout.str().split("rlcheck: Hypothesis backend")[1]
    assert "failure found by" in table
    row = next(line for line in table.splitlines() if "test_bug" in line)
    assert " default " in row and "rlcheck and default" not in row


def test_readme_example_runs_as_written(pytester: pytest.Pytester) -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    section = readme.split("## Use it from Hypothesis", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_readme=code)
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=1)


@pytest.mark.slow
def test_xdist_workers_counts_reach_the_controller(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE, test_machine=STATEFUL)
    result = pytester.runpytest("--rlcheck", "-n", "2", "-p", "no:randomly")
    result.assert_outcomes(passed=4)
    table = result.stdout.str().split("rlcheck: Hypothesis backend")[1]
    for name in ("test_sorted_pairs", "test_method", "runTest"):
        row = next(line for line in table.splitlines() if name in line)
        assert int(row.split()[1]) > 0


def test_a_failed_health_check_shows_unknown_counts_not_zero(pytester: pytest.Pytester) -> None:
    # The engine gives no statistics for a run that raised FailedHealthCheck: the table said
    # "0 cases, 0 valid" beside "handed back after 26" (under -n 2 as without it).
    pytester.makepyfile(
        test_strict="""
from hypothesis import assume, given, settings, strategies as st

@settings(database=None)
@given(st.lists(st.integers(0, 20), min_size=3))
def test_strict(xs):
    assume(xs == sorted(set(xs)))
"""
    )
    result = pytester.runpytest("--rlcheck", "-n", "2", "-p", "no:randomly")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "FailedHealthCheck" in out
    row = next(line for line in out.splitlines() if line.startswith("test_strict.py::"))
    assert row.split()[1:5] == ["-", "-", "-", "-"], row
