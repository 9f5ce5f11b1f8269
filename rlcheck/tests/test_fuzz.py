"""``rlcheck fuzz``: scheduling, counting, and whole sessions in worker processes."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlcheck.errors import InvalidArgument
from rlcheck.fuzz import (
    FuzzReport,
    TestProgress,
    _apply,
    _Schedule,
    fuzz,
    no_database_warning,
    stable_fingerprint,
)

SRC = Path(__file__).resolve().parents[1] / "src"

# A bug the learned policy reaches quickly (a == 5 is learned, then b and n at random:
# 1 in 16 x 7 of those cases fails) and a plain run of one example does not.
BUGGY = """
from hypothesis import assume, given, settings, strategies as st


@settings(max_examples=1)
@given(st.integers(0, 15), st.integers(0, 15), st.integers(0, 10**6))
def test_bug(a, b, n):
    assume(a == 5)
    assert not (b == 11 and n % 7 == 3)


@given(st.lists(st.integers(0, 9), max_size=6))
def test_fine(xs):
    assume(len(xs) >= 2 and xs[0] < xs[1])


def test_not_hypothesis():
    pass
"""


def test_schedule_tries_every_test_then_favours_progress() -> None:
    schedule = _Schedule(["a", "b", "c"], random.Random(0))
    assert sorted(schedule.pick() for _ in range(3)) == ["a", "b", "c"]  # type: ignore[type-var]
    schedule.record("a", gain=100.0, seconds=1.0, failed=False)
    schedule.record("b", gain=1.0, seconds=1.0, failed=False)
    schedule.record("c", gain=0.0, seconds=1.0, failed=True)
    picks = [schedule.pick() for _ in range(2000)]
    assert "c" not in picks  # failed: its failure is in the database
    assert picks.count("a") > 10 * picks.count("b") > 0  # b is not starved
    # Progress that stops is forgotten: a's rate falls as its runs find nothing new.
    for _ in range(20):
        schedule.record("a", gain=0.0, seconds=1.0, failed=False)
        schedule.record("b", gain=1.0, seconds=1.0, failed=False)
    picks = [schedule.pick() for _ in range(2000)]
    assert picks.count("b") > picks.count("a")


def test_unique_valid_inputs_are_distinct_over_workers() -> None:
    report = FuzzReport(workers=2, seconds=1.0, pytest_args=[])
    counts = {
        "cases": 3,
        "valid": 2,
        "invalid": 1,
        "new_valid": [1, 2],
        "failed": False,
        "failure_phase": None,
        "message": "",
    }
    _apply(report, ("run", 0, "t", counts), 0.5, set())
    _apply(report, ("run", 1, "t", {**counts, "new_valid": [2, 3]}), 0.6, set())
    t: TestProgress = report.tests["t"]
    assert (t.cases, t.valid, t.unique_valid, t.worker_unique_valid) == (6, 4, 3, 4)
    assert t.series[-1] == [0.6, 6, 4, 3, 0]


def test_fingerprints_are_equal_across_processes() -> None:
    code = "from rlcheck.fuzz import stable_fingerprint as f; print(f((1, 'x', b'y', 2.5)))"
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(SRC), "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert outs == {f"{stable_fingerprint((1, 'x', b'y', 2.5))}\n"}


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="workers=0"):
        fuzz([], workers=0)
    with pytest.raises(InvalidArgument, match="seconds=0"):
        fuzz([], seconds=0)


# b stays below 16: a bug no session finds, so a session runs for as long as it is given
UNREACHABLE = BUGGY.replace("b == 11 and n % 7 == 3", "b == 99")


def _project(tmp_path: Path, source: str = BUGGY) -> Path:
    (tmp_path / "test_buggy.py").write_text(source)
    return tmp_path


def _start_long_session(project: Path, *extra: str, **popen: Any) -> subprocess.Popen[Any]:
    """``rlcheck fuzz test_buggy.py`` in ``project`` with 2 workers for 600 s (and the further
    arguments ``extra``), started and not waited for, in a session of its own (the test
    signals its whole process group); ``popen`` are :class:`subprocess.Popen`'s other
    arguments (where its output goes)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlcheck.cli",
            "fuzz",
            "test_buggy.py",
            "--workers",
            "2",
            "--seconds",
            "600",
            *extra,
        ],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        start_new_session=True,
        **popen,
    )


def _rlcheck(
    *args: str, cwd: Path, env: dict[str, str] | None = None, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-m", "rlcheck.cli", *args],
        cwd=cwd,
        env={**(env or os.environ), "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


def _without_ci() -> dict[str, str]:
    """This process's environment without ``CI``: where ``CI`` is set, Hypothesis loads its
    ``ci`` settings profile, which has no example database, so nothing found is kept for a
    later run to replay (the README says to name a database there)."""
    return {k: v for k, v in os.environ.items() if k != "CI"}


@pytest.mark.slow
def test_a_found_failure_is_in_the_database_and_plain_pytest_replays_it(tmp_path: Path) -> None:
    project = _project(tmp_path)
    done = _rlcheck(
        "fuzz",
        "test_buggy.py",
        "--workers",
        "2",
        "--seconds",
        "40",
        "--report",
        "report.json",
        "--plot",
        "report.png",
        cwd=project,
        env=_without_ci(),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    # piped: plain lines, then the table and the failure
    assert "failed test_buggy.py::test_bug" in done.stdout
    assert "\x1b[" not in done.stdout
    report = json.loads((project / "report.json").read_text())
    assert set(report["tests"]) == {"test_buggy.py::test_bug", "test_buggy.py::test_fine"}
    bug, fine = (
        report["tests"]["test_buggy.py::test_bug"],
        report["tests"]["test_buggy.py::test_fine"],
    )
    assert bug["failed"] and bug["failures"] >= 1 and bug["first_failure_s"] > 0
    assert not fine["failed"] and fine["unique_valid"] > 0 and fine["series"]
    assert (project / "report.png").stat().st_size > 0
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]
    # A plain pytest on the default backend replays the saved failure at once.
    env = {**_without_ci(), "PYTHONPATH": str(SRC)}
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_buggy.py"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode == 1, plain.stdout
    assert "1 failed, 2 passed" in plain.stdout, plain.stdout
    # Hypothesis names the replayed input ("Falsifying example:", 6.170: "Failing test case:")
    assert re.search(r"(Falsifying example|Failing test case): test_bug\(", plain.stdout)


@pytest.mark.slow
def test_ctrl_c_stops_the_session_and_leaves_a_whole_report(tmp_path: Path) -> None:
    project = _project(tmp_path, UNREACHABLE)
    proc = _start_long_session(
        project,
        "--report",
        "report.json",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(25)  # workers started and running
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # never leave a session behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out + err
    report = json.loads((project / "report.json").read_text())
    assert report["stopped_by"] == "interrupt" and report["elapsed"] < 120
    assert not [p for p in project.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_pytest_arguments_pass_through_and_nothing_collected_is_an_error(tmp_path: Path) -> None:
    project = _project(tmp_path)
    done = _rlcheck("fuzz", "test_buggy.py", "-k", "no_such_test", "--seconds", "5", cwd=project)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no Hypothesis tests were collected" in done.stdout


def test_tests_without_a_database_are_named_with_the_ci_profile_as_the_likely_cause() -> None:
    from types import SimpleNamespace

    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.database import InMemoryExampleDatabase

    @settings(database=None)
    @given(st.integers())
    def test_none(x: int) -> None:
        pass

    @settings(database=InMemoryExampleDatabase())
    @given(st.integers())
    def test_kept(x: int) -> None:
        pass

    items = [
        SimpleNamespace(obj=test_none, nodeid="t.py::test_none", cls=None),
        SimpleNamespace(obj=test_kept, nodeid="t.py::test_kept", cls=None),
    ]
    assert no_database_warning(items[1:], environ={}) == ""
    text = no_database_warning(items, environ={})
    assert text.startswith("1 of 2 test(s) have no example database (t.py::test_none)")
    assert "not shared between workers" in text and "CI is set" not in text
    on_ci = no_database_warning(items, environ={"CI": "true"})
    assert "CI is set" in on_ci and "'ci' settings profile" in on_ci
    # every worker reports it: the report keeps one
    report = FuzzReport(workers=2, seconds=1.0, pytest_args=[])
    _apply(report, ("warning", 0, text), 0.1, set())
    _apply(report, ("warning", 1, text), 0.1, set())
    assert report.warnings == [text] and report.as_dict()["warnings"] == [text]


@pytest.mark.slow
def test_fuzz_on_a_ci_machine_warns_that_nothing_is_shared_or_kept(tmp_path: Path) -> None:
    project = _project(tmp_path, UNREACHABLE)
    env = {**os.environ, "CI": "true"}  # Hypothesis loads its ci profile: database=None
    done = _rlcheck("fuzz", "test_buggy.py", "--seconds", "4", cwd=project, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "warning: 2 of 2 test(s) have no example database" in done.stderr
    assert "CI is set" in done.stderr


def test_fuzz_help_names_the_options() -> None:
    from click.testing import CliRunner

    from rlcheck.cli import main

    result = CliRunner().invoke(main, ["fuzz", "--help"])
    assert result.exit_code == 0
    for option in ("--workers", "--seconds", "--report", "--plot", "--backend"):
        assert option in result.output


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc: Linux")
def test_workers_stop_by_themselves_when_the_controller_is_killed(tmp_path: Path) -> None:
    project = _project(tmp_path, UNREACHABLE)
    proc = _start_long_session(project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        time.sleep(20)
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        # the workers (not multiprocessing's resource tracker)
        workers = [int(c) for c in children if "spawn_main" in _cmdline(int(c))]
        assert len(workers) == 2
    finally:
        proc.kill()  # SIGKILL: no chance to tell the workers
        proc.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
        time.sleep(0.5)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()]
    for w in alive:  # do not leave them behind if the test fails
        os.kill(w, signal.SIGKILL)
    assert not alive


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


FLEET_CONFTEST = """
import os

import redis
from hypothesis import settings
from hypothesis.extra.redis import RedisExampleDatabase

settings.register_profile(
    "fleet",
    database=RedisExampleDatabase(
        redis.Redis(port=int(os.environ["FLEET_REDIS_PORT"])),
        key_prefix=os.environ["FLEET_PREFIX"].encode(),
    ),
)
settings.load_profile("fleet")
"""


@pytest.mark.slow
def test_a_fleet_shares_failures_and_policies_through_one_redis(
    tmp_path: Path, redis_port: int
) -> None:
    import uuid

    import redis

    machines = [tmp_path / "machine-a", tmp_path / "machine-b"]
    for machine in machines:  # two checkouts of one suite, nothing shared on disk
        machine.mkdir()
        _project(machine)
        (machine / "conftest.py").write_text(FLEET_CONFTEST)
    prefix = f"fleet-{uuid.uuid4().hex}:"
    env = {**os.environ, "FLEET_REDIS_PORT": str(redis_port), "FLEET_PREFIX": prefix}
    done = _rlcheck("fuzz", "test_buggy.py", "--seconds", "40", cwd=machines[0], env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert not (machines[0] / ".hypothesis" / "examples").exists()  # all of it in Redis
    keys = redis.Redis(port=redis_port).keys(prefix.encode() + b"*")
    assert any(k.endswith(b".rlcheck-policy") for k in keys)  # the learned policies
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_buggy.py"],
        cwd=machines[1],
        env={**env, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert plain.returncode == 1 and "1 failed, 2 passed" in plain.stdout, plain.stdout


# The first worker to run test_x hangs in it; every other one fails it, so "every test
# failed" stops the session while a worker hangs (deterministic, unlike a budget that must
# end after the first run began).
HANGS = """
import os
import time

from hypothesis import given, strategies as st


@given(st.integers())
def test_x(x):
    try:
        os.close(os.open("hanging", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        assert False
    time.sleep(600)
"""


@pytest.mark.slow
def test_a_hung_worker_is_terminated_after_the_grace_period_and_its_test_named(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path, HANGS)
    code = (
        "import json\n"
        "from rlcheck.fuzz import fuzz\n"
        "r = fuzz(['test_buggy.py'], workers=2, seconds=600, grace_s=2)\n"
        "print(json.dumps(r.as_dict()))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the hung worker is killed with it, should the test fail
    )
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    report = json.loads(out.splitlines()[-1])
    assert report["stopped_by"] == "every test failed"
    assert any(
        "had not stopped 2 s after it was told to stop" in e
        and "in a run of test_buggy.py::test_x" in e
        and e.endswith("terminated")
        for e in report["errors"]
    ), report["errors"]


# test_bug fails at once; test_stopper then sends SIGTERM to the controller (a worker's
# parent) once, as `timeout` or a CI's cancel would.
STOPPED = """
import os
import signal
from pathlib import Path

from hypothesis import given, strategies as st


@given(st.integers())
def test_bug(x):
    Path("failed").touch()
    assert False


@given(st.integers())
def test_stopper(x):
    if Path("failed").exists():
        try:
            os.close(os.open("sent", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return
        os.kill(os.getppid(), signal.SIGTERM)
"""


@pytest.mark.slow
def test_sigterm_stops_the_session_like_ctrl_c(tmp_path: Path) -> None:
    project = _project(tmp_path, STOPPED)
    done = _rlcheck(
        "fuzz", "test_buggy.py", "--seconds", "600", "--report", "report.json", cwd=project
    )
    assert done.returncode == 1, done.stdout + done.stderr  # a failure was found
    assert "failed test_buggy.py::test_bug" in done.stdout
    report = json.loads((project / "report.json").read_text())
    assert report["stopped_by"] == "SIGTERM" and report["elapsed"] < 120
    assert report["tests"]["test_buggy.py::test_bug"]["failures"] == 1


REPLAYED = """
from hypothesis import example, given, strategies as st


@given(st.integers(0, 1000))
def test_found(x):
    assert x < 10


@given(st.integers(0, 899))
@example(950)
def test_explicit(x):
    assert x < 900
"""


@pytest.mark.slow
def test_a_failure_counts_whichever_phase_found_it(tmp_path: Path) -> None:
    project = _project(tmp_path, REPLAYED)
    phases = []
    for _ in range(2):  # the second session replays the first's failure from the database
        done = _rlcheck(
            "fuzz",
            "test_buggy.py",
            "--seconds",
            "120",
            "--report",
            "report.json",
            cwd=project,
            env=_without_ci(),
        )
        assert done.returncode == 1, done.stdout + done.stderr
        report = json.loads((project / "report.json").read_text())
        assert report["stopped_by"] == "every test failed"
        assert report["totals"]["failures"] == 2
        tests = report["tests"]
        for t in tests.values():
            assert t["failed"] and t["failures"] == 1 and t["first_failure_s"] > 0
        phases.append(
            [tests[f"test_buggy.py::test_{n}"]["failure_phase"] for n in ("found", "explicit")]
        )
    assert phases == [["generate", "explicit"], ["reuse", "explicit"]]


def test_an_unwritable_report_path_is_refused_before_the_session(tmp_path: Path) -> None:
    project = _project(tmp_path, UNREACHABLE)
    done = _rlcheck(
        "fuzz", "test_buggy.py", "--seconds", "2", "--report", "missing/r.json", cwd=project
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Invalid value for '--report': cannot write a file in 'missing'" in done.stderr
    assert "Traceback" not in done.stderr
    assert "test_bug" not in done.stdout  # no session: no table
