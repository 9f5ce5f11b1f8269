"""``pytest --rlcheck``: run every Hypothesis test of a suite on the rlcheck backend.

Options (registered through rlcheck's ``pytest11`` entry point):

``--rlcheck``
    Each ``@given`` test, and each ``RuleBasedStateMachine.TestCase``, runs with
    ``backend="rlcheck"`` (its other settings unchanged), and the end of the session
    prints, per test: cases, valid cases and unique valid cases.
``--rlcheck-compare``
    Implies ``--rlcheck``; each test first runs once more on Hypothesis's own backend,
    counted the same way, and the table shows both side by side, with the backend(s)
    whose generation found a failure. The extra run shares the test's function-scoped
    fixtures; its own failure does not fail the test (the rlcheck run gives the verdict,
    and replays a failure the first run saved to the example database: the
    "failure found by" column tells which backend found it).
``--rlcheck-fast``
    Like ``--rlcheck`` with ``backend="rlcheck-fast"``
    (:class:`rlcheck.hypothesis.provider.FastRLCheckProvider`): no default-backend tail,
    so a test whose valid rate is very low stays about as fast as on the learned policy alone.

Counting: Hypothesis's observations of the test cases (coverage tracing off, choice
sequences on), through the episode ledger (:mod:`rlcheck.ledger`): a test case's identity
is its choice sequence, as in the backend's own statistics, so both backends are counted
by one rule. Under pytest-xdist each worker attaches its counts to the test's report and
the controller prints one table. This module imports nothing heavy at import time:
pytest loads it in every session where rlcheck is installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from rlcheck.ledger import Ledger, Outcome

__all__ = ["CaseCounts", "Row", "format_table"]

_OUTCOMES: dict[str, Outcome] = {"gave_up": "invalid", "passed": "valid", "failed": "failure"}
_PROPERTY = "rlcheck"  # the report's user_properties key carrying the counts


@dataclass(frozen=True)
class Row:
    """One backend's counts for one test, as reported (plain data: crosses xdist)."""

    cases: int = 0
    valid: int = 0
    unique_valid: int = 0
    found_failure: bool = False


class CaseCounts:
    """Test cases one backend ran for one test, counted by an episode ledger
    (:mod:`rlcheck.ledger`: a test case's identity is its choice sequence, as for the
    backend's own statistics)."""

    __test__ = False  # keeps pytest from collecting it

    def __init__(self) -> None:
        self.ledger = Ledger()
        self.found_failure = False

    def observe(self, observation: Any) -> None:
        """Count one Hypothesis observation (others than test cases are ignored)."""
        from rlcheck.hypothesis.compat import observed_choices, observed_phase

        if getattr(observation, "type", None) != "test_case":
            return
        outcome = _OUTCOMES.get(observation.status, "invalid")
        if outcome == "failure" and observed_phase(observation) == "generate":
            # Found by this run's generation (not replayed from the database, not a
            # shrink of a failure found before).
            self.found_failure = True
        self.ledger.record(outcome, observed_choices(observation))

    def row(self) -> Row:
        return Row(
            self.ledger.cases, self.ledger.valid, self.ledger.unique_valid, self.found_failure
        )


# Per session (a pytester run inside a session gets its own): nodeid -> backend -> row.
_RESULTS = pytest.StashKey[dict[str, dict[str, Row]]]()
# Per test item, while it runs: backend -> counts.
_COUNTS = pytest.StashKey[dict[str, CaseCounts]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("rlcheck", "rlcheck: RL guidance for Hypothesis tests")
    group.addoption(
        "--rlcheck",
        action="store_true",
        default=False,
        help='run every Hypothesis test with backend="rlcheck" and report cases, valid '
        "and unique valid inputs per test",
    )
    group.addoption(
        "--rlcheck-compare",
        action="store_true",
        default=False,
        help="with --rlcheck: also run each Hypothesis test on the default backend and report both",
    )
    group.addoption(
        "--rlcheck-fast",
        action="store_true",
        default=False,
        help='like --rlcheck with backend="rlcheck-fast": no default-backend tail, bounded time '
        "on very strict tests, somewhat fewer bugs found",
    )


def pytest_configure(config: pytest.Config) -> None:
    if _active(config):
        config.pluginmanager.register(_Reports(config), "rlcheck-reports")


def _active(config: pytest.Config) -> bool:
    return bool(
        config.getoption("rlcheck")
        or config.getoption("rlcheck_compare")
        or config.getoption("rlcheck_fast")
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    if not _active(item.config) or not _is_hypothesis_test(item):
        yield
        return
    from rlcheck.hypothesis.compat import with_test_settings

    test = item.obj  # type: ignore[attr-defined]
    owner = getattr(item, "cls", None)
    counts = item.stash.setdefault(_COUNTS, {})
    if item.config.getoption("rlcheck_compare"):
        base = counts.setdefault("hypothesis", CaseCounts())
        # The comparison run only counts; the test's verdict is the rlcheck run's,
        # which follows (and replays any failure from the database).
        with (
            with_test_settings(test, owner, backend="hypothesis"),
            _counting(base.observe),
            contextlib.suppress(Exception),
        ):
            item.runtest()
    ours = counts.setdefault("rlcheck", CaseCounts())
    backend = "rlcheck-fast" if item.config.getoption("rlcheck_fast") else "rlcheck"
    with with_test_settings(test, owner, backend=backend) as changed:
        if not changed:
            counts.pop("rlcheck")
            item.warn(
                pytest.PytestWarning(
                    "rlcheck could not switch this Hypothesis test's backend; it runs unchanged"
                )
            )
            yield
            return
        with _counting(ours.observe):
            yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    counts = item.stash.get(_COUNTS, None)
    if call.when == "call" and counts:
        report = outcome.get_result()
        rows = {backend: asdict(c.row()) for backend, c in counts.items()}
        report.user_properties.append((_PROPERTY, rows))


class _Reports:
    """Gathers the counts from the test reports: the session's own, or, under xdist,
    the workers' (reports travel to the controller with their user properties)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == _PROPERTY and isinstance(value, dict):
                results = self.config.stash.setdefault(_RESULTS, {})
                by_backend = results.setdefault(report.nodeid, {})
                for backend, row in value.items():
                    by_backend[backend] = Row(**row)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        results = self.config.stash.get(_RESULTS, {})
        if not results:
            return
        compare = bool(self.config.getoption("rlcheck_compare"))
        terminalreporter.section("rlcheck: Hypothesis backend")
        terminalreporter.write_line(format_table(results, compare=compare))


def format_table(results: dict[str, dict[str, Row]], *, compare: bool) -> str:
    """The end-of-session table: one row per test, rlcheck (and default) counts.

    Examples
    --------
    >>> print(format_table({"t.py::test_a": {"rlcheck": Row(3, 2, 1)}}, compare=False))
    test          cases  valid  unique valid
    ------------  -----  -----  ------------
    t.py::test_a      3      2             1
    """
    header = ["test", "cases", "valid", "unique valid"]
    if compare:
        header += ["default: cases", "valid", "unique valid", "unique x", "failure found by"]
    rows = [header]
    for nodeid, by_backend in results.items():
        rl = by_backend.get("rlcheck", Row())
        row = [nodeid, str(rl.cases), str(rl.valid), str(rl.unique_valid)]
        if compare:
            base = by_backend.get("hypothesis", Row())
            ratio = f"{rl.unique_valid / base.unique_valid:.1f}" if base.unique_valid else "-"
            found = [name for name, r in (("rlcheck", rl), ("default", base)) if r.found_failure]
            row += [str(base.cases), str(base.valid), str(base.unique_valid), ratio]
            row.append(" and ".join(found) or "-")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for i, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_hypothesis_test(item: pytest.Item) -> bool:
    obj = getattr(item, "obj", None)
    if obj is None:
        return False
    from hypothesis import is_hypothesis_test

    return bool(is_hypothesis_test(obj))


@contextmanager
def _counting(callback: Callable[[Any], None]) -> Iterator[None]:
    from rlcheck.hypothesis.compat import observing

    with observing(callback, choices=True):
        yield
