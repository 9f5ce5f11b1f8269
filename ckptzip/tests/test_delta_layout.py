"""benchmarks/delta_layout.py writes each layout from the same states and restores them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import delta_layout


def test_the_layouts_parents_and_depths() -> None:
    parents = {name: [f(n) for n in range(1, 10)] for name, f in delta_layout.LAYOUTS.items()}
    assert parents["chain"] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert parents["skip"] == [0, 0, 2, 0, 4, 4, 6, 0, 8]
    assert parents["stride3"] == [0, 1, 0, 3, 4, 3, 6, 7, 6]
    assert parents["star"] == [0] * 9
    assert [delta_layout.depth(n, 9) for n in ("chain", "skip", "stride3", "star")] == [9, 2, 3, 1]


@pytest.mark.slow
def test_layouts_share_the_first_delta_and_shallower_layouts_restore_from_fewer_files(
    tmp_path: Path,
) -> None:
    out = tmp_path / "layout.json"
    argv = ["--every", "1", "--deltas", "3", "--repeat", "1", "--out", str(out)]
    assert delta_layout.main([*argv, "--layouts", "chain", "skip", "star"]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    first, *later = run["deltas"]
    # the first delta has the keyframe as its parent in every layout: the same file
    assert first["chain MB"] == first["skip MB"] == first["star MB"]
    # a star's later delta holds all the change since the keyframe: never smaller here
    assert all(r["star MB"] >= r["chain MB"] for r in later)
    rows = {r["layout"]: r for r in run["layouts"]}
    assert rows["chain"]["all files / chain"] == 1.0
    assert rows["star"]["all files / chain"] >= rows["skip"]["all files / chain"] >= 1.0
    assert [rows[n]["depth of the last"] for n in ("chain", "skip", "star")] == [3, 2, 1]
    assert all(r["restore last s"] > 0 and r["restore any cpu s"] > 0 for r in rows.values())


@pytest.mark.slow
def test_manager_runs_count_every_file(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    argv = ["--runs", "chain:4", "skip:4", "--states", "6", "--every", "1", "--out", str(out)]
    assert delta_layout.main(argv) == 0
    (run,) = json.loads(out.read_text())["runs"]
    rows = {r["variant"]: r for r in run["variants"]}
    # 0 <- 1 <- 2 <- 3, 4 <- 5 against 0 <- 1, 0 <- 2 <- 3, 4 <- 5
    assert rows["chain:4"]["files in the longest chain"] == 4
    assert rows["skip:4"]["files in the longest chain"] == 3
    assert rows["chain:4"]["mean files per restore"] == pytest.approx(13 / 6)
    assert rows["skip:4"]["mean files per restore"] == pytest.approx(11 / 6)
    assert all(len(r["restore s"]) == 6 and r["MB per file"] > 0 for r in rows.values())
