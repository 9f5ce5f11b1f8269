"""The held-out restores benchmark runs end to end and compares what it claims to compare."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import heldout_restores as hr


def test_the_quick_mode_writes_both_methods_runs_and_their_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hr, "CHECKPOINTS", 10)  # with --steps 20: a quarter of --quick's work
    out = tmp_path / "heldout.json"
    threads = torch.get_num_threads()
    try:
        assert hr.main(["--quick", "--models", "conv1d", "--steps", "20", "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)  # main runs on one thread; the session goes on
    data = json.loads(out.read_text())
    runs = {r["method"]: r for r in data["runs"]}
    assert sorted(runs) == ["ckptzip", "exact"] and len(data["runs"]) == 2
    assert data["meta"]["plans"]["conv1d"] == {"steps": 20, "every": 2, "failures": 2}
    assert data["machine"]["torch"] == torch.__version__ and data["meta"]["versions"]["ckptzip"]

    exact, zipped = runs["exact"], runs["ckptzip"]
    assert len(exact["saves"]) == 10 and len(exact["restores"]) == 2
    # an exact restore gives back the held-out loss measured when its checkpoint was saved
    assert hr.restores_reproduce(exact)
    saved = {s["step"]: s["eval"] for s in exact["saves"]}
    assert all(x["loss"] == saved[x["to"]] for x in exact["restores"])
    assert [x["to"] for x in zipped["restores"]] == [x["to"] for x in exact["restores"]]
    assert all(s["ratio"] > 1 for s in zipped["saves"])
    assert zipped["ratio_reported"] > 1 and zipped["ratio_files"] > 1

    summary = data["summary"]["conv1d"]
    assert summary["floor"] == 0.0  # one seed: no spread
    (row,) = summary["seeds"]
    assert row["exact_restores_reproduce"] is True
    assert row["ratio_reported"] > 1 and row["ratio_files"] > 1
    assert row["rel_diff"] == pytest.approx(zipped["final_loss"] / exact["final_loss"] - 1)
    assert len(row["jumps"]) == len(row["own_gaps"]) == 2
    assert row["max_jump"] == max(row["jumps"])
    printed = capsys.readouterr().out
    assert "== conv1d: exact finals" in printed and "floor (max-min)/median 0.00 %" in printed


def _run(seed: int, method: str, final: float, restored: list[float]) -> dict[str, Any]:
    saves = [{"step": 2 * (i + 1), "eval": 1.0, "ratio": 4.0} for i in range(len(restored))]
    restores = [
        {"to": 2 * (i + 1), "loss": loss, "own_gap": 0.01 * i} for i, loss in enumerate(restored)
    ]
    return {
        "kind": "m", "seed": seed, "method": method, "final_loss": final, "final_acc": None,
        "seconds": 1.0, "ratio_reported": 4.0, "ratio_files": 4.0, "saves": saves,
        "restores": restores, "warnings": [],
    }  # fmt: skip


def test_the_summary_measures_against_the_exact_runs_spread_over_seeds() -> None:
    runs = [
        _run(0, "exact", 1.0, [1.0, 1.0]),
        _run(1, "exact", 1.1, [1.0, 1.0]),
        _run(2, "exact", 1.2, [1.0, 2.0]),  # its second restore did not give back the saved loss
        _run(0, "ckptzip", 1.05, [1.01, 1.03]),
        _run(1, "ckptzip", 1.5, [1.0, 0.9]),
    ]
    summary = hr.summarize(runs)["m"]
    assert summary["floor"] == pytest.approx(0.2 / 1.1)
    rows = {r["seed"]: r for r in summary["seeds"]}
    assert rows[0]["within_floor"] and not rows[1]["within_floor"]
    assert rows[0]["jumps"] == pytest.approx([0.01, 0.03])
    assert (rows[0]["max_jump"], rows[0]["max_jump_to"]) == (pytest.approx(0.03), 4)
    assert rows[1]["median_jump"] == pytest.approx(-0.05)
    assert rows[1]["max_own_gap"] == pytest.approx(0.01)
    assert [rows[s]["exact_restores_reproduce"] for s in (0, 1, 2)] == [True, True, False]
    assert "ckptzip_final" not in rows[2]  # no ckptzip run of seed 2: no comparison
    runs[3]["restores"][1]["to"] = 6
    with pytest.raises(RuntimeError, match="restored other steps"):
        hr.summarize(runs)
