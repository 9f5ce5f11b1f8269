"""benchmarks/delta_layout.py writes both layouts from the same states and restores them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import delta_layout


@pytest.mark.slow
def test_chain_and_star_share_the_first_delta_and_the_star_restores_from_two_files(
    tmp_path: Path,
) -> None:
    out = tmp_path / "layout.json"
    assert (
        delta_layout.main(["--every", "1", "--deltas", "3", "--repeat", "1", "--out", str(out)])
        == 0
    )
    (run,) = json.loads(out.read_text())["runs"]
    first, *later = run["deltas"]
    # the first delta has the keyframe as its parent in both layouts: the same file
    assert first["chain MB"] == first["star MB"]
    # a star's later delta holds all the change since the keyframe: never smaller here
    assert all(r["star MB"] >= r["chain MB"] for r in later)
    assert run["all files, star over chain"] >= 1.0
    # both restores produced a time; the star's decodes two files, the chain's four
    chain_s, star_s = (
        run["restore end, chain (s, cpu s)"][0],
        run["restore end, star (s, cpu s)"][0],
    )
    assert chain_s > 0 and star_s > 0
