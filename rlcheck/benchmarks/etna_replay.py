"""Etna's mutants, replayed: tests to failure of many backends from one run each per seed.

A run of a backend is the same, test for test, on the unmutated library and on a mutant up
to the mutant's first failure (the backend sees only valid, invalid and failed cases, and
none has failed yet). So one run per (workload, backend, seed) on the unmutated library,
recording every input it generated, gives the tests to failure of every mutant at once:
the index of the first recorded input on which the mutant's property fails. That is fast
enough to measure each part of the guidance alone (``benchmarks/etna.py``'s variants), and
its tests to failure do not depend on the machine's load (its seconds do: they are taken
from the recorded run, a missed mutant counting as ``--seconds``).

It also shows what each backend generates (``--show``): the first inputs of a run, the
share valid and distinct, and the input that killed each mutant.

Usage::

    python benchmarks/etna_replay.py --seeds 5 --backends hypothesis rlcheck rlcheck-nomutate
    python benchmarks/etna_replay.py --only semver --seeds 1 --show 60

Results go to ``benchmarks/results/etna_replay.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import given, seed
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import UnsatisfiedAssumption

sys.path.insert(0, str(Path(__file__).resolve().parent))
import etna  # the variants register on import
from _etna_suite import WORKLOADS
from _runs import generate_only

STRICT = [name for name, w in WORKLOADS.items() if w.strict]


def case_kind(seen: list[Any]) -> str:
    """Which kind of case the running test case is (``seen``: the run's rlcheck provider,
    once met): ``probe`` (Hypothesis's provider, the probe), ``simplest`` (the probe's
    simplest extension of a novel prefix), ``small`` (a small case: ``probe_small_cases``),
    ``small-probe`` (one of ``small_probe_cases``, off by default), ``provider``
    (Hypothesis's provider interleaved with learned cases), ``mutation`` (an earlier valid
    case mutated), ``learned`` (the policy's own draws), ``engine`` (Hypothesis's own
    backend: the default, a run's first case, or an rlcheck run's tail or hand-back) and
    ``aside`` (Hypothesis's own backend after an rlcheck run stepped aside)."""
    from hypothesis.control import _current_build_context

    from rlcheck.hypothesis.provider import RLCheckProvider, _SmallCase

    data = getattr(_current_build_context.value, "data", None)
    provider = getattr(data, "provider", None)
    if not isinstance(provider, RLCheckProvider):
        if seen:
            rlc = seen[0]
            rate = rlc._probe_rate
            if not rlc._warm and rate is not None and rate >= type(rlc).step_aside_rate:
                return "aside"
        return "engine"
    if not seen:
        seen.append(provider)
    case = provider._probe_case
    if case is not None:
        if isinstance(case, _SmallCase):
            return "small"
        return "simplest" if case.simplest else "probe"
    if provider._small:
        return "small-probe"
    if provider._delegate is not None:
        return "provider"
    return "mutation" if provider._plan is not None else "learned"


def record(
    name: str,
    backend: str,
    budget: int,
    seconds: float,
    run_seed: int,
    database: Path | None = None,
) -> list[Any]:
    """Every input of one run on the unmutated library: ``(value, valid, seconds, kind)``
    (:func:`case_kind`)."""
    workload = WORKLOADS[name]
    lib = etna._library(workload, None)
    inputs: list[Any] = []
    seen: list[Any] = []
    start = time.perf_counter()

    def probe(value: Any) -> None:
        elapsed = time.perf_counter() - start
        if elapsed > seconds:
            raise etna._Stop
        kind = case_kind(seen)
        try:
            workload.check(lib, value)
        except UnsatisfiedAssumption:
            inputs.append((value, False, elapsed, kind))
            raise
        inputs.append((value, True, elapsed, kind))

    probe._hypothesis_internal_add_digest = name.encode()  # type: ignore[attr-defined]
    db = None if database is None else DirectoryBasedExampleDatabase(database)
    test = generate_only(backend, budget, db)(seed(run_seed)(given(workload.strategy)(probe)))
    with contextlib.suppress(etna._Stop):
        test()
    return inputs


def record_warm(name: str, backend: str, budget: int, seconds: float, run_seed: int) -> list[Any]:
    """:func:`record` of a warm backend (``rlcheck-warm<x>``): ``rlcheck<x>`` on a copy of
    the database in which ``rlcheck<x>`` learned on the unmutated library in an earlier run of
    the same seed (as ``etna.py``'s warm start)."""
    with tempfile.TemporaryDirectory(prefix="etna-replay-warm-") as tmp:
        trained, database = Path(tmp) / "trained", Path(tmp) / "db"
        # here, not etna.run_once: the database key is the recording test function's
        base = "rlcheck" + backend[len(etna.WARM) :]
        record(name, base, budget, 600.0, run_seed, trained)
        trained.mkdir(exist_ok=True)  # a run that stepped aside saved nothing
        shutil.copytree(trained, database)
        return record(name, base, budget, seconds, run_seed, database)


def first_failure(name: str, mutant: Any, inputs: list[Any]) -> tuple[int, float, str, str] | None:
    """The first recorded input on which the mutant fails: (tests, seconds, input, its
    kind of case)."""
    workload = WORKLOADS[name]
    lib = etna._library(workload, mutant)
    previous = signal.signal(signal.SIGALRM, etna._on_alarm)
    try:
        for i, (value, _valid, elapsed, kind) in enumerate(inputs):
            signal.setitimer(signal.ITIMER_REAL, etna._HANG_S)
            try:
                workload.check(lib, value)
            except UnsatisfiedAssumption:
                pass
            except Exception:
                return i + 1, elapsed, repr(value), kind
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    return None


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=STRICT, help="workloads (the strict ones)")
    parser.add_argument("--backends", nargs="*", default=["hypothesis", "rlcheck"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=500, help="max_examples")
    parser.add_argument("--seconds", type=float, default=5.0, help="time cap of a run")
    parser.add_argument("--show", type=int, default=0, help="print a run's first N inputs")
    parser.add_argument("--json", type=Path, default=etna.RESULTS / "etna_replay.json")
    parser.add_argument(
        "--paired",
        type=Path,
        default=None,
        help="no run: an earlier --json's table, and each backend's strict and rest ratios"
        " over the second backend's, with a 90%% interval from resampling the seeds",
    )
    args = parser.parse_args(argv)
    if args.paired is not None:
        return _paired(json.loads(args.paired.read_text()))
    mutants = etna.load_mutants()
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for name in args.only:
        for backend in args.backends:
            for run_seed in range(args.seeds):
                rec = record_warm if backend.startswith(etna.WARM) else record
                inputs = rec(name, backend, args.budget, args.seconds, run_seed)
                valid = [repr(v) for v, ok, _, _ in inputs if ok]
                kills = {}
                before: dict[str, dict[str, int]] = {}
                for m in mutants.get(name, []):
                    found = first_failure(name, m, inputs)
                    kills[f"{m.function}:{m.index}"] = found
                    if found is not None:  # the kinds of the cases up to the failure
                        counts: dict[str, int] = {}
                        for *_, kind in inputs[: found[0]]:
                            counts[kind] = counts.get(kind, 0) + 1
                        before[f"{m.function}:{m.index}"] = counts
                last = max((found[0] for found in kills.values() if found), default=0)
                rows.append(
                    {
                        "workload": name,
                        "backend": backend,
                        "seed": run_seed,
                        "tests": len(inputs),
                        "valid": len(valid),
                        "distinct_valid": len(set(valid)),
                        "kills": kills,
                        "kinds_before": before,
                        # the run's kinds of case up to its last first failure
                        "kinds": _runs_of([k for *_, k in inputs[:last]]),
                        # and of those, the ones that ran an earlier input again
                        "repeats": _repeats(inputs[:last]),
                    }
                )
                if args.show:
                    print(
                        f"{name} {backend} seed {run_seed}: {len(inputs)} tests, "
                        f"{len(valid)} valid, {len(set(valid))} distinct"
                    )
                    for i, (v, ok, _, kind) in enumerate(inputs[: args.show]):
                        print(f"  {i + 1:>4} {'valid  ' if ok else 'invalid'} {kind:<8} {v!r}")
                    for k, found in kills.items():
                        print(f"  {k}: {'missed' if found is None else found}")
    summary = _summarize(rows, args.backends, args.seconds)
    for line in _table(summary, args.backends):
        print(line)
    by_kind = _kinds(rows)
    for line in _kinds_table(by_kind):
        print(line)
    elapsed = time.perf_counter() - start
    load = os.getloadavg()[0]
    print(f"({elapsed:.0f} s; load {load:.1f}; tests are load-independent, seconds are not)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "budget": args.budget,
                "seconds_cap": args.seconds,
                "seeds": args.seeds,
                "load_average": round(load, 2),
                "summary": summary,
                "kinds": by_kind,
                "runs": rows,
            },
            indent=1,
        )
    )
    print(f"wrote {args.json}")
    return 0


def _summarize(rows: list[dict[str, Any]], backends: list[str], cap: float) -> dict[str, Any]:
    """Per workload and backend: mutants killed (in most seeds), and the geometric mean
    over mutants of the median tests (seconds) to failure over the default's."""
    out: dict[str, Any] = {}
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["workload"], r["backend"]), []).append(r)
    listed = [*dict.fromkeys(r["workload"] for r in rows)]
    groups = {
        "strict, all": [n for n in listed if WORKLOADS[n].strict],
        "rest, all": [n for n in listed if not WORKLOADS[n].strict],
    }
    names = [*listed, *(g for g, members in groups.items() if members)]
    medians: dict[tuple[str, str], dict[str, tuple[float, float, int]]] = {}
    for (name, backend), runs in by.items():
        per: dict[str, tuple[float, float, int]] = {}
        for key in runs[0]["kills"]:
            found = [r["kills"][key] for r in runs]
            tests = [f[0] if f else r["tests"] for f, r in zip(found, runs, strict=True)]
            secs = [f[1] if f else cap for f in found]
            per[key] = (statistics.median(tests), statistics.median(secs), sum(map(bool, found)))
        medians[(name, backend)] = per
    for name in names:
        workloads = groups.get(name, [name])
        out[name] = {}
        for backend in backends:
            t_ratios, s_ratios, killed, mutants = [], [], 0, 0
            for n in workloads:
                base, ours = medians.get((n, backends[0]), {}), medians.get((n, backend), {})
                for key, (tests, secs, found) in ours.items():
                    b_tests, b_secs, b_found = base[key]
                    runs = len(by[(n, backend)])
                    mutants += 1
                    killed += 2 * found > runs
                    if found or b_found:
                        t_ratios.append(max(tests, 1) / max(b_tests, 1))
                        s_ratios.append(max(secs, 1e-4) / max(b_secs, 1e-4))
            out[name][backend] = {
                "killed": killed,
                "mutants": mutants,
                "tests_ratio": _geomean(t_ratios),
                "seconds_ratio": _geomean(s_ratios),
            }
    return out


def _paired(result: dict[str, Any], resamples: int = 400) -> int:
    """Print an earlier result's table, then, per later backend, its geometric mean of
    tests to failure over the second backend's (the strict and the rest workloads apart),
    with a 90 % interval from resampling the seeds (the same seeds for every backend, so
    the interval is that of the difference the backends make, not of the seeds' luck)."""
    import random

    rows, cap = result["runs"], result["seconds_cap"]
    backends = [*dict.fromkeys(r["backend"] for r in rows)]
    for line in _table(_summarize(rows, backends, cap), backends):
        print(line)
    if len(backends) < 3:
        return 0
    seeds = sorted({r["seed"] for r in rows})
    rng = random.Random(0)

    def ratio(sample: list[int], backend: str, group: str) -> float | None:
        # a seed drawn twice counts twice (its runs appear twice among the medians' runs)
        picked = [r for s in sample for r in rows if r["seed"] == s]
        cell = _summarize(picked, [backends[0], backends[1], backend], cap).get(group)
        if cell is None:
            return None
        ours, base = cell[backend]["tests_ratio"], cell[backends[1]]["tests_ratio"]
        return None if ours is None or base is None else ours / base

    for backend in backends[2:]:
        for group in ("strict, all", "rest, all"):
            point = ratio(seeds, backend, group)
            if point is None:
                continue
            draws = sorted(
                r
                for _ in range(resamples)
                if (r := ratio([rng.choice(seeds) for _ in seeds], backend, group)) is not None
            )
            low, high = draws[len(draws) // 20], draws[-1 - len(draws) // 20]
            print(
                f"{backend} over {backends[1]}, {group}: {point:.3f}x the tests to failure"
                f" (90 % of {resamples} resamples of the seeds: {low:.3f} to {high:.3f})"
            )
    return 0


def _repeats(inputs: list[Any]) -> dict[str, int]:
    """Per kind of case, the inputs equal (by ``repr``) to an earlier one of the run: a
    new choice sequence can still make an input run before (a draw the input does not
    depend on), and such a test cannot find a bug the earlier one did not."""
    seen: set[str] = set()
    out: dict[str, int] = {}
    for value, _valid, _elapsed, kind in inputs:
        text = repr(value)
        if text in seen:
            out[kind] = out.get(kind, 0) + 1
        seen.add(text)
    return out


def _runs_of(kinds: list[str]) -> list[tuple[str, int]]:
    """``kinds`` as runs: ``[(kind, how many in a row), ...]``."""
    out: list[tuple[str, int]] = []
    for kind in kinds:
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + 1)
        else:
            out.append((kind, 1))
    return out


def _kinds(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per workload and backend, over every (mutant, seed) found: which kind of case found
    the bug (how many times), and the mean tests of each kind up to the failure."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        cell = out.setdefault(r["workload"], {}).setdefault(
            r["backend"], {"found": 0, "found_by": {}, "tests_before": {}, "repeats": {}}
        )
        for kind, n in r.get("repeats", {}).items():
            cell["repeats"][kind] = cell["repeats"].get(kind, 0) + n
        for key, found in r["kills"].items():
            if found is None:
                continue
            cell["found"] += 1
            cell["found_by"][found[3]] = cell["found_by"].get(found[3], 0) + 1
            for kind, n in r["kinds_before"][key].items():
                cell["tests_before"][kind] = cell["tests_before"].get(kind, 0) + n
    for cells in out.values():
        for cell in cells.values():
            n = max(cell["found"], 1)
            cell["tests_before"] = {k: round(v / n, 1) for k, v in cell["tests_before"].items()}
    return out


def _kinds_table(by_kind: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "which kind of case found each bug (times), mean tests of each kind up to it, and"
        " inputs run again (summed over runs, up to each run's last first failure)"
    ]
    for name, cells in by_kind.items():
        for backend, cell in cells.items():
            found = " ".join(f"{k} {v}" for k, v in sorted(cell["found_by"].items()))
            before = " ".join(f"{k} {v}" for k, v in sorted(cell["tests_before"].items()))
            again = " ".join(f"{k} {v}" for k, v in sorted(cell["repeats"].items()))
            lines.append(
                f"  {name:<14} {backend:<22} found by: {found}; tests before: {before}; "
                f"run again: {again or 'none'}"
            )
    return lines


def _table(summary: dict[str, Any], backends: list[str]) -> list[str]:
    width = max(24, *(len(b) + 2 for b in backends))
    lines = [
        f"{'workload':<14}" + "".join(f"{b:>{width}}" for b in backends),
        f"{'':<14}" + "".join(f"{'kill  x tests  x s':>{width}}" for _ in backends),
    ]
    for name, cells in summary.items():
        row = f"{name:<14}"
        for b in backends:
            c = cells[b]
            t = "-" if c["tests_ratio"] is None else f"{c['tests_ratio']:.2f}"
            s = "-" if c["seconds_ratio"] is None else f"{c['seconds_ratio']:.2f}"
            cell = f"{c['killed']}/{c['mutants']} {t:>7} {s:>5}"
            row += f"{cell:>{width}}"
        lines.append(row)
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
