"""Policies shared by processes through one Redis server (RELIABILITY rlcheck #11).

A real ``redis-server`` (the ``redis_port`` fixture in ``conftest.py``) and real
processes: what one learner saved, the next one starts from; learners saving at the same
time all keep their contributions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rlcheck.learner import Policy
from rlcheck.policy_store import DatabasePolicy

pytestmark = pytest.mark.slow  # several processes each

SRC = Path(__file__).parents[1] / "src"

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from shared_policy import learn  # noqa: E402  (the learner the benchmark measures)


def test_a_second_process_starts_from_what_the_first_learned(redis_port: int) -> None:
    prefix = f"shared-{uuid.uuid4().hex}:"
    _, runs, loaded = learn(redis_port, prefix, max_runs=10)
    assert not loaded and runs <= 10
    warm, _, loaded = learn(redis_port, prefix, max_runs=1)
    assert loaded
    # At random 1 case in 256 is valid; a cold learner finds the first one after about
    # 256 cases and learns from then on. The second process is greedy from its first case
    # (valid unless one of its two choices explores: 0.75-0.79 ** 2, about 0.6).
    assert warm >= 0.4, f"valid rate {warm} in the second process's first 100 cases"


_SAVER = """
import sys, time
import redis
from hypothesis.extra.redis import RedisExampleDatabase
from rlcheck.learner import Policy
from rlcheck.policy_store import DatabasePolicy

port, prefix, me, rounds = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3], int(sys.argv[4])
db = RedisExampleDatabase(redis.Redis(port=port), key_prefix=prefix)
policy, store = Policy(), DatabasePolicy(db, b"test", meta={"kind": "t"})
store.load(policy)
for i in range(rounds):  # learn and save in small steps, interleaved with the other writer
    policy.learn([(me, (i % 7,), i % 3)], float(i % 5))
    store.save(policy)
    time.sleep(0.002)
print("done")
"""


def test_interleaved_saves_of_two_processes_keep_both_contributions(redis_port: int) -> None:
    import redis
    from hypothesis.extra.redis import RedisExampleDatabase

    prefix = f"interleaved-{uuid.uuid4().hex}:"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    rounds = 150
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(redis_port), prefix, name, str(rounds)],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "done"
    db = RedisExampleDatabase(redis.Redis(port=redis_port), key_prefix=prefix.encode())
    merged = Policy()
    assert DatabasePolicy(db, b"test", meta={"kind": "t"}).load(merged)
    for name in ("alpha", "beta"):
        expected = Policy()
        for i in range(rounds):
            expected.learn([(name, (i % 7,), i % 3)], float(i % 5))
        for state in range(7):
            for action in range(3):
                q, n = merged.table(name).value((state,), action)
                q_one, n_one = expected.table(name).value((state,), action)
                # Nothing lost; a compaction racing another can count a part twice (its
                # weight), never change a mean of disjoint episodes.
                assert n >= n_one and q == pytest.approx(q_one), (name, state, action)
