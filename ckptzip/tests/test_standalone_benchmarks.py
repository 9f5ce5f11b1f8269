"""The benchmarks of files standing alone: what they measure is what they say."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import standalone_draws
import standalone_errors

from ckptzip import CompressionConfig


def test_errors_measure_each_part_of_one_file() -> None:
    rows = standalone_errors.measure(
        "mlp",
        0,
        3,
        {"none": CompressionConfig(standalone=None), "default": CompressionConfig()},
    )
    none, default = rows
    assert none["config"] == "none" and default["config"] == "default"
    # 32 stochastic levels halve the weights' error of 16; the second moment's 4 levels
    # cost fewer bytes than 16 and make the step larger on average
    assert default["w"] < 0.7 * none["w"]
    assert default["bytes"]["exp_avg_sq"] < none["bytes"]["exp_avg_sq"]
    assert default["step_size"] > none["step_size"] > 0.99
    assert 0 < default["u"] < 1 and 0 < none["u"] < 1


def test_draws_summarize_per_model_and_method() -> None:
    def run(seed: int, loss: float, method: str) -> dict[str, object]:
        restores = [{"loss": loss}]
        saves = [{"bytes_in": 100, "bytes_out": 10}]
        return {"model": "m", "seed": seed, "method": method, "final_loss": loss,
                "restores": restores, "saves": saves}  # fmt: skip

    exact = {"final_loss": 2.0, "restores": [{"loss": 2.0}]}
    rows = [
        standalone_draws.row(run(0, 2.06, "a"), exact, 0),
        standalone_draws.row(run(0, 1.98, "a"), exact, 1),
        standalone_draws.row(run(0, 2.0, "b"), exact, 0),
    ]
    a, b = standalone_draws.summarize(rows)
    assert (a["method"], a["runs"], a["above_1pct"], a["above_2pct"]) == ("a", 2, 1, 1)
    assert abs(a["max"] - 0.03) < 1e-12 and abs(a["mean"] - 0.01) < 1e-12
    assert a["ratio"] == 10.0 and (b["runs"], b["max"]) == (1, 0.0)
