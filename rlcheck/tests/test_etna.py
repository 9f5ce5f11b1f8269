"""The Etna benchmark: the mutation operators, the vendored workloads, the runner."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import etna  # noqa: E402
from _etna_suite import LIBRARIES, WORKLOADS, load  # noqa: E402
from _mutate import apply, enumerate_mutants  # noqa: E402

SOURCE = """
def f(a, b):
    if a < b and not a:
        return True
    return a + 1
"""


def test_every_operator_makes_its_change() -> None:
    mutants = enumerate_mutants(SOURCE, "m")
    changes = {m.description for m in mutants}
    assert {"< -> <=", "and -> or", "not x -> x", "condition negated", "+ -> -"} <= changes
    assert {"1 -> 2", "1 -> 0", "return True -> return False", "return x -> return None"} <= (
        changes
    )
    for mutant in mutants:
        mutated = ast.unparse(apply(SOURCE, mutant))
        assert mutated != ast.unparse(ast.parse(SOURCE)), mutant
        namespace: dict[str, object] = {}
        exec(compile(mutated, "m", "exec"), namespace)  # every mutant still compiles


def test_a_mutant_that_no_longer_matches_its_source_is_refused() -> None:
    mutant = next(m for m in enumerate_mutants(SOURCE, "m") if m.description == "< -> <=")
    with pytest.raises(ValueError, match="no longer matches"):
        apply(SOURCE.replace("a < b", "a > b"), mutant)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_each_property_holds_on_the_unmutated_library(name: str) -> None:
    workload = WORKLOADS[name]
    lib = load(LIBRARIES[workload.library])

    @settings(
        max_examples=10, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(workload.strategy)
    def check(value: object) -> None:
        workload.check(lib, value)

    check()


@pytest.mark.slow
def test_selected_mutants_still_apply_and_pass_their_trivial_inputs() -> None:
    selected = etna.load_mutants()
    strict = sum(len(ms) for name, ms in selected.items() if WORKLOADS[name].strict)
    assert strict >= 40
    for name, mutants in selected.items():
        for mutant in mutants:
            assert not etna.trivially_killed(WORKLOADS[name], mutant), mutant.id


def test_a_quick_run_writes_its_table_and_json(tmp_path: Path) -> None:
    out = tmp_path / "etna.json"
    args = ["--only", "semver", "--mutants", "1", "--seeds", "1", "--budget", "50"]
    args += ["--seconds", "2", "--backends", "hypothesis", "rlcheck", etna.WARM]
    assert etna.main([*args, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {r["backend"] for r in data["rows"]} == {"hypothesis", "rlcheck", etna.WARM}
    assert all(d["outcome"] in ("found", "passed", "budget") for d in data["details"])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hypothesis", "rlcheck"])
def test_a_replayed_run_fails_where_the_real_run_does(backend: str) -> None:
    # etna_replay's premise: up to its first failure a run on a mutant makes the same
    # inputs as on the unmutated library, so the recorded inputs give its tests to failure.
    import etna_replay

    name = "jsonpointer"
    mutant = etna.load_mutants()[name][0]
    real = etna.run_once(WORKLOADS[name], mutant, backend, 200, 30.0, 1)
    inputs = etna_replay.record(name, backend, 200, 30.0, 1)
    replayed = etna_replay.first_failure(name, mutant, inputs)
    assert real["outcome"] == "found" and replayed is not None
    assert replayed[0] == real["tests_to_failure"]


def test_replay_counts_inputs_run_again_and_pairs_an_earlier_result(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import etna_replay

    inputs = [("a", True, 0.0, "probe"), ("b", False, 0.0, "mutation"), ("a", True, 0.0, "x")]
    assert etna_replay._repeats(inputs) == {"x": 1}
    runs = []
    for seed in range(3):
        for backend, tests in (("hypothesis", 40), ("rlcheck", 20), ("rlcheck-v", 10)):
            kills = {"m:0": [tests, 0.1, "'/0/0'", "probe"]}
            runs.append(
                {"workload": "jsonpointer", "backend": backend, "seed": seed, "tests": 99}
                | {"kills": kills}
            )
    assert etna_replay._paired({"runs": runs, "seconds_cap": 5.0}, resamples=20) == 0
    out = capsys.readouterr().out
    assert "strict, all" in out and "rest, all" not in out  # no rest workload listed
    assert "rlcheck-v over rlcheck, strict, all: 0.500x" in out
