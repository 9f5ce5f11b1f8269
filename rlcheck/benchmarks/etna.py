"""Etna-style benchmark: time to failure on injected mutants of four real libraries.

Workloads (``_etna_suite``): semver, iso8601, jsonpointer and bintrees' AVL tree, vendored
from their PyPI sdists under ``benchmarks/etna/`` with their licences, each with a property
whose oracle is a reference written in the suite. Four workloads are *strict* (most random
inputs are rejected by the reference through ``assume``); three draw inputs valid by
construction (the rest, where guidance should cost nothing).

Mutants come from an AST mutation operator set (``_mutate``: comparison flips, off-by-one
constants, ``and``/``or`` swaps, arithmetic swaps, negated conditions, changed return
values), applied in memory to the library's own code. ``--select`` chooses them once and
writes ``etna/mutants.json``: per workload, mutants (in a fixed shuffled order) that pass
the workload's trivial inputs and that some backend kills at a large budget; runs read that
file, so every run measures the same mutants.

A run is one Hypothesis run of one workload's property against one mutant, on one backend,
with its own ``@seed``, the database off (or, for ``rlcheck-warm``, a copy of one holding
the policy that ``rlcheck`` learned on the unmutated library in an earlier run of the same
seed), no shrinking and health checks suppressed, stopped at the first failure or at the
budget (``max_examples=--budget`` valid cases, Hypothesis's own limits on invalid ones, and
``--seconds`` of wall time). Each call of the property is a test; a call running past 2 s
is a failure (a mutant that hangs). Per run: found or not, tests and seconds to the first
failure.

Metrics per workload and backend: runs that found the bug, mutants killed (found in most
seeds), and per mutant the median tests and seconds to failure over the seeds (a run that
did not find it counts as the budget: ``--seconds``, or every test it ran); the table gives
the medians over mutants and the geometric mean over mutants of each backend's median
seconds to failure relative to the default's (mutants that some backend killed).

Usage (the machine is shared: run it niced and in the background)::

    python benchmarks/etna.py --quick                     # a few minutes
    python benchmarks/etna.py                             # 10 seeds, every mutant
    python benchmarks/etna.py --select                    # choose the mutants again
    python benchmarks/etna.py --only semver avl --backends hypothesis rlcheck

Results go to ``benchmarks/results/etna.json`` (``etna_quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hypothesis import given, seed
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import UnsatisfiedAssumption

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _etna_suite import LIBRARIES, VENDOR, WORKLOADS, Workload, load
from _mutate import Mutant
from _runs import generate_only, grid
from _runs import register_variant as _variant  # one home: satisfiability.py's too

RESULTS = Path(__file__).resolve().parent / "results"
MUTANTS_FILE = VENDOR / "mutants.json"
WARM = "rlcheck-warm"  # rlcheck with the policy an earlier run learned (not a backend name)
_HANG_S = 2.0


# Registered at import, so worker processes have them too: the guidance's parts alone and
# together, each fixing every option it measures (README: what each part pays).
# "rlcheck-nomutate": the default without mutation (policy, choice tree, default's tail);
# "rlcheck-tail0": the policy and the choice tree alone; "rlcheck-m<op>": the default with
# that mutation operator alone (rlcheck.mutation.OPERATORS; the default: small values);
# "rlcheck-mall": all five; "rlcheck-tail0-mall": those without the tail (the whole budget
# guided).
_variant("rlcheck-nomutate", mutate_share=0.0)
_variant("rlcheck-tail0", default_share=0.0, default_tail=0.0, mutate_share=0.0)
for _op in ("change", "boundary", "copy", "simplest", "small"):
    _variant(f"rlcheck-m{_op}", mutate_share=0.5, mutate_operators={_op: 1.0})
_ALL = {"change": 1.0, "boundary": 1.0, "copy": 1.0, "simplest": 1.0, "small": 1.0}
_variant("rlcheck-mall", mutate_operators=_ALL)  # the five operators, equally weighted
_variant("rlcheck-tail0-mall", default_tail=0.0, mutate_operators=_ALL)
_variant("rlcheck-adaptive", mutate_operators=_ALL, mutate_adaptive=True)  # weights by new valids
# the fast variant before its patience became 1 (README: "rlcheck-fast")
_variant("rlcheck-fast-p30", "FastRLCheckProvider", default_patience=30)
# the probe of Hypothesis's provider alone, before its simplest extensions (README)
_variant("rlcheck-nosimplest", probe_simplest_cases=0)
# a warm run that still runs the probe's simplest extensions (README: warm start),
# measured as "rlcheck-warm-ws1": a warm backend "rlcheck-warm<x>" runs "rlcheck<x>" on
# the policy "rlcheck" learned
_variant("rlcheck-ws1", warm_probe_simplest=True)
# the probe without its small cases (README: time to failure, small cases)
_variant("rlcheck-nosmall", probe_small_cases=0)
# a warm run without them (measured as "rlcheck-warm-wsm0")
_variant("rlcheck-wsm0", warm_probe_small=False)
# a warm run that runs them every other case whatever their earlier valid rate
# ("rlcheck-warm-wsr0"; the default spaces them by it)
_variant("rlcheck-wsr0", warm_small_by_rate=False)
# how much of the learned half mutates earlier valid cases (the default: 0.5)
_variant("rlcheck-ms25", mutate_share=0.25)
_variant("rlcheck-ms75", mutate_share=0.75)
# a share that follows the run's rates of new valid inputs, mutated against fresh
_variant("rlcheck-msa", mutate_share_bounds=(0.25, 0.75))
# less exploration off the greedy choice (the default: epsilon 0.25)
_variant("rlcheck-eps05", epsilon=0.05)
# both: the rate-following mutation share and epsilon 0.05
_variant("rlcheck-msa-eps05", mutate_share_bounds=(0.25, 0.75), epsilon=0.05)
# invalid cases of Hypothesis's provider in a row before a learned one, where its valid
# rate is below the tail's (the default: 30)
_variant("rlcheck-p1", default_patience=1)
_variant("rlcheck-p5", default_patience=5)
# a warm run that interleaves that many of Hypothesis's provider cases with its first
# learned ones (measured as "rlcheck-warm-wp10" / "-wp20")
_variant("rlcheck-wp10", warm_probe_cases=10)
_variant("rlcheck-wp20", warm_probe_cases=20)
# this round's parts (README: cold time to failure), each option set: the probe's cases
# all first (probe_spread=0) or spread among 2 (the default) or 1 or 4 learned cases each
# once it cannot step aside; its provider cases with or without a novel prefix
# (probe_novel); the case to mutate picked by its energy or uniformly (mutate_energy)
_variant("rlcheck-base", probe_novel=False, probe_spread=0, mutate_energy=False)
_variant("rlcheck-novel", probe_novel=True, probe_spread=0, mutate_energy=False)
_variant("rlcheck-novel-spread", probe_novel=True, probe_spread=2, mutate_energy=False)
_variant("rlcheck-novel-energy", probe_novel=True, probe_spread=0, mutate_energy=True)
_variant("rlcheck-energy", probe_novel=True, probe_spread=2, mutate_energy=True)
_variant("rlcheck-ps1", probe_spread=1)
_variant("rlcheck-ps4", probe_spread=4)
# the unaffordable tail's share interleaved from the first learned case (before
# tail_interleave_late; "rlcheck-warm-il0" warm)
_variant("rlcheck-il0", tail_interleave_late=False)
# the learning rule's step-size floor (step_floor: a recency-weighted mean past 1 / step
# visits; 0: the plain running mean), and count-based exploration bonuses (count_bonus)
for _sf in (0, 5, 10, 25, 50):
    _variant(f"rlcheck-sf{_sf}", step_floor=_sf / 100)
for _cb in (2, 5, 20):
    _variant(f"rlcheck-cb{_cb}", count_bonus=float(_cb))

# a "small" (or "simplest") mutation's first draw moved off its recorded value
# (mutate_suffix_moves)
_variant("rlcheck-sm", mutate_suffix_moves=True)
# half the mutations on the newest new valid case (mutate_recent)
_variant("rlcheck-mr50", mutate_recent=0.5)


class _Stop(BaseException):
    """The run's time budget is spent (a BaseException: Hypothesis lets it through)."""


class MutantHang(Exception):
    """One call of the property ran past ``_HANG_S``: the mutant hangs (a failure)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise MutantHang(f"a call ran past {_HANG_S} s")


_libraries: dict[tuple[str, str | None], Any] = {}


def _library(workload: Workload, mutant: Mutant | None) -> Any:
    key = (workload.library, None if mutant is None else mutant.id)
    if key not in _libraries:
        if len(_libraries) > 64:
            _libraries.clear()
        _libraries[key] = load(LIBRARIES[workload.library], mutant)
    return _libraries[key]


def run_once(
    workload: Workload,
    mutant: Mutant | None,
    backend: str,
    budget: int,
    seconds: float,
    run_seed: int,
    database: Path | None = None,
) -> dict[str, Any]:
    """One Hypothesis run to the first failure; what it found and when."""
    lib = _library(workload, mutant)
    calls = valid = 0
    found_at: tuple[int, float, float] | None = None
    error = ""
    start = time.perf_counter()
    cpu_start = time.process_time()
    deadline = start + seconds

    def probe(value: Any) -> None:
        nonlocal calls, valid, found_at, error
        if time.perf_counter() > deadline:
            raise _Stop
        calls += 1
        signal.setitimer(signal.ITIMER_REAL, _HANG_S)
        try:
            workload.check(lib, value)
        except UnsatisfiedAssumption:
            raise
        except Exception as exc:
            if found_at is None:
                found_at = (
                    calls,
                    time.perf_counter() - start,
                    time.process_time() - cpu_start,
                )
                error = f"{type(exc).__name__}: {str(exc)[:120]}"
            raise
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        valid += 1

    probe._hypothesis_internal_add_digest = workload.name.encode()  # type: ignore[attr-defined]
    # settings outermost: @seed alone turns the database off, and the warm start needs it
    db = None if database is None else DirectoryBasedExampleDatabase(database)
    test = generate_only(backend, budget, db)(seed(run_seed)(given(workload.strategy)(probe)))
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    outcome = "passed"
    try:
        test()
    except _Stop:
        outcome = "budget"
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the failure, or an ExceptionGroup / Flaky around it
        outcome = "found" if found_at is not None else f"error:{type(exc).__name__}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    elapsed = time.perf_counter() - start
    if outcome != "found":
        found_at = None
    return {
        "workload": workload.name,
        "mutant": None if mutant is None else mutant.id,
        "backend": backend,
        "seed": run_seed,
        "outcome": outcome,
        "tests": calls,
        "valid": valid,
        "tests_to_failure": None if found_at is None else found_at[0],
        "seconds_to_failure": None if found_at is None else round(found_at[1], 4),
        "cpu_to_failure": None if found_at is None else round(found_at[2], 4),
        "seconds": round(elapsed, 3),
        "cpu": round(time.process_time() - cpu_start, 4),
        "error": error,
    }


# -- mutants -------------------------------------------------------------------------


def trivially_killed(workload: Workload, mutant: Mutant) -> bool:
    """Whether the mutant fails to load or fails one of the workload's trivial inputs."""
    previous = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        lib = _library(workload, mutant)
        for value in workload.trivial:
            signal.setitimer(signal.ITIMER_REAL, _HANG_S)
            try:
                workload.check(lib, value)
            except UnsatisfiedAssumption:
                pass
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
    except Exception:
        return True
    finally:
        signal.signal(signal.SIGALRM, previous)
    return False


def select(
    names: Iterable[str],
    strict_count: int,
    rest_count: int,
    budget: int,
    seconds: float,
) -> dict[str, list[dict[str, Any]]]:
    """Per workload, up to ``*_count`` mutants that trivial inputs miss and a run kills
    (of the first three times as many that trivial inputs miss)."""
    chosen: dict[str, list[dict[str, Any]]] = {}
    for name in names:
        workload = WORKLOADS[name]
        want = strict_count if workload.strict else rest_count
        candidates = LIBRARIES[workload.library].mutants()
        random.Random(name).shuffle(candidates)
        picked: list[dict[str, Any]] = []
        tried = 0
        for mutant in candidates:
            if len(picked) >= want or tried >= 3 * want:
                break
            if trivially_killed(workload, mutant):
                continue
            tried += 1
            killers = []
            for backend, run_seed in (("hypothesis", 0), ("rlcheck", 0)):
                run = run_once(workload, mutant, backend, budget, seconds, run_seed)
                if run["outcome"] == "found":
                    killers.append(f"{backend}/{run_seed}")
                    break
            if killers:
                picked.append({**asdict(mutant), "killed_by": killers[0], "error": run["error"]})
            print(
                f"{name}: {mutant.id} {mutant.function}: {mutant.description}: "
                f"{'killed by ' + killers[0] if killers else 'not killed'}",
                flush=True,
            )
        print(f"{name}: {len(picked)} mutants of {tried} tried ({len(candidates)} in all)")
        chosen[name] = picked
    return chosen


def load_mutants() -> dict[str, list[Mutant]]:
    data = json.loads(MUTANTS_FILE.read_text())
    fields = Mutant.__dataclass_fields__
    return {
        name: [Mutant(**{k: v for k, v in m.items() if k in fields}) for m in ms]
        for name, ms in data["workloads"].items()
    }


# -- runs ----------------------------------------------------------------------------


def _task(task: tuple[Any, ...]) -> dict[str, Any]:
    name, mutant, backend, budget, seconds, run_seed, database = task
    workload = WORKLOADS[name]
    if database is None:
        return run_once(workload, mutant, backend, budget, seconds, run_seed)
    with tempfile.TemporaryDirectory(prefix="etna-warm-") as tmp:
        copy = Path(tmp) / "db"
        shutil.copytree(database, copy)
        base = "rlcheck" + backend[len(WARM) :]
        run = run_once(workload, mutant, base, budget, seconds, run_seed, copy)
    run["backend"] = backend
    return run


def train(names: list[str], seeds: int, budget: int, root: Path) -> None:
    """The earlier run of each warm start: rlcheck on the unmutated library, database on,
    to its end (``max_examples``; no time cap, so the policy is saved)."""
    for name in names:
        for run_seed in range(seeds):
            database = root / f"{name}-{run_seed}"
            run_once(WORKLOADS[name], None, "rlcheck", budget, 600.0, run_seed, database)
            if not any(database.rglob("*")):
                # a run that stepped aside (valid by construction) learns nothing to save
                print(f"note: no policy was saved for {name} (seed {run_seed})")
                database.mkdir(parents=True, exist_ok=True)


def measure(
    mutants: dict[str, list[Mutant]],
    backends: list[str],
    budget: int,
    seconds: float,
    seeds: int,
    jobs: int,
    root: Path,
) -> list[dict[str, Any]]:
    """All runs, backends interleaved within each (mutant, seed) so load hits them alike."""
    tasks = []
    for name, ms in mutants.items():
        for mutant in ms:
            for run_seed in range(seeds):
                for backend in backends:
                    warm = backend.startswith(WARM)
                    database = root / f"{name}-{run_seed}" if warm else None
                    tasks.append((name, mutant, backend, budget, seconds, run_seed, database))
    if jobs <= 1:
        return [_task(t) for t in tasks]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(_task, tasks, chunksize=4))


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else math.inf


def aggregate(details: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]]:
    """Per (workload, backend): kills, and per-mutant medians over the seeds."""
    runs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for d in details:
        runs.setdefault((d["workload"], d["backend"], d["mutant"]), []).append(d)
    per_mutant: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for (name, backend, mutant), ds in runs.items():
        found = [d for d in ds if d["outcome"] == "found"]
        # a run that missed the bug counts as the whole budget
        secs = [d["seconds_to_failure"] if d in found else seconds for d in ds]
        tests = [d["tests_to_failure"] if d in found else d["tests"] for d in ds]
        # CPU seconds of this process (load-independent, unlike seconds); a miss: the
        # whole run's (older results have none)
        cpus = [
            d.get("cpu_to_failure") if d in found else d.get("cpu")
            for d in ds
            if (d.get("cpu_to_failure") if d in found else d.get("cpu")) is not None
        ]
        per_mutant.setdefault((name, backend), {})[mutant] = {
            "found": len(found),
            "runs": len(ds),
            "median_seconds": _median(secs),
            "median_tests": _median(tests),
            "median_cpu": _median(cpus) if cpus else None,
        }
    rows = []
    for (name, backend), ms in per_mutant.items():
        base = per_mutant.get((name, "hypothesis"), {})
        ratios = [
            max(m["median_seconds"], 1e-4) / max(base[k]["median_seconds"], 1e-4)
            for k, m in ms.items()
            if k in base and (m["found"] or base[k]["found"])
        ]
        rows.append(
            {
                "workload": name,
                "strict": WORKLOADS[name].strict,
                "backend": backend,
                "mutants": len(ms),
                "runs": sum(m["runs"] for m in ms.values()),
                "found": sum(m["found"] for m in ms.values()),
                "killed": sum(2 * m["found"] > m["runs"] for m in ms.values()),
                "median_seconds": _median([m["median_seconds"] for m in ms.values()]),
                "median_tests": _median([m["median_tests"] for m in ms.values()]),
                "time_ratio_geomean": (
                    math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None
                ),
                "median_cpu": _median(
                    [m["median_cpu"] for m in ms.values() if m["median_cpu"] is not None]
                ),
                "tests_ratio_geomean": _ratio(ms, base, "median_tests"),
                "cpu_ratio_geomean": _ratio(ms, base, "median_cpu"),
                "per_mutant": ms,
            }
        )
    return rows


def _ratio(
    ms: dict[str, dict[str, Any]], base: dict[str, dict[str, Any]], metric: str
) -> float | None:
    """Geometric mean over mutants (some backend found) of ``metric`` over the default's."""
    logs = [
        math.log(max(m[metric], 1e-4)) - math.log(max(base[k][metric], 1e-4))
        for k, m in ms.items()
        if k in base
        and (m["found"] or base[k]["found"])
        and m.get(metric) is not None
        and base[k].get(metric) is not None
    ]
    return math.exp(sum(logs) / len(logs)) if logs else None


def summary(rows: list[dict[str, Any]], strict: bool) -> dict[str, dict[str, float | None]]:
    """Per backend, over the strict (or the other) workloads: kills and the time ratio."""
    out: dict[str, dict[str, float | None]] = {}
    for backend in dict.fromkeys(r["backend"] for r in rows):
        ratios = [
            math.log(k["median_seconds"] or 1e-4) - math.log(base["median_seconds"] or 1e-4)
            for r in rows
            if r["backend"] == backend and r["strict"] == strict
            for base_row in rows
            if base_row["backend"] == "hypothesis" and base_row["workload"] == r["workload"]
            for key, k in r["per_mutant"].items()
            for base in [base_row["per_mutant"].get(key)]
            if base is not None and (k["found"] or base["found"])
        ]
        selected = [r for r in rows if r["backend"] == backend and r["strict"] == strict]
        mine: dict[str, dict[str, Any]] = {}
        base_all: dict[str, dict[str, Any]] = {}
        for r in selected:
            base_row = next(
                (
                    b
                    for b in rows
                    if b["backend"] == "hypothesis" and b["workload"] == r["workload"]
                ),
                None,
            )
            for key, k in r["per_mutant"].items():
                mine[f"{r['workload']}/{key}"] = k
                if base_row is not None and key in base_row["per_mutant"]:
                    base_all[f"{r['workload']}/{key}"] = base_row["per_mutant"][key]
        out[backend] = {
            "found": sum(r["found"] for r in selected),
            "killed": sum(r["killed"] for r in selected),
            "time_ratio_geomean": math.exp(sum(ratios) / len(ratios)) if ratios else None,
            "tests_ratio_geomean": _ratio(mine, base_all, "median_tests"),
            "cpu_ratio_geomean": _ratio(mine, base_all, "median_cpu"),
        }
    return out


def table(rows: list[dict[str, Any]]) -> list[str]:
    backends, names, by = grid(rows, "workload")
    width = 30
    lines = [
        f"{'workload':<18}" + "".join(f"{b:>{width}}" for b in backends),
        f"{'':<18}" + "".join(f"{'found kill  tests    s  x def':>{width}}" for _ in backends),
    ]
    for name in names:
        cells = []
        for b in backends:
            r = by.get((name, b))
            if r is None:
                cells.append(f"{'-':>{width}}")
                continue
            ratio = r["time_ratio_geomean"]
            cell = (
                f"{r['found']:>3}/{r['runs']:<3} {r['killed']:>2}/{r['mutants']:<2}"
                f"{_fmt(r['median_tests'], 0):>6} {_fmt(r['median_seconds'], 2):>5}"
                f" {'-' if ratio is None else f'{ratio:.2f}':>5}"
            )
            cells.append(f"{cell:>{width}}")
        strict = "" if WORKLOADS[name].strict else " (rest)"
        lines.append(f"{name + strict:<18}" + "".join(cells))
    for strict in (True, False):
        s = summary(rows, strict)
        label = "strict, all" if strict else "rest, all"
        cells = []
        for b in backends:
            ratio = s[b]["time_ratio_geomean"]
            shown = "-" if ratio is None else f"{ratio:.2f}"
            cell = f"{s[b]['found']:>4} {s[b]['killed']:>3}   x def {shown:>5}"
            cells.append(f"{cell:>{width}}")
        lines.append(f"{label:<18}" + "".join(cells))
        cells = []
        for b in backends:
            t, c = s[b]["tests_ratio_geomean"], s[b]["cpu_ratio_geomean"]
            cell = (
                f"tests {'-' if t is None else f'{t:.2f}'} cpu {'-' if c is None else f'{c:.2f}'}"
            )
            cells.append(f"{cell:>{width}}")
        lines.append(f"{'  x def':<18}" + "".join(cells))
    return lines


def _fmt(value: float, digits: int) -> str:
    return "inf" if math.isinf(value) else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=None, help="max_examples (1000)")
    parser.add_argument("--seconds", type=float, default=None, help="time cap of a run (10)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds per mutant (10)")
    parser.add_argument("--mutants", type=int, default=None, help="at most this many a workload")
    parser.add_argument("--quick", action="store_true", help="3 seeds, 3 mutants, small budget")
    parser.add_argument("--only", nargs="*", default=None, help="workload names")
    parser.add_argument(
        "--backends", nargs="*", default=["hypothesis", "rlcheck", "rlcheck-fast", WARM]
    )
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--select", action="store_true", help="choose the mutants again")
    parser.add_argument("--json", type=Path, default=None, help="where to write the results")
    args = parser.parse_args(argv)
    budget = args.budget or (300 if args.quick else 1000)
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    seeds = args.seeds or (3 if args.quick else 10)
    names = args.only or list(WORKLOADS)
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; known: {sorted(WORKLOADS)}")
    start = time.perf_counter()
    if args.select:
        chosen = select(names, 12, 4, 1000, 4.0)
        if MUTANTS_FILE.exists():  # --only: keep the other workloads' mutants
            chosen = {**json.loads(MUTANTS_FILE.read_text())["workloads"], **chosen}
        MUTANTS_FILE.write_text(
            json.dumps({"budget": 1000, "seconds": 4.0, "workloads": chosen}, indent=1) + "\n"
        )
        print(f"wrote {MUTANTS_FILE} ({time.perf_counter() - start:.0f} s)")
        return 0
    mutants = {name: ms for name, ms in load_mutants().items() if name in names}
    limit = args.mutants or (3 if args.quick else None)
    if limit:
        mutants = {name: ms[:limit] for name, ms in mutants.items()}
    with tempfile.TemporaryDirectory(prefix="etna-train-") as tmp:
        root = Path(tmp)
        if any(b.startswith(WARM) for b in args.backends):
            train(list(mutants), seeds, budget, root)
        details = measure(mutants, args.backends, budget, seconds, seeds, args.jobs, root)
    rows = aggregate(details, seconds)
    print(
        f"max_examples={budget}, {seconds:g} s a run, {seeds} seeds, "
        f"{sum(map(len, mutants.values()))} mutants"
    )
    for line in table(rows):
        print(line)
    elapsed = time.perf_counter() - start
    print(f"({elapsed:.0f} s; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    out = args.json or RESULTS / f"etna{'_quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "budget": budget,
                "seconds_cap": seconds,
                "seeds": seeds,
                "elapsed": round(elapsed, 1),
                "cpu_count": os.cpu_count(),
                "load_average": round(os.getloadavg()[0], 2),
                "strict_summary": summary(rows, True),
                "rest_summary": summary(rows, False),
                "rows": rows,
                "details": details,
            },
            indent=1,
            default=lambda x: None,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
