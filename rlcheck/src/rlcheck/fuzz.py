"""``rlcheck fuzz``: a suite's Hypothesis tests run continuously on the RL backend.

Lifecycle (one controller, ``workers`` processes)::

    controller                         each worker (its own pytest session)
    ----------                         ------------------------------------
    start N workers  ----------------> collect the tests (pytest, the given arguments),
                                       keep the Hypothesis ones, report them
                     <---------------- ("collected", ...)
                                       loop until told to stop:
                                         pick a test by its recent progress
                     <---------------- ("running", test)
                                         run it once (backend="rlcheck", max_examples
                                           sized for about ``slice_s`` seconds)
                     <---------------- ("run", test, counts, new fingerprints, ...)
    live table, report series
    deadline, Ctrl-C or SIGTERM:
      set stop ----------------------> finish the run in progress, exit
    join; a worker not done within the grace period (a hang in the code under test)
      is terminated, and the report names the test it was running
    write the report (atomically)

Scheduling follows HypoFuzz's idea (its design, not its code: HypoFuzz is AGPL): time goes
where progress is. Each worker keeps, per test, an estimate of its recent progress rate,
``(new unique valid inputs + 100 x new failures) / seconds`` of its last runs
(exponentially weighted, half-weight after :data:`_HALF_LIFE` runs); an untried test runs
first; otherwise a test is drawn with probability proportional to its rate plus a floor
(a tenth of the mean rate), so no test starves and a test that stopped finding new inputs
gets less time. A test that failed is run no more by that worker (its failure is in the
example database: every later run would only replay it).

Sharing: the workers run the tests with their own settings' example database (the default
``.hypothesis/examples``, or the Redis of a fleet's profile). The backend merges its learned
policies there (:class:`rlcheck.policy_store.DatabasePolicy`), and Hypothesis saves each
failure there, shrunk, so a plain ``pytest`` replays it at once. A test whose settings have
no database (``database=None``, or Hypothesis's ``ci`` profile, loaded on any machine where
the ``CI`` environment variable is set) shares and keeps nothing: the report's
``warnings`` name those tests (:func:`no_database_warning`).

Counting: each test case a run makes (the learned policy's and Hypothesis's own, reported
by Hypothesis's observations) is counted by an episode ledger per worker and test; a unique
valid input is a valid case whose choice sequence is new. The controller merges the
workers' 64-bit fingerprints of those, so the table's unique valid inputs are distinct over
all workers. ``failures`` counts the runs that failed, whichever phase found the failing
input: generation, the replay of the example database (a failure an earlier session found,
or another worker saved), an ``@example``; the report keeps the phase of the first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import multiprocessing
import os
import queue
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcheck.errors import InvalidArgument
from rlcheck.ledger import Ledger, Outcome

__all__ = ["FuzzReport", "TestProgress", "check_writable", "fuzz", "stable_fingerprint"]

_HALF_LIFE = 4.0  # runs after which an old run's progress weighs half
_FAILURE_WEIGHT = 100.0  # a new failure is worth this many new unique valid inputs
_MAX_SEEN = 1 << 20  # fingerprints kept per test (memory bound for long runs)
_OUTCOMES: dict[str, Outcome] = {"gave_up": "invalid", "passed": "valid", "failed": "failure"}


def stable_fingerprint(choices: Any) -> int:
    """A 64-bit fingerprint of a choice sequence, equal in every process (``hash`` of a
    string is salted per process).

    >>> stable_fingerprint((1, "a", True)) == stable_fingerprint((1, "a", True))
    True
    """
    return int.from_bytes(hashlib.blake2b(repr(choices).encode(), digest_size=8).digest(), "big")


@dataclass
class TestProgress:
    """One test's figures over all workers, and over time."""

    __test__ = False  # not a pytest test class despite the name

    cases: int = 0
    valid: int = 0
    invalid: int = 0
    unique_valid: int = 0
    #: each worker's own unique valid inputs, summed: above ``unique_valid`` by the inputs
    #: that more than one worker made
    worker_unique_valid: int = 0
    failures: int = 0
    runs: int = 0
    failed: bool = False
    first_failure_s: float | None = None
    #: the phase whose test case failed in the first failed run: ``"generate"``, ``"reuse"``
    #: (a failure replayed from the example database), ``"explicit"`` (an ``@example``),
    #: or ``None`` where no test case failed (an error outside them: a fixture's, a flaky)
    failure_phase: str | None = None
    message: str = ""
    #: ``[seconds, cases, valid, unique_valid, failures]`` after each run (at most one
    #: sample a second)
    series: list[list[float]] = field(default_factory=list)
    _seen: set[int] = field(default_factory=set, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "valid": self.valid,
            "invalid": self.invalid,
            "unique_valid": self.unique_valid,
            "worker_unique_valid": self.worker_unique_valid,
            "failures": self.failures,
            "runs": self.runs,
            "failed": self.failed,
            "first_failure_s": self.first_failure_s,
            "failure_phase": self.failure_phase,
            "message": self.message,
            "series": self.series,
        }


@dataclass
class FuzzReport:
    """What a fuzz session found: per-test :class:`TestProgress`, and how it ended."""

    workers: int
    seconds: float
    pytest_args: list[str]
    tests: dict[str, TestProgress] = field(default_factory=dict)
    elapsed: float = 0.0
    #: seconds until the first worker had collected the tests (process start, imports,
    #: collection): time to first failure counts from 0, as a user waits
    ready_s: float | None = None
    stopped_by: str = ""
    errors: list[str] = field(default_factory=list)
    #: what the user should know that did not stop the session (tests without a database)
    warnings: list[str] = field(default_factory=list)
    #: per worker, the test its run in progress runs and when that run began (seconds):
    #: what a worker that hangs was doing
    _running: dict[int, tuple[str, float]] = field(default_factory=dict, repr=False)

    @property
    def failed(self) -> list[str]:
        """The tests that failed (their failures are in the example database)."""
        return [name for name, t in self.tests.items() if t.failed]

    def totals(self) -> dict[str, int]:
        keys = ("cases", "valid", "unique_valid", "failures")
        return {k: sum(getattr(t, k) for t in self.tests.values()) for k in keys}

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": "rlcheck-fuzz-report",
            "version": 1,
            "workers": self.workers,
            "seconds": self.seconds,
            "pytest_args": self.pytest_args,
            "elapsed": self.elapsed,
            "ready_s": self.ready_s,
            "stopped_by": self.stopped_by,
            "errors": self.errors,
            "warnings": self.warnings,
            "totals": self.totals(),
            "tests": {name: t.as_dict() for name, t in self.tests.items()},
        }

    def write_json(self, path: str | os.PathLike[str]) -> None:
        """Write the report atomically (a temporary file renamed over ``path``;
        :func:`check_writable` says beforehand whether that can work)."""
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.as_dict(), handle, indent=1)
                handle.write("\n")
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def plot(self, path: str | os.PathLike[str]) -> None:
        """PNG of unique valid inputs over time, one curve per test (needs matplotlib)."""
        from rlcheck.plot import plot_curves

        curves = {
            name: [(s[0], s[3]) for s in t.series] for name, t in self.tests.items() if t.series
        }
        plot_curves(curves, path, xlabel="seconds", ylabel="unique valid inputs")


def check_writable(path: str | os.PathLike[str]) -> None:
    """Raise :class:`InvalidArgument` unless a file can be written at ``path`` the way
    :meth:`FuzzReport.write_json` writes it (a temporary file in its directory, renamed):
    a session checks its output paths before it starts, not after hours of fuzzing.

    >>> check_writable("missing/report.json")
    Traceback (most recent call last):
    ...
    rlcheck.errors.InvalidArgument: cannot write a file in 'missing': No such file or directory
    """
    parent = Path(path).parent
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=".rlcheck-check.", suffix=".tmp")
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise InvalidArgument(f"cannot write a file in {str(parent)!r}: {reason}") from None
    os.close(fd)
    os.unlink(tmp)


# -- the controller ------------------------------------------------------------------------


def fuzz(
    pytest_args: Sequence[str],
    *,
    workers: int = 1,
    seconds: float = 60.0,
    backend: str = "rlcheck-fast",
    slice_s: float = 2.0,
    on_update: Callable[[FuzzReport], None] | None = None,
    update_every_s: float = 0.5,
    grace_s: float | None = None,
) -> FuzzReport:
    """Fuzz the Hypothesis tests that ``pytest pytest_args`` collects, for ``seconds``.

    Runs ``workers`` processes (see the module docstring). ``on_update`` is called with
    the report as it fills (at most every ``update_every_s``). Ctrl-C ends the session
    early: the workers finish their run in progress, and the report says
    ``stopped_by="interrupt"``; SIGTERM (what ``timeout``, a CI's cancel, systemd and
    ``kill`` send) does the same, with ``stopped_by="SIGTERM"``, where ``fuzz`` runs in the
    main thread (the only one that can handle signals); a second Ctrl-C or SIGTERM stops
    the waiting for the runs in progress.

    Once told to stop, the workers have ``grace_s`` seconds (default 10 + 5 slices) to
    finish their run in progress; a worker still running then (a test that hangs) is
    terminated, and ``errors`` says which test it was running. So ``fuzz`` returns within
    about ``seconds + grace_s`` whatever the tests do.

    Examples
    --------
    >>> fuzz([], workers=0)
    Traceback (most recent call last):
    ...
    rlcheck.errors.InvalidArgument: workers=0 must be at least 1
    """
    if workers < 1:
        raise InvalidArgument(f"workers={workers!r} must be at least 1")
    if not seconds > 0:
        raise InvalidArgument(f"seconds={seconds!r} must be positive")
    if not slice_s > 0:
        raise InvalidArgument(f"slice_s={slice_s!r} must be positive")
    if grace_s is None:
        grace_s = 10.0 + 5 * slice_s
    if not grace_s >= 0:
        raise InvalidArgument(f"grace_s={grace_s!r} must be at least 0")
    report = FuzzReport(workers=workers, seconds=seconds, pytest_args=list(pytest_args))
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    events: Any = ctx.Queue()
    stop = ctx.Event()
    logdir = tempfile.mkdtemp(prefix="rlcheck-fuzz-")
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(i, list(pytest_args), backend, slice_s, events, stop, logdir),
            daemon=True,
        )
        for i in range(workers)
    ]
    start = time.monotonic()
    for proc in procs:
        proc.start()
    done: set[int] = set()
    last_update = 0.0
    stopped_at: float | None = None  # when stop was first seen set
    report.stopped_by = "budget"
    sigterm = _SigtermAsInterrupt()
    try:
        sigterm.install()
        while len(done) < workers:
            now = time.monotonic() - start
            if now >= seconds and not stop.is_set():
                stop.set()
            if stop.is_set():
                # A worker whose run hangs never says "done": the grace period counts from
                # the stop, not from the last "done", or the session would never end.
                stopped_at = stopped_at if stopped_at is not None else time.monotonic()
                if time.monotonic() - stopped_at >= grace_s:
                    break
            try:
                event = events.get(timeout=0.2)
            except queue.Empty:
                event = None
            if event is not None:
                _apply(report, event, time.monotonic() - start, done)
            for i, proc in enumerate(procs):
                if i not in done and not proc.is_alive() and proc.exitcode not in (None, 0):
                    done.add(i)
                    report.errors.append(f"worker {i} exited with status {proc.exitcode}")
            if report.tests and all(t.failed for t in report.tests.values()):
                stop.set()  # every test has failed: nothing left to fuzz
                report.stopped_by = "every test failed"
            if on_update is not None and time.monotonic() - last_update >= update_every_s:
                report.elapsed = time.monotonic() - start
                on_update(report)
                last_update = time.monotonic()
    except KeyboardInterrupt:
        report.stopped_by = "SIGTERM" if sigterm.received else "interrupt"
        stop.set()
        if stopped_at is None:  # the runs in progress get the whole grace period
            stopped_at = time.monotonic()
    finally:
        try:
            stop.set()
            left = grace_s - (time.monotonic() - stopped_at if stopped_at is not None else 0.0)
            _drain(report, procs, events, start, done, grace_s=max(left, 0.0), stop_s=grace_s)
            report.elapsed = time.monotonic() - start
        finally:
            sigterm.restore()
    for i in range(workers):
        _attach_log(report, logdir, i)
    with contextlib.suppress(OSError):
        for name in os.listdir(logdir):
            os.unlink(os.path.join(logdir, name))
        os.rmdir(logdir)
    return report


class _SigtermAsInterrupt:
    """SIGTERM handled as Ctrl-C: it raises :class:`KeyboardInterrupt` in the main thread,
    as Python's own SIGINT handler does, so the controller stops the workers and returns
    its report instead of dying without one. :meth:`restore` puts the previous handler
    back. Elsewhere than in the main thread (where no handler can be set) it does nothing.
    """

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None
        self._installed = False

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous = signal.signal(signal.SIGTERM, self._handle)
        self._installed = True

    def restore(self) -> None:
        if self._installed:
            # None: a handler not set from Python (then it was the default one)
            signal.signal(signal.SIGTERM, self._previous or signal.SIG_DFL)
            self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        raise KeyboardInterrupt


def _drain(
    report: FuzzReport,
    procs: list[Any],
    events: Any,
    start: float,
    done: set[int],
    grace_s: float,
    stop_s: float | None = None,
) -> None:
    """Collect the last events while the workers finish their runs, for at most
    ``grace_s``; then stop them. A worker terminated because its time was up (``stop_s``
    since it was told to stop) is an error naming the test it was running; one terminated
    on a second Ctrl-C is not (the user chose not to wait)."""

    def collect() -> None:
        with contextlib.suppress(Exception):
            while True:
                _apply(report, events.get_nowait(), time.monotonic() - start, done)

    deadline = time.monotonic() + grace_s
    interrupted = False
    while time.monotonic() < deadline and any(p.is_alive() for p in procs):
        try:
            _apply(report, events.get(timeout=0.2), time.monotonic() - start, done)
        except queue.Empty:
            pass
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            interrupted = True
            break
    collect()  # what the workers said last: the runs they finished, the one they are in
    for i, proc in enumerate(procs):
        if proc.is_alive():
            if i not in done and not interrupted:  # (a worker that said "done" is exiting)
                report.errors.append(_hung(report, i, stop_s, time.monotonic() - start))
            # Everything a worker writes (database values, files) is written atomically:
            # stopping it here leaves nothing half-written.
            proc.terminate()
        proc.join(timeout=10)
        if proc.is_alive():  # the code under test catches or ignores SIGTERM
            proc.kill()
            proc.join(timeout=10)
    collect()


def _hung(report: FuzzReport, worker: int, stop_s: float | None, now: float) -> str:
    """The error for a worker that had not stopped in time: the test it was running, if
    known (a worker can hang outside a test's run too: collecting, in a fixture)."""
    running = report._running.get(worker)
    if running is None:
        doing = "while it ran no test (collecting them? in a fixture?)"
    else:
        name, since = running
        doing = f"in a run of {name} begun {now - since:.0f} s before (does it hang?)"
    after = f"{stop_s:.0f} s after it was told to stop" if stop_s is not None else "in time"
    return f"worker {worker} had not stopped {after}, {doing}: terminated"


def _apply(report: FuzzReport, event: tuple[Any, ...], now: float, done: set[int]) -> None:
    kind, worker = event[0], event[1]
    if kind == "collected":
        if report.ready_s is None:
            report.ready_s = round(now, 3)
        for name in event[2]:
            report.tests.setdefault(name, TestProgress())
    elif kind == "error":
        report.errors.append(f"worker {worker}: {event[2]}")
    elif kind == "warning":
        if event[2] not in report.warnings:  # every worker sees the same tests
            report.warnings.append(event[2])
    elif kind == "done":
        done.add(worker)
        report._running.pop(worker, None)
    elif kind == "running":
        report._running[worker] = (event[2], now)
    elif kind == "run":
        report._running.pop(worker, None)
        name, counts = event[2], event[3]
        test = report.tests.setdefault(name, TestProgress())
        test.runs += 1
        test.cases += counts["cases"]
        test.valid += counts["valid"]
        test.invalid += counts["invalid"]
        test.worker_unique_valid += len(counts["new_valid"])
        for fp in counts["new_valid"]:
            if fp not in test._seen:
                test.unique_valid += 1
                if len(test._seen) < _MAX_SEEN:
                    test._seen.add(fp)
        if counts["failed"]:
            # Whichever phase found it: a failure replayed from the database (an earlier
            # session's, another worker's) or an @example fails the run as generation does.
            test.failures += 1
            if test.first_failure_s is None:
                test.first_failure_s = round(now, 3)
                test.failure_phase = counts["failure_phase"]
            test.failed = True
            test.message = test.message or counts["message"]
        sample = [round(now, 3), test.cases, test.valid, test.unique_valid, test.failures]
        if test.series and now - test.series[-1][0] < 1.0:
            test.series[-1] = sample
        else:
            test.series.append(sample)


def _attach_log(report: FuzzReport, logdir: str, worker: int) -> None:
    """A worker that reported an error: its log's tail goes into the report."""
    if not any(e.startswith(f"worker {worker}") for e in report.errors):
        return
    with contextlib.suppress(OSError):
        text = Path(logdir, f"worker-{worker}.log").read_text(errors="replace")
        if text.strip():
            report.errors.append(f"worker {worker} log (tail):\n{text[-2000:]}")


# -- the workers ---------------------------------------------------------------------------


def _worker_main(
    index: int,
    pytest_args: list[str],
    backend: str,
    slice_s: float,
    events: Any,
    stop: Any,
    logdir: str,
) -> None:
    """One worker process: a pytest session whose run loop is :class:`_WorkerPlugin`'s."""
    import signal

    # Ctrl-C reaches the whole process group: the controller handles it and tells the
    # workers to stop after their run in progress (never in the middle of a save).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    log = open(os.path.join(logdir, f"worker-{index}.log"), "w")  # noqa: SIM115
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    import pytest

    plugin = _WorkerPlugin(index, backend, slice_s, events, stop)
    parent = os.getppid()
    try:
        code = pytest.main(
            [*pytest_args, "-q", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestWarning"],
            plugins=[plugin],
        )
        if not plugin.collected:
            events.put(("error", index, f"pytest could not collect the tests (exit {code})"))
    except BaseException as exc:  # reported, never a traceback over the live table
        events.put(("error", index, f"{type(exc).__name__}: {exc}"))
    finally:
        events.put(("done", index))
        log.flush()
        if os.getppid() != parent:
            # No controller reads the queue any more: exit without waiting to flush it.
            events.cancel_join_thread()


class _WorkerPlugin:
    """Replaces pytest's run loop in a worker: runs the Hypothesis tests again and again."""

    def __init__(self, index: int, backend: str, slice_s: float, events: Any, stop: Any) -> None:
        self.index = index
        self.backend = backend
        self.slice_s = slice_s
        self.events = events
        self.stop = stop
        self.collected = False
        self.rng = random.Random(index)
        self._call_error: BaseException | None = None
        self._collect_into: list[Any] | None = None

    def pytest_runtestloop(self, session: Any) -> bool:
        items = [item for item in session.items if _is_hypothesis_test(item)]
        self.collected = True
        self.events.put(("collected", self.index, [item.nodeid for item in items]))
        if not items:
            self.events.put(("error", self.index, "no Hypothesis tests were collected"))
            return True
        warning = no_database_warning(items)
        if warning:
            self.events.put(("warning", self.index, warning))
        schedule = _Schedule([item.nodeid for item in items], self.rng)
        by_id = {item.nodeid: item for item in items}
        ledgers = {item.nodeid: Ledger(max_seen=_MAX_SEEN) for item in items}
        sizes = dict.fromkeys(by_id, 10)  # a first run sized small; then by its speed
        parent = os.getppid()
        # A controller that died (killed) never sets stop: then stop by ourselves.
        while not self.stop.is_set() and os.getppid() == parent:
            name = schedule.pick()
            if name is None:
                break  # every test failed
            item = by_id[name]
            self.events.put(("running", self.index, name))  # named if it hangs
            began = time.monotonic()
            counts = self._run(item, ledgers[name], sizes[name])
            took = max(time.monotonic() - began, 1e-3)
            # About slice_s a run: stops come quickly, the schedule gets frequent news.
            per_case = took / max(counts["cases"], 1)
            sizes[name] = int(min(5000, max(10, 0.5 * self.slice_s / per_case)))
            gain = len(counts["new_valid"]) + _FAILURE_WEIGHT * counts["failed"]
            schedule.record(name, gain, took, failed=counts["failed"])
            self.events.put(("run", self.index, name, counts))
        return True

    def _run(self, item: Any, ledger: Ledger, max_examples: int) -> dict[str, Any]:
        from hypothesis import HealthCheck

        from rlcheck.hypothesis.compat import observed_choices, observed_phase, observing

        new_valid: list[int] = []
        failing_phases: list[str | None] = []  # of the failing test cases, in order
        last_explicit = [False]  # whether the last test case was an @example
        before = ledger.counts()

        def observe(observation: Any) -> None:
            if getattr(observation, "type", None) != "test_case":
                return
            outcome = _OUTCOMES.get(observation.status, "invalid")
            # Hypothesis (6.170) gives an @example's observation no phase, and the status
            # "gave_up" even when it fails: the run's verdict says that it did.
            last_explicit[0] = str(getattr(observation, "how_generated", "")).startswith("explicit")
            if outcome == "failure":
                phase = observed_phase(observation)
                failing_phases.append("explicit" if last_explicit[0] else phase)
            choices = observed_choices(observation)
            fp = stable_fingerprint(choices)
            if ledger.record(outcome, fp) and outcome == "valid":
                new_valid.append(fp)

        from rlcheck.hypothesis.compat import with_test_settings

        self._call_error = None
        reports: list[Any] = []
        with (
            with_test_settings(
                item.obj,
                getattr(item, "cls", None),
                backend=self.backend,
                max_examples=max_examples,
                deadline=None,
                derandomize=False,
                suppress_health_check=list(HealthCheck),
            ),
            observing(observe, choices=True),
            self._reports(reports),
        ):
            # The run's provider saves its final policy value as the run ends, so finished
            # runs' values are compacted instead of piling up unfinished.
            item.ihook.pytest_runtest_protocol(item=item, nextitem=None)
        after = ledger.counts()
        failed = any(r.failed for r in reports) and not self._gave_up()
        message = ""
        phase = None
        if failed:
            bad = next(r for r in reports if r.failed)
            message = str(getattr(bad.longrepr, "reprcrash", None) or bad.longrepr)[:500]
            # The first failing case found it (a shrink's come after it); no failing case
            # after an @example's: that example failed (Hypothesis raises at once).
            if failing_phases:
                phase = failing_phases[0]
            elif last_explicit[0]:
                phase = "explicit"
        return {
            "cases": after.cases - before.cases,
            "valid": after.valid - before.valid,
            "invalid": after.invalid - before.invalid,
            "new_valid": new_valid,
            "failed": failed,
            "failure_phase": phase,
            "message": message,
        }

    def _gave_up(self) -> bool:
        """The run ended without a verdict on the code (Hypothesis found too few valid
        inputs): not a failure of the test."""
        from hypothesis.errors import Unsatisfiable

        return isinstance(self._call_error, Unsatisfiable)

    @contextlib.contextmanager
    def _reports(self, into: list[Any]) -> Iterator[None]:
        self._collect_into = into
        try:
            yield
        finally:
            self._collect_into = None

    def pytest_runtest_makereport(self, item: Any, call: Any) -> None:
        if call.when == "call" and call.excinfo is not None:
            self._call_error = call.excinfo.value

    def pytest_runtest_logreport(self, report: Any) -> None:
        if self._collect_into is not None:
            self._collect_into.append(report)


class _Schedule:
    """Which test a worker runs next: by recent progress (see the module docstring)."""

    def __init__(self, names: list[str], rng: random.Random) -> None:
        self.rng = rng
        self.untried = list(names)
        rng.shuffle(self.untried)
        self.gain: dict[str, float] = {}
        self.time: dict[str, float] = {}
        self.failed: set[str] = set()

    def pick(self) -> str | None:
        if self.untried:
            return self.untried.pop()
        live = [n for n in self.gain if n not in self.failed]
        if not live:
            return None
        rates = [self.rate(n) for n in live]
        floor = 0.1 * (sum(rates) / len(rates)) + 1e-9
        return self.rng.choices(live, weights=[r + floor for r in rates])[0]

    def rate(self, name: str) -> float:
        return self.gain[name] / self.time[name] if self.time.get(name) else 0.0

    def record(self, name: str, gain: float, seconds: float, *, failed: bool) -> None:
        decay = math.pow(0.5, 1.0 / _HALF_LIFE)
        self.gain[name] = self.gain.get(name, 0.0) * decay + gain
        self.time[name] = self.time.get(name, 0.0) * decay + seconds
        if failed:
            self.failed.add(name)


def no_database_warning(items: Sequence[Any], environ: Any = os.environ) -> str:
    """A warning naming the collected tests whose settings have no example database
    (nothing they learn or find is shared or kept), or ``""`` when every test has one.

    Hypothesis loads its ``ci`` profile (``database=None``) where ``CI`` is set, so on a
    CI machine every test falls here unless the suite's own profile names a database.
    """
    from rlcheck.hypothesis.compat import test_settings

    names = []
    for item in items:
        current = test_settings(item.obj, getattr(item, "cls", None))
        if current is not None and current.database is None:
            names.append(item.nodeid)
    if not names:
        return ""
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    text = (
        f"{len(names)} of {len(items)} test(s) have no example database ({shown}): "
        "their learned policies are not shared between workers or kept for the next "
        "session, and a failure they find is not saved for a plain pytest to replay"
    )
    if environ.get("CI"):
        text += (
            ". CI is set, so Hypothesis loaded its 'ci' settings profile, which has no "
            "database: register a profile with one (a DirectoryBasedExampleDatabase on a "
            "path the CI keeps, or a RedisExampleDatabase for a fleet) and load it"
        )
    else:
        text += ": give them one in their settings or the loaded profile"
    return text


def _is_hypothesis_test(item: Any) -> bool:
    obj = getattr(item, "obj", None)
    if obj is None:
        return False
    from hypothesis import is_hypothesis_test

    return bool(is_hypothesis_test(obj))
