"""The quiet-momenta cost benchmark runs end to end and compares the two policies."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import quiet_cost


def test_both_policies_save_the_same_steps_and_restore(tmp_path: Path) -> None:
    out = tmp_path / "q.json"
    threads = torch.get_num_threads()
    try:
        args = ["--workload", "mlp", "--steps", "5", "--saves", "3", "--every", "1"]
        assert quiet_cost.main([*args, "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)
    data = json.loads(out.read_text())
    rows = {r["policy"]: r for r in data["rows"]}
    assert set(rows) == set(quiet_cost.POLICIES)
    for name, raw in data["raw"]["save_cpu"].items():
        assert len(raw) == 3 and all(t > 0 for t in raw), name
        assert len(data["raw"]["restore_cpu"][name]) == 3
        assert rows[name]["ratio_mean"] > 1
    assert rows["quiet=None (before)"]["keyframe_save_x"] == 1.0
