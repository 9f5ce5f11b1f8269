"""What a warm run's start-up costs: reading and merging the stored policy.

For each workload, ``rlcheck`` learns on the unmutated library (as ``etna.py``'s warm start
does), then a fresh learner loads what it saved, as a warm run's first case does
(``_Persistence(...).load()``: fetch, decode, merge, mark), ``--reps`` times; the CPU
seconds (``time.process_time``) of the best and the median load. With ``--before DIR``
(another checkout's ``rlcheck`` directory, e.g. one of ``main``) the two trees are
measured alternately, each in its own processes, ``--rounds`` times, each training its own
database (so each reads the layout it writes); ``--old-values`` also has this tree read
the database the other tree wrote (a database of older values).

Usage::

    python benchmarks/etna_startup.py --before /tmp/main/rlcheck --rounds 3 \\
        --json benchmarks/results/etna_warm_startup.json
"""

from __future__ import annotations

import argparse
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


def measure(names: list[str], reps: int, read: Path | None, keep: Path | None) -> dict[str, Any]:
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
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return out


def _child(tree: Path, reps: int, read: Path | None, keep: Path | None) -> dict[str, Any]:
    args = [sys.executable, __file__, "--measure", "--reps", str(reps)]
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
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--read", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--keep", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(list(WORKLOADS), args.reps, args.read, args.keep)))
        return 0
    here = HERE.parent
    trees = {"after": here} if args.before is None else {"before": args.before, "after": here}
    rounds: list[dict[str, Any]] = []
    for i in range(args.rounds):
        row: dict[str, Any] = {}
        kept = Path(tempfile.mkdtemp(prefix="etna-startup-kept-"))
        for label, tree in trees.items():
            keep = kept / label if args.old_values and label == "before" else None
            row[label] = _child(tree, args.reps, None, keep)
        if args.old_values and "before" in trees:
            row["after reading before's values"] = _child(here, args.reps, kept / "before", None)
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
    result = {
        "rounds": rounds,
        "summary": summary,
        "reps": args.reps,
        "cpu_count": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2),
    }
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
