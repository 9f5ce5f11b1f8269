"""Benchmark: a second process starts from what the first learned, through one Redis.

One test valid in 1 of 256 cases at random (``a == 5 and b == 11``, each of 16 values, and
a wide integer so that valid inputs do not run out), on ``backend="rlcheck"`` with every
case from the learned policy, its example database a ``RedisExampleDatabase`` on a local
``redis-server``. Per repetition, under a fresh key prefix: a *cold* process (nothing
stored) and its valid rate in its first 100 cases; a *first* process that runs the test
until it has learned (at most 10 runs); then a *warm* process, and its valid rate in its
first 100 cases. ``tests/test_shared_policy.py`` runs the same learner.

Usage::

    python benchmarks/shared_policy.py --reps 3 --json results/shared_policy.json

Needs ``redis-server`` on the PATH (started on a free port, stopped at the end) and the
``redis`` client (rlcheck's dev extra), or ``--port`` of a running server.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from _redis import RedisServerMissing, redis_server

SRC = Path(__file__).resolve().parents[1] / "src"

LEARNER = """
import sys
import redis
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from hypothesis.extra.redis import RedisExampleDatabase
from rlcheck.hypothesis_backend import RLCheckProvider
from rlcheck.policy_store import DatabasePolicy

port, prefix, max_runs = int(sys.argv[1]), sys.argv[2].encode(), int(sys.argv[3])
RLCheckProvider.default_share = 0.0  # every case from the learned policy
RLCheckProvider.default_tail = 0.0
RLCheckProvider.mutate_share = 0.0  # (mutating earlier valid cases is not the policy's)
db = RedisExampleDatabase(redis.Redis(port=port), key_prefix=prefix)
loads = []
original = DatabasePolicy.load
def load(self, policy):
    loads.append(original(self, policy))
    return loads[-1]
DatabasePolicy.load = load

@settings(backend="rlcheck", database=db, max_examples=100, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(st.integers(0, 15), st.integers(0, 15), st.integers(0, 10**6))
def test_strict(a, b, n):
    calls.append(False)
    assume(a == 5 and b == 11)
    calls[-1] = True

rates = []
for run in range(max_runs):  # the first learner runs until it has learned the rule
    calls = []
    try:
        test_strict()
    except Exception:
        pass  # a run that found nothing valid (Unsatisfiable): try again
    first = calls[:100]
    rates.append(sum(first) / len(first))
    if sum(calls) >= 50:
        break
print("RESULT", rates[0], len(rates), loads[0])
"""


def learn(port: int, prefix: str, max_runs: int) -> tuple[float, int, bool]:
    """Run the learner in a new process: (valid rate of its first 100 cases, runs made,
    whether it started from stored contributions)."""
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", LEARNER, str(port), prefix, str(max_runs)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
        check=True,
    ).stdout
    # Hypothesis may print its own lines (e.g. how to reproduce a run) before ours.
    fields = [line for line in out.splitlines() if line.startswith("RESULT ")][-1].split()
    return float(fields[1]), int(fields[2]), fields[3] == "True"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--port", type=int, help="a running redis-server (default: start one)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    def run(port: int) -> list[dict[str, float]]:
        rows = []
        for rep in range(args.reps):
            prefix = f"bench-{uuid.uuid4().hex}:"
            cold, _, _ = learn(port, prefix + "cold:", 1)
            _, runs, _ = learn(port, prefix, 10)
            warm, _, loaded = learn(port, prefix, 1)
            rows.append(
                {"rep": rep, "cold": cold, "first_runs": runs, "warm": warm, "warm_loaded": loaded}
            )
            print(
                f"rep {rep}: cold {cold:.2f}  first process {runs} run(s)  "
                f"warm {warm:.2f} (loaded: {loaded})",
                flush=True,
            )
        return rows

    if args.port:
        rows = run(args.port)
    else:
        try:
            with redis_server() as port:
                rows = run(port)
        except RedisServerMissing as exc:  # raised before any run
            raise SystemExit(str(exc)) from exc
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
