"""Benchmark: what ``pytest --rlcheck`` costs on a suite where guidance cannot help.

Runs one pytest suite in each mode, the modes interleaved round by round (so a change of
machine load hits every mode alike), and reports wall-clock and CPU time (user + system
of the pytest process and its children) per mode, best of the rounds and median, and the
ratio to the plain run. Modes: ``default`` (no flag), ``rlcheck`` (``--rlcheck``),
``rlcheck-fast`` (``--rlcheck-fast``), ``compare`` (``--rlcheck-compare``, which runs
every test on both backends: its ratio should stay at or under ``1 + rlcheck``'s).

The default suite is ``benchmarks/overhead_suite/`` (ordinary property tests: round-trips,
invariants, mild ``assume``/``.filter``, ``st.data()``, a composite with string labels,
``st.recursive``, a stateful machine), where the target is ``--rlcheck`` at most 1.2x the
plain run. Any other suite can be measured in its own directory::

    python benchmarks/overhead.py                              # the bundled suite, 3 rounds
    python benchmarks/overhead.py --rounds 5 --json out.json
    python benchmarks/overhead.py --suite /path/to/project/tests --cwd /path/to/project \\
        --modes default rlcheck -- -k "not slow"
    python benchmarks/overhead.py --before /tmp/main/rlcheck   # each mode on both trees

With ``--before DIR`` (another checkout's ``rlcheck`` directory) every mode also runs with
that tree's ``src`` first on ``PYTHONPATH`` (``<mode>@before``), right after the same mode
on this tree, in every round: the plain run too, since pytest loads rlcheck's plugin in
every run of an environment where it is installed. Each tree then keeps its example
database (learned policies) in a fresh directory of its own
(``HYPOTHESIS_STORAGE_DIRECTORY``): the first round starts cold, later rounds warm, alike.

Every run gets ``-p no:cacheprovider -p no:randomly -q`` and writes a JUnit XML report; the
benchmark compares each test's outcome with the plain run's of the same round and lists every
test that passed there but failed (or errored) with a flag: the "never breaks a test" check,
on any suite. A suite whose plain run already fails some tests still measures (those tests
are listed, not counted against a mode); exit statuses other than 0, 1 and 5 (no tests)
fail the benchmark, and so does a broken test (exit 1).

Where a mode's time goes: each test's duration comes from the same report, and the end of
the run lists the tests whose time, summed over the rounds, differs most from the plain
run's, with their outcomes (``skipped`` and ``xfailed`` apart: a test that calls
``pytest.skip`` or ``pytest.xfail`` depending on its input has whichever outcome its first
such input decides, and an xfail is shrunk like a failure, so it costs seconds where a skip
costs none), and every test whose outcome differs from the plain run's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES: dict[str, list[str]] = {
    "default": [],
    "rlcheck": ["--rlcheck"],
    "rlcheck-fast": ["--rlcheck-fast"],
    "compare": ["--rlcheck-compare"],
}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(
    suite: str,
    cwd: Path,
    flags: list[str],
    extra: list[str],
    src: Path | None = None,
    storage: Path | None = None,
) -> dict[str, Any]:
    """One pytest run (``src``: rlcheck's source tree, first on ``PYTHONPATH``;
    ``storage``: Hypothesis's storage directory): its wall-clock and CPU seconds, and each
    test's outcome."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    if storage is not None:
        env["HYPOTHESIS_STORAGE_DIRECTORY"] = str(storage)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", suite, "-q", "-p", "no:cacheprovider"]
        cmd += ["-p", "no:randomly", f"--junitxml={junit}", *flags, *extra]
        cpu0, wall0 = _children_cpu(), time.perf_counter()
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False, env=env)
        wall, cpu = time.perf_counter() - wall0, _children_cpu() - cpu0
        if done.returncode not in (0, 1, 5) or not junit.exists():
            sys.stderr.write(done.stdout[-3000:] + done.stderr[-2000:])
            mode = " ".join(flags) or "(plain)"
            raise SystemExit(f"pytest {mode} failed: exit {done.returncode}")
        outcomes, durations = test_outcomes(junit)
    return {"wall_s": wall, "cpu_s": cpu, "outcomes": outcomes, "durations": durations}


def test_outcomes(junit: Path) -> tuple[dict[str, str], dict[str, float]]:
    """``classname::name`` -> ``passed``, ``failed``, ``error``, ``skipped`` or
    ``xfailed``, and -> its seconds (setup, call and teardown), from a JUnit XML report
    (a test with both a failure and a teardown error counts as failed)."""
    outcomes: dict[str, str] = {}
    durations: dict[str, float] = {}
    for case in ET.parse(junit).iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag: child for child in case}
        if "failure" in tags:
            outcome = "failed"
        elif "error" in tags:
            outcome = "error"
        elif "skipped" in tags:
            xfail = tags["skipped"].get("type") == "pytest.xfail"
            outcome = "xfailed" if xfail else "skipped"
        else:
            outcome = "passed"
        if outcomes.get(name) in (None, "passed", "skipped", "xfailed"):
            outcomes[name] = outcome
        durations[name] = durations.get(name, 0.0) + float(case.get("time") or 0.0)
    return outcomes, durations


def time_differences(
    plain: list[dict[str, float]], other: list[dict[str, float]], top: int = 5
) -> list[tuple[str, float, float]]:
    """The ``top`` tests whose seconds summed over the rounds differ most between the
    plain run and another mode: ``(test, plain seconds, other seconds)``, the largest
    difference first.

    >>> time_differences([{"a": 1.0, "b": 2.0}], [{"a": 1.1, "b": 5.0}], top=1)
    [('b', 2.0, 5.0)]
    """
    totals: dict[str, list[float]] = {}
    for index, rounds in enumerate((plain, other)):
        for durations in rounds:
            for name, seconds in durations.items():
                totals.setdefault(name, [0.0, 0.0])[index] += seconds
    ranked = sorted(totals.items(), key=lambda item: -abs(item[1][1] - item[1][0]))
    return [(name, round(a, 3), round(b, 3)) for name, (a, b) in ranked[:top]]


def broken_tests(plain: dict[str, str], other: dict[str, str]) -> list[str]:
    """The tests that passed in the plain run and failed or errored in the other.

    >>> broken_tests({"a": "passed", "b": "failed"}, {"a": "failed", "b": "failed"})
    ['a']
    """
    return sorted(
        name
        for name, outcome in other.items()
        if outcome in ("failed", "error") and plain.get(name) == "passed"
    )


def measure(
    suite: str,
    cwd: Path,
    modes: list[str],
    rounds: int,
    extra: list[str],
    before: Path | None = None,
) -> dict[str, Any]:
    trees: dict[str, Path | None] = {"": None}
    storage: dict[str, Path | None] = {"": None}
    if before is not None:
        trees["@before"] = before / "src"
        storage = {label: Path(tempfile.mkdtemp(prefix="overhead-db-")) for label in trees}
    modes = [mode + label for mode in modes for label in trees]
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    broken: dict[str, list[str]] = {mode: [] for mode in modes}
    changed: dict[str, list[str]] = {mode: [] for mode in modes}
    durations: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    failing_plain: set[str] = set()
    for r in range(rounds):
        plain: dict[str, str] | None = None
        for mode in modes:
            flags, _, label = mode.partition("@")
            tree = "@" + label if label else ""
            run = run_once(suite, cwd, MODES[flags], extra, trees[tree], storage[tree])
            outcomes = run.pop("outcomes")
            durations[mode].append(run.pop("durations"))
            if mode == "default":
                plain = outcomes
                failing_plain |= {n for n, o in outcomes.items() if o in ("failed", "error")}
            elif plain is not None:
                for name in broken_tests(plain, outcomes):
                    if name not in broken[mode]:
                        broken[mode].append(name)
                for name, outcome in sorted(outcomes.items()):
                    if outcome != plain.get(name, outcome):
                        changed[mode].append(f"round {r + 1}: {name}: {plain[name]} -> {outcome}")
            runs[mode].append(run)
            last = runs[mode][-1]
            passed = sum(o == "passed" for o in outcomes.values())
            print(
                f"  round {r + 1}/{rounds} {mode:<13} wall {last['wall_s']:7.2f} s"
                f"  cpu {last['cpu_s']:7.2f} s  passed {passed}/{len(outcomes)}",
                flush=True,
            )
    for path in storage.values():
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
    summary: dict[str, dict[str, float]] = {}
    for mode, samples in runs.items():
        summary[mode] = {
            f"{what}_{stat}": fn(s[what] for s in samples)
            for what in ("wall_s", "cpu_s")
            for stat, fn in (("best", min), ("median", statistics.median))
        }
    base = summary.get("default")
    if base is not None:
        for row in summary.values():
            for what in ("wall_s", "cpu_s"):
                for stat in ("best", "median"):
                    row[f"{what}_{stat}_ratio"] = row[f"{what}_{stat}"] / base[f"{what}_{stat}"]
    slowest: dict[str, list[tuple[str, float, float]]] = {}
    if "default" in durations:
        for mode in modes:
            if mode != "default":
                slowest[mode] = time_differences(durations["default"], durations[mode])
    return {
        "runs": runs,
        "summary": summary,
        "broken": broken,
        "changed": changed,
        "time_differences": slowest,
        "failing_plain": sorted(failing_plain),
    }


def format_table(summary: dict[str, dict[str, float]]) -> str:
    header = f"{'mode':<13} {'wall best':>10} {'ratio':>6} {'cpu best':>9} {'ratio':>6}"
    header += f" {'wall med':>9} {'ratio':>6} {'cpu med':>8} {'ratio':>6}"
    lines = [header, "-" * len(header)]
    for mode, row in summary.items():
        cells = [f"{mode:<13}"]
        for what, width in (("wall_s_best", 10), ("cpu_s_best", 9), ("wall_s_median", 9)):
            cells += [f"{row[what]:>{width}.2f}", f"{row.get(what + '_ratio', 1.0):>5.2f}x"]
        cells += [f"{row['cpu_s_median']:>8.2f}", f"{row.get('cpu_s_median_ratio', 1.0):>5.2f}x"]
        lines.append(" ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default=str(HERE / "overhead_suite"))
    parser.add_argument("--cwd", type=Path, default=None, help="run pytest here")
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "overhead.json")
    parser.add_argument("--before", type=Path, default=None, help="another rlcheck checkout")
    parser.add_argument("extra", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    cwd = args.cwd or Path(args.suite).resolve().parent
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - platforms without it
        load = float("nan")
    print(f"suite {args.suite}: {args.rounds} rounds of {', '.join(args.modes)}", flush=True)
    result = measure(args.suite, cwd, args.modes, args.rounds, args.extra, args.before)
    print()
    print(format_table(result["summary"]))
    if result["failing_plain"]:
        print(f"\nfailing in the plain run too (not counted): {len(result['failing_plain'])}")
        for name in result["failing_plain"]:
            print(f"  {name}")
    for mode, rows in result["time_differences"].items():
        print(f"\n{mode}: the tests whose seconds (all rounds) differ most from the plain run's")
        for name, plain_s, mode_s in rows:
            print(f"  {plain_s:8.2f} s -> {mode_s:8.2f} s  {name}")
    for mode, lines in result["changed"].items():
        for line in lines:
            print(f"outcome changed by {mode}: {line}")
    for mode, names in result["broken"].items():
        for name in names:
            print(f"BROKEN by {mode}: {name} passed in the plain run of its round")
    result.update(
        suite=args.suite,
        before=None if args.before is None else str(args.before),
        extra=args.extra,
        rounds=args.rounds,
        load_before=load,
        load_after=os.getloadavg()[0],
        python=sys.version.split()[0],
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nJSON: {args.json}")
    return 1 if any(result["broken"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
