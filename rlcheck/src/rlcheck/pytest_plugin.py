"""``pytest --rlcheck``: run every Hypothesis test of a suite on the rlcheck backend.

Options (registered through rlcheck's ``pytest11`` entry point):

``--rlcheck``
    Each ``@given`` test runs with ``backend="rlcheck"`` (its other settings unchanged),
    and the end of the session prints, per test: cases, valid cases and unique valid
    cases (distinct inputs by their printed representation).
``--rlcheck-compare``
    Implies ``--rlcheck``; each test first runs once more on Hypothesis's own backend,
    counted the same way, and the table shows both side by side. The extra run shares
    the test's function-scoped fixtures.

Counting uses Hypothesis's observability callbacks (with coverage collection off), so both
backends are measured by one rule. This module imports nothing heavy at import time:
pytest loads it in every session where rlcheck is installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from rlcheck.ledger import Ledger, Outcome

__all__ = ["CaseCounts"]


_OUTCOMES: dict[str, Outcome] = {"gave_up": "invalid", "passed": "valid", "failed": "failure"}


class CaseCounts:
    """Test cases one backend ran for one test, counted by an episode ledger
    (:mod:`rlcheck.ledger`: a test case's identity is its choice sequence, as for the
    backend's own statistics)."""

    __test__ = False  # keeps pytest from collecting it

    def __init__(self) -> None:
        self.ledger = Ledger()

    @property
    def cases(self) -> int:
        return self.ledger.cases

    @property
    def valid(self) -> int:
        return self.ledger.valid

    @property
    def unique_valid(self) -> int:
        return self.ledger.unique_valid

    def observe(self, observation: Any) -> None:
        """Count one Hypothesis observation (others than test cases are ignored)."""
        from rlcheck.hypothesis.compat import observed_choices

        if getattr(observation, "type", None) != "test_case":
            return
        outcome = _OUTCOMES.get(observation.status, "invalid")
        self.ledger.record(outcome, observed_choices(observation))


# Per session (a pytester run inside a session gets its own): nodeid -> backend -> counts.
_RESULTS = pytest.StashKey[dict[str, dict[str, CaseCounts]]]()


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


def _active(config: pytest.Config) -> bool:
    return bool(config.getoption("rlcheck") or config.getoption("rlcheck_compare"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    if not _active(item.config) or not _is_hypothesis_test(item):
        yield
        return
    from rlcheck.hypothesis.compat import with_test_settings

    test = item.obj  # type: ignore[attr-defined]
    results = item.config.stash.setdefault(_RESULTS, {}).setdefault(item.nodeid, {})
    if item.config.getoption("rlcheck_compare"):
        counts = results.setdefault("hypothesis", CaseCounts())
        # The comparison run only counts; the test's verdict is the rlcheck run's,
        # which follows (and replays any failure from the database).
        with (
            with_test_settings(test, backend="hypothesis"),
            _counting(counts.observe),
            contextlib.suppress(Exception),
        ):
            item.runtest()
    counts = results.setdefault("rlcheck", CaseCounts())
    with with_test_settings(test, backend="rlcheck"), _counting(counts.observe):
        yield


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    results = config.stash.get(_RESULTS, {})
    if not _active(config) or not results:
        return
    compare = bool(config.getoption("rlcheck_compare"))
    terminalreporter.section("rlcheck: Hypothesis backend")
    terminalreporter.write_line(format_table(results, compare=compare))


def format_table(results: dict[str, dict[str, CaseCounts]], *, compare: bool) -> str:
    """The end-of-session table: one row per test, rlcheck (and default) counts.

    Examples
    --------
    >>> counts = CaseCounts()
    >>> for outcome in ("valid", "valid", "invalid"):
    ...     _ = counts.ledger.record(outcome, outcome)
    >>> print(format_table({"t.py::test_a": {"rlcheck": counts}}, compare=False))
    test          cases  valid  unique valid
    ------------  -----  -----  ------------
    t.py::test_a      3      2             1
    """
    header = ["test", "cases", "valid", "unique valid"]
    if compare:
        header += ["default: cases", "valid", "unique valid", "unique x"]
    rows = [header]
    for nodeid, by_backend in results.items():
        rl = by_backend.get("rlcheck", CaseCounts())
        row = [nodeid, str(rl.cases), str(rl.valid), str(rl.unique_valid)]
        if compare:
            base = by_backend.get("hypothesis", CaseCounts())
            ratio = f"{rl.unique_valid / base.unique_valid:.1f}" if base.unique_valid else "-"
            row += [str(base.cases), str(base.valid), str(base.unique_valid), ratio]
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
