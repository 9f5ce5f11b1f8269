"""The real-world benchmarks (generators, real validators, strategies) and compare.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _bench import load_benchmark
from hypothesis import HealthCheck, given, settings

import rlcheck
from rlcheck import Gen, RandomGuide
from rlcheck.coverage import BranchCoverage

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

from realworld import BENCHMARKS, load, strategy  # noqa: E402

VALID = {
    "workflow": "on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
    "    - run: make\n",
    "xsd": '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
    '<xs:element name="a" type="xs:int"/></xs:schema>',
    "sql": "SELECT name, count(id) FROM users GROUP BY name",
    "pymodule": "import os\nprint(os.sep)\n",
    "bst": (5, (2, None, None), (8, None, None)),
}
INVALID = {
    "workflow": "on: commit\njobs:\n  build:\n    runs-on: ubuntu-latest\n",  # no such event
    "xsd": '<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">'
    '<xs:element type="xs:int"/></xs:schema>',  # a global element needs a name
    "sql": "SELECT price FROM users",  # no such column
    "pymodule": "import os\nprint(undefined)\n",  # pyflakes: unused import, undefined name
    "bst": (5, (7, None, None), None),
}


@pytest.fixture(scope="module", params=BENCHMARKS)
def bench(request: pytest.FixtureRequest) -> Any:
    return load(request.param)


def test_real_program_decides(bench: Any) -> None:
    assert bench.check(VALID[bench.name]) is True
    assert bench.check(INVALID[bench.name]) is False
    ok, branches = bench.measure(VALID[bench.name])
    assert ok and branches
    assert bench.measure(INVALID[bench.name])[0] is False


def test_random_generation_is_mostly_invalid_and_replays(bench: Any) -> None:
    guide = RandomGuide(seed=0)
    g = Gen(guide)
    valid = 0
    for _ in range(300):
        g.reset()
        value = bench.generator(g)
        assert rlcheck.replay(bench.generator, g.choices) == value
        valid += bench.check(value)
    assert valid < 0.35 * 300


def test_same_generator_as_a_hypothesis_strategy(bench: Any) -> None:
    kinds = set()

    @settings(
        max_examples=15, database=None, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(strategy(bench.generator))
    def test(value: Any) -> None:
        kinds.add(type(value))
        bench.check(value)

    test()
    assert kinds == {type(VALID[bench.name])}


def test_unknown_benchmark() -> None:
    with pytest.raises(ValueError, match="not one of"):
        load("cobol")


def _compare() -> ModuleType:
    return load_benchmark("compare.py")


def test_compare_tiny_run(tmp_path: Path) -> None:
    compare = _compare()
    prefix = tmp_path / "cmp"
    guides = [g for g in compare.GUIDES if g != "hypofuzz" or compare.HAVE_HYPOFUZZ]
    guides.append("rl-novelty:bonus=0,patience=5")  # a core guide with options: its own row
    args = ["--benchmarks", "sql", "--guides", *guides, "--seconds", "0.3", "--reps", "2"]
    assert compare.main([*args, "--out", str(prefix)]) == 0
    data = json.loads(Path(f"{prefix}.json").read_text())
    assert {r["guide"] for r in data["runs"]} == set(guides)
    assert len(data["runs"]) == 2 * len(guides)
    for record in data["runs"]:
        for metric in compare.METRICS:
            points = record["series"][metric]
            assert len(points) == compare.GRID + 1 and points == sorted(points)
        s = record["series"]
        assert s["diverse_valid"][-1] <= s["unique_valid"][-1]
    assert data["summary"]["sql"]["rl"]["unique_valid"]["median"] > 0
    assert Path(f"{prefix}_sql.png").stat().st_size > 0
    assert "| sql | greybox |" in Path(f"{prefix}.md").read_text()
    Path(f"{prefix}_sql.png").unlink()
    assert compare.main(["--out", str(prefix), "--plot-only"]) == 0
    assert Path(f"{prefix}_sql.png").stat().st_size > 0


def test_guide_options_are_checked() -> None:
    compare = _compare()
    assert compare.guide_spec("rl-novelty:bonus=0.5,patience=None") == (
        "rl-novelty:bonus=0.5,patience=None"
    )
    for bad in ("nope", "rl-hypothesis:bonus=1", "rl-novelty:bonus", "rl-novelty:bonus=x"):
        with pytest.raises(argparse.ArgumentTypeError):
            compare.guide_spec(bad)


def test_recorder_runs_the_same_lines_for_a_repeat() -> None:
    # HypoFuzz keeps an input only when re-running it covers the same branches, and it
    # traces the whole test, the recorder included.
    compare = _compare()
    recorded, begin, calls, found = compare._recorder(lambda v: v > 0)
    cov = BranchCoverage([compare.__file__])
    begin()
    first = cov.run(recorded, 5)
    again = cov.run(recorded, 5)
    assert first == again and first[0] is True
    assert recorded(-1) is False and recorded(7) is True
    assert [value for _, value in found()] == [5, 7] and calls[0] == 4
