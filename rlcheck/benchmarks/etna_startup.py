"""What a run's start-up costs: reading and merging the stored policy, the first tests.

Load: for each workload, ``rlcheck`` learns on the unmutated library (as ``etna.py``'s warm start
does), then a fresh learner loads what it saved, as a warm run's first case does
(``_Persistence(...).load()``: fetch, decode, merge, mark), ``--reps`` times; the CPU
seconds (``time.process_time``) of the best and the median load. With ``--before DIR``
(another checkout's ``rlcheck`` directory, e.g. one of ``main``) the two trees are
measured alternately, each in its own processes, ``--rounds`` times, each training its own
database (so each reads the layout it writes); ``--old-values`` also has this tree read
the database the other tree wrote (a database of older values).

First tests (``--first N``): in the same processes, ``--first-reps`` runs per mode of each
workload's property on the unmutated library, stopped after its N-th test: ``default``
(Hypothesis's backend), ``cold`` (``rlcheck``, an empty directory database) and ``warm``
(``rlcheck``, a copy of the trained database), the modes alternated, each run with its own
seed, one after the other in one process as a suite runs them (so a run's window holds
whatever an earlier run left to the garbage collector). Per run, the CPU seconds
(``time.process_time``) from the call of the test to the end of its k-th test, and to its
return (``end``: the run's last save included); the medians over the runs.

``--import-reps R``: ``import rlcheck`` in R fresh interpreters per tree, alternated, the
CPU seconds of the import (best and median) and how many ``rlcheck`` modules it loaded.

Usage::

    python benchmarks/etna_startup.py --before /tmp/main/rlcheck --rounds 3 \\
        --json benchmarks/results/etna_warm_startup.json
    python benchmarks/etna_startup.py --before /tmp/main/rlcheck --rounds 3 --first 20 \\
        --import-reps 15 --json benchmarks/results/etna_first_tests.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKLOADS = ("semver", "avl", "iso8601")  # jsonpointer's learning run saves nothing
MODES = ("default", "cold", "warm")
SHOWN = (1, 2, 5, 10, 20)  # the tests whose CPU the table shows (those up to --first)


def _key_and_db(name: str, root: Path) -> tuple[bytes, Any]:
    """Train ``name`` into a database under ``root``; its test's key and the database."""
    sys.path.insert(0, str(HERE))
    from etna import WORKLOADS as ALL
    from etna import run_once
    from hypothesis.database import DirectoryBasedExampleDatabase

    from rlcheck.hypothesis import provider

    keys: list[bytes] = []
    original = provider._Persistence.__init__

    def spy(self: Any, database: Any, key: bytes, policy: Any) -> None:
        keys.append(key)
        original(self, database, key, policy)

    provider._Persistence.__init__ = spy  # type: ignore[method-assign]
    try:
        run_once(ALL[name], None, "rlcheck", 500, 600.0, 0, root / "db")
    finally:
        provider._Persistence.__init__ = original  # type: ignore[method-assign]
    return keys[0], DirectoryBasedExampleDatabase(root / "db")


def first_tests(
    name: str, mode: str, trained: Path, key: bytes, run_seed: int, n: int
) -> list[float]:
    """One run of ``name``'s property in ``mode``, stopped after its ``n``-th test: the
    CPU seconds from the call to the end of each test, then to the run's return. The test
    is filed under ``key`` (the trained one's: a warm run finds its policy)."""
    from _runs import generate_only
    from etna import WORKLOADS as ALL
    from etna import _library, _Stop
    from hypothesis import given, seed
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.errors import UnsatisfiedAssumption

    workload = ALL[name]
    lib = _library(workload, None)
    cpu: list[float] = []
    with tempfile.TemporaryDirectory(prefix="etna-first-") as tmp:
        path = Path(tmp) / "db"
        if mode == "warm":
            shutil.copytree(trained, path)
        db = DirectoryBasedExampleDatabase(path)
        start = 0.0

        def probe(value: Any) -> None:
            if len(cpu) >= n:
                raise _Stop
            try:
                workload.check(lib, value)
            except UnsatisfiedAssumption:
                raise
            except Exception:
                pass  # the unmutated library: a reference's own corner, not a stop
            finally:
                cpu.append(time.process_time() - start)

        probe._hypothesis_internal_add_digest = name.encode()  # type: ignore[attr-defined]
        backend = "hypothesis" if mode == "default" else "rlcheck"
        test = generate_only(backend, 10 * n, db)(seed(run_seed)(given(workload.strategy)(probe)))
        test._hypothesis_internal_database_key = key  # type: ignore[attr-defined]
        start = time.process_time()
        with contextlib.suppress(_Stop):
            test()
        cpu.append(time.process_time() - start)
    return cpu


def measure(
    names: list[str], reps: int, read: Path | None, keep: Path | None, first: int, first_reps: int
) -> dict[str, Any]:
    from rlcheck.hypothesis import provider
    from rlcheck.learner import Policy

    out: dict[str, Any] = {}
    for name in names:
        root = Path(tempfile.mkdtemp(prefix="etna-startup-"))
        try:
            key, db = _key_and_db(name, root)
            if read is not None:  # read the database another tree wrote instead
                from hypothesis.database import DirectoryBasedExampleDatabase

                db = DirectoryBasedExampleDatabase(read / name)
            if keep is not None:
                shutil.copytree(root / "db", keep / name)
            times, states = [], 0
            for _ in range(reps):
                policy = Policy()
                start = time.process_time()
                provider._Persistence(db, key, policy).load()
                times.append(time.process_time() - start)
                states = policy.n_states()
            out[name] = {
                "states": states,
                "best_ms": round(min(times) * 1e3, 3),
                "median_ms": round(statistics.median(times) * 1e3, 3),
            }
            if first:
                runs: dict[str, list[list[float]]] = {mode: [] for mode in MODES}
                for rep in range(first_reps):
                    for mode in MODES:
                        runs[mode].append(
                            first_tests(name, mode, root / "db", key, 1000 + rep, first)
                        )
                out[name]["first"] = {
                    mode: _first_summary(cpus, first) for mode, cpus in runs.items()
                }
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return out


def _first_summary(cpus: list[list[float]], first: int) -> dict[str, Any]:
    """Medians over runs of the CPU ms to the end of test k (for k in :data:`SHOWN` up
    to ``first``, and ``first``) and to the run's return; the runs' cumulative CPU."""
    shown = sorted({k for k in SHOWN if k <= first} | {first})
    return {
        **{
            f"test_{k}_ms": round(statistics.median(c[k - 1] for c in cpus) * 1e3, 3) for k in shown
        },
        "end_ms": round(statistics.median(c[-1] for c in cpus) * 1e3, 3),
        "runs_ms": [[round(x * 1e3, 3) for x in c] for c in cpus],
    }


def import_cost(tree: Path, reps: int) -> list[tuple[float, int]]:
    """CPU seconds of ``import rlcheck`` in ``reps`` fresh interpreters on ``tree``'s
    code, and how many ``rlcheck`` modules each import loaded."""
    code = (
        "import sys, time; t = time.process_time(); import rlcheck; "
        "t = time.process_time() - t; "
        "print(t, sum(m == 'rlcheck' or m.startswith('rlcheck.') for m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    out = []
    for _ in range(reps):
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        seconds, modules = done.stdout.split()
        out.append((float(seconds), int(modules)))
    return out


def _child(
    tree: Path, reps: int, read: Path | None, keep: Path | None, first: int, first_reps: int
) -> dict[str, Any]:
    args = [sys.executable, __file__, "--measure", "--reps", str(reps)]
    args += ["--first", str(first), "--first-reps", str(first_reps)]
    if read is not None:
        args += ["--read", str(read)]
    if keep is not None:
        args += ["--keep", str(keep)]
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, default=None, help="another rlcheck checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--old-values", action="store_true")
    parser.add_argument("--first", type=int, default=0, help="measure runs' first N tests")
    parser.add_argument("--first-reps", type=int, default=5, help="runs per mode a round")
    parser.add_argument("--import-reps", type=int, default=0, help="fresh `import rlcheck`s")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        measured = measure(
            list(WORKLOADS), args.reps, args.read, args.keep, args.first, args.first_reps
        )
        print(json.dumps(measured))
        return 0
    here = HERE.parent
    trees = {"after": here} if args.before is None else {"before": args.before, "after": here}
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        row: dict[str, Any] = {}
        kept = Path(tempfile.mkdtemp(prefix="etna-startup-kept-"))
        for label, tree in trees.items():
            keep = kept / label if args.old_values and label == "before" else None
            row[label] = _child(tree, args.reps, None, keep, args.first, args.first_reps)
        if args.old_values and "before" in trees:
            row["after reading before's values"] = _child(
                here, args.reps, kept / "before", None, args.first, args.first_reps
            )
        shutil.rmtree(kept, ignore_errors=True)
        rounds.append(row)
        print(f"round {i + 1}: {json.dumps(row)}", flush=True)
    summary = {
        label: {
            name: {
                "best_ms": min(r[label][name]["best_ms"] for r in rounds),
                "median_of_medians_ms": statistics.median(
                    r[label][name]["median_ms"] for r in rounds
                ),
                "states": rounds[-1][label][name]["states"],
            }
            for name in WORKLOADS
        }
        for label in rounds[0]
    }
    for label, per in summary.items():
        print(label, json.dumps(per))
    first = _first_table(rounds, args.first) if args.first else {}
    imports: dict[str, Any] = {}
    for _ in range(args.import_reps):
        for label, tree in trees.items():  # alternated, one import each in turn
            imports.setdefault(label, []).extend(import_cost(tree, 1))
    imports = {
        label: {
            "best_ms": round(min(t for t, _ in runs) * 1e3, 2),
            "median_ms": round(statistics.median(t for t, _ in runs) * 1e3, 2),
            "modules": runs[-1][1],
        }
        for label, runs in imports.items()
    }
    for label, cost in imports.items():
        print(f"import rlcheck, {label}: {json.dumps(cost)}")
    result = {
        "rounds": rounds,
        "summary": summary,
        "first_tests": first,
        "import": imports,
        "reps": args.reps,
        "first": args.first,
        "first_reps": args.first_reps,
        "cpu_count": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2),
    }
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


def _first_table(rounds: list[dict[str, Any]], first: int) -> dict[str, Any]:
    """Per tree, workload and mode: medians over every run of every round of the CPU ms
    to the end of the shown tests and to the return; printed as a table."""
    shown = sorted({k for k in SHOWN if k <= first} | {first})
    table: dict[str, Any] = {}
    print("CPU ms from the call to the end of test k (median of runs), and to the return")
    print(
        f"{'tree':<8}{'workload':<10}{'mode':<9}" + "".join(f"{k:>8}" for k in shown) + "     end"
    )
    for label in rounds[0]:
        for name in WORKLOADS:
            for mode in MODES:
                runs = [c for r in rounds for c in r[label][name]["first"][mode]["runs_ms"]]
                cells = {f"test_{k}_ms": statistics.median(c[k - 1] for c in runs) for k in shown}
                cells["end_ms"] = statistics.median(c[-1] for c in runs)
                cells["runs"] = len(runs)
                table.setdefault(label, {}).setdefault(name, {})[mode] = cells
                print(
                    f"{label:<8}{name:<10}{mode:<9}"
                    + "".join(f"{cells[f'test_{k}_ms']:>8.2f}" for k in shown)
                    + f"{cells['end_ms']:>8.2f}"
                )
    return table


if __name__ == "__main__":
    raise SystemExit(main())
