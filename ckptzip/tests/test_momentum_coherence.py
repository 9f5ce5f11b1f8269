"""benchmarks/momentum_coherence.py reports the library's statistic, per checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import momentum_coherence as mc


def test_one_row_per_checkpoint_with_the_quiet_share(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    args = ["--models", "mlp", "--seeds", "0", "--steps", "6", "--every", "3", "--out", str(out)]
    assert mc.main(args) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["step"] for r in rows] == [3, 6]
    for r in rows:
        assert 0 < r["min"] <= r["median"] <= r["max"]
        assert 0.0 <= r["quiet_share"] <= 1.0
