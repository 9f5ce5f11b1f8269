"""``pytest --rlcheck``: run every Hypothesis test of a suite on the rlcheck backend.

Options (registered through rlcheck's ``pytest11`` entry point):

``--rlcheck``
    Each ``@given`` test, and each ``RuleBasedStateMachine.TestCase``, runs with
    ``backend="rlcheck"`` (its other settings unchanged), and the end of the session
    prints the table below.
``--rlcheck-compare``
    Implies ``--rlcheck``; each test first runs once more on Hypothesis's own backend,
    counted the same way, and the table shows both side by side, with the gain where
    both reached ``max_examples`` and the backend(s) whose generation found a failure.
    The extra run shares the test's function-scoped fixtures; its own failure does not
    fail the test (the rlcheck run gives the verdict, and replays a failure the first
    run saved to the example database: the "failure found by" column tells which
    backend found it).
``--rlcheck-fast``
    Like ``--rlcheck`` with ``backend="rlcheck-fast"``
    (:class:`rlcheck.hypothesis.provider.FastRLCheckProvider`): Hypothesis's own provider
    interleaved one case at a time instead of a default-backend half, so a test whose valid
    rate is very low runs within about twice the cases of the learned policy alone.

The table: per test, the generation phase's test cases, valid cases, valid cases per
test case and, when the run stopped at ``max_examples``, the seconds it took to get
there (a backend's gain shows there, since both then make the same number of valid
cases), and what rlcheck did: guided every case, ran its probe only (the run ended
within the first cases, all Hypothesis's own provider's: ``max_examples`` of 20), stepped
aside after its first cases (nothing to learn: the rest ran on Hypothesis's own backend),
handed back (too many invalid cases), or fell back (an internal error: the test ran on
Hypothesis's own backend; the reason is shown and listed below the table). The counts
read ``-`` where the engine gave no statistics (a run that failed a health check, or was
skipped from inside the test), not 0.

Counting costs nothing: the counts come from the engine's own per-run statistics
(``hypothesis.statistics``) and the backend's (:func:`rlcheck.hypothesis.collect_stats`);
Hypothesis's observability (which pretty-prints every test case) stays off. Under
pytest-xdist each worker attaches its counts to the test's report and the controller
prints one table. This module imports nothing heavy at import time: pytest loads it in
every session where rlcheck is installed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

import pytest

__all__ = ["CaseCounts", "Row", "format_table"]

_PROPERTY = "rlcheck"  # the report's user_properties key carrying the counts
_REASON_WIDTH = 60  # characters of a fallback reason shown in the table


@dataclass(frozen=True)
class Row:
    """One backend's counts for one test, as reported (plain data: crosses xdist).

    ``cases``, ``valid``: the generation phase's test cases and valid ones (as the
    engine counts them toward ``max_examples``); ``seconds``: that phase's duration;
    ``reached_max``: it stopped at ``max_examples``. For the rlcheck run, ``guided`` is
    the number of cases the backend generated itself (the rest were Hypothesis's own),
    ``status`` what it did (``"guided"``, ``"probe only"``: no case was the learned
    policy's, ``"stepped aside"``, ``"handed back"``,
    ``"fell back"``, ``"unchanged"``: the backend could not be switched) and ``reason``
    the internal error behind a fallback. ``counted``: the engine delivered a run's
    statistics (it delivers none for a run that raised ``FailedHealthCheck`` or skipped,
    and the table then shows ``-`` rather than 0 cases).
    """

    cases: int = 0
    valid: int = 0
    seconds: float = 0.0
    reached_max: bool = False
    found_failure: bool = False
    guided: int = 0
    status: str = ""
    reason: str = ""
    counted: bool = False

    @property
    def valid_per_case(self) -> float:
        return self.valid / self.cases if self.cases else 0.0


class CaseCounts:
    """What one backend's runs of one test did, from the engine's statistics (one call
    of :meth:`add_statistics` per run) and, for the rlcheck backend, its own."""

    __test__ = False  # keeps pytest from collecting it

    def __init__(self) -> None:
        self.row = Row()

    def add_statistics(self, statistics: dict[str, Any]) -> None:
        """Count one run's ``hypothesis.statistics`` dictionary (its generate phase)."""
        phase = statistics.get("generate-phase") or {}
        statuses = [case.get("status") for case in phase.get("test-cases", ())]
        stopped = str(statistics.get("stopped-because", ""))
        row = self.row
        self.row = replace(
            row,
            cases=row.cases + len(statuses),
            valid=row.valid + statuses.count("valid"),
            seconds=row.seconds + float(phase.get("duration-seconds", 0.0)),
            # "settings.max_examples=N" alone; other reasons say more after a comma
            reached_max=row.reached_max
            or (stopped.startswith("settings.max_examples=") and "," not in stopped),
            found_failure=row.found_failure or "interesting" in statuses,
            counted=True,
        )

    def add_backend(self, stats: Any) -> None:
        """What the rlcheck backend said about its runs (a ``BackendStats``)."""
        tests = stats.as_dict().values()
        guided = sum(t.cases for t in tests)
        learned = sum(t.learned for t in tests)
        reason = next((t.reason for t in tests if t.reason), "")
        if any(t.fallback for t in tests):
            status = "fell back"
        elif any(t.stepped_aside for t in tests):
            status = "stepped aside"
        elif any(t.handed_back for t in tests):
            status = "handed back"
        elif learned == 0 and guided:
            status = "probe only"  # every case was the probe's: Hypothesis's provider's
        elif guided:
            status = "guided"
        else:
            status = "no cases"  # max_examples=1, explicit examples only: nothing to guide
        self.row = replace(self.row, guided=self.row.guided + guided, status=status, reason=reason)


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
        help='run every Hypothesis test with backend="rlcheck" and report, per test, '
        "valid cases per case, time to max_examples and what rlcheck did",
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
        help='like --rlcheck with backend="rlcheck-fast": fewer cases on very strict tests '
        "(Hypothesis's provider one case at a time, no default-backend half)",
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


# trylast: inside Hypothesis's own wrapper, which sets its statistics collector for
# --hypothesis-show-statistics (ours passes each run's statistics on to it).
@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    if not _active(item.config) or not _is_hypothesis_test(item):
        yield
        return
    from rlcheck.hypothesis import collect_stats
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
            _counting(base),
            contextlib.suppress(Exception),
        ):
            item.runtest()
    ours = counts.setdefault("rlcheck", CaseCounts())
    backend = "rlcheck-fast" if item.config.getoption("rlcheck_fast") else "rlcheck"
    with with_test_settings(test, owner, backend=backend) as changed:
        if not changed:
            ours.row = replace(ours.row, status="unchanged")
            item.warn(
                pytest.PytestWarning(
                    "rlcheck could not switch this Hypothesis test's backend; it runs unchanged"
                )
            )
            with _counting(ours):
                yield
            return
        with _counting(ours), collect_stats() as stats:
            try:
                yield
            finally:
                with contextlib.suppress(Exception):  # counting never fails a test
                    ours.add_backend(stats)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    counts = item.stash.get(_COUNTS, None)
    if call.when == "call" and counts:
        report = outcome.get_result()
        rows = {backend: asdict(c.row) for backend, c in counts.items()}
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
    """The end-of-session table: one row per test, then the tests rlcheck fell back on.

    ``valid/case`` is valid cases per generated case; ``to max`` the seconds the
    generation phase took to reach ``max_examples`` (``-`` when it stopped otherwise).
    With ``compare``, the default backend's columns follow, and the gains (the ratio of
    valid per case, and the default's time over rlcheck's) where both runs reached
    ``max_examples``.

    Examples
    --------
    >>> row = Row(40, 20, 0.5, True, guided=20, status="stepped aside")
    >>> print(format_table({"t.py::test_a": {"rlcheck": row}}, compare=False))
    test          cases  valid  valid/case  to max  rlcheck
    ------------  -----  -----  ----------  ------  ----------------------
    t.py::test_a     40     20        0.50   0.50s  stepped aside after 20
    """
    header = ["test", "cases", "valid", "valid/case", "to max"]
    if compare:
        header += ["default: cases", "valid", "valid/case", "to max", "valid/case x", "speed x"]
        header.append("failure found by")
    header.append("rlcheck")
    rows = [header]
    fell_back = []
    for nodeid, by_backend in results.items():
        rl = by_backend.get("rlcheck", Row())
        row = [nodeid, *_cells(rl)]
        if compare:
            base = by_backend.get("hypothesis", Row())
            row += _cells(base)
            both = rl.reached_max and base.reached_max and rl.seconds > 0
            per_case = base.valid_per_case > 0
            row.append(
                f"{rl.valid_per_case / base.valid_per_case:.2f}" if both and per_case else "-"
            )
            row.append(f"{base.seconds / rl.seconds:.2f}" if both else "-")
            found = [name for name, r in (("rlcheck", rl), ("default", base)) if r.found_failure]
            row.append(" and ".join(found) or "-")
        row.append(_status(rl))
        if rl.status == "fell back":
            fell_back.append(f"  {nodeid}: {rl.reason}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for i, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])]
        cells += [c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1], strict=True)]
        cells.append(row[-1].ljust(widths[-1]))
        lines.append("  ".join(cells).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if fell_back:
        lines.append(
            f"\nrlcheck fell back on {len(fell_back)} test(s): an internal error; each ran "
            "on Hypothesis's own backend from then on (please report it):"
        )
        lines += fell_back
    return "\n".join(lines)


def _cells(row: Row) -> list[str]:
    if not row.cases and not row.counted:
        # no statistics came (a FailedHealthCheck, a skip inside the test): the cases are
        # unknown, not 0 (the rlcheck column still says how many it guided)
        return ["-", "-", "-", "-"]
    to_max = f"{row.seconds:.2f}s" if row.reached_max else "-"
    return [str(row.cases), str(row.valid), f"{row.valid_per_case:.2f}", to_max]


def _status(row: Row) -> str:
    if row.status == "fell back":
        reason = row.reason if len(row.reason) <= _REASON_WIDTH else row.reason[:57] + "..."
        return f"FELL BACK after {row.guided}: {reason}"
    if row.status in ("stepped aside", "handed back"):
        return f"{row.status} after {row.guided}"
    if row.status == "guided":
        return f"guided {row.guided}"
    if row.status == "probe only":
        return f"probe only {row.guided}"
    return row.status or "-"


def _is_hypothesis_test(item: pytest.Item) -> bool:
    obj = getattr(item, "obj", None)
    if obj is None:
        return False
    from hypothesis import is_hypothesis_test

    return bool(is_hypothesis_test(obj))


@contextmanager
def _counting(counts: CaseCounts) -> Iterator[None]:
    from rlcheck.hypothesis.compat import run_statistics

    with run_statistics(counts.add_statistics):
        yield
