"""The error-feedback prototype measures what it says: residuals against the reconstruction."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import error_feedback


def test_feedback_corrects_the_parents_error_where_independent_quantization_cannot(
    tmp_path: Path,
) -> None:
    out = tmp_path / "ef.json"
    argv = ["--model", "mlp", "--steps", "8", "--every", "2", "--keyframe-every", "4"]
    assert error_feedback.main([*argv, "--residual", "16p0", "--out", str(out)]) == 0
    schemes = json.loads(out.read_text())["schemes"]
    independent, feedback = schemes["independent 16p0"], schemes["feedback 16p0"]
    assert len(independent["key_error"]) == 1 and len(independent["error"]) == 3
    assert len(feedback["error"]) == 3  # the same non-keyframe checkpoints
    # 16 levels over a residual much smaller than the weights: a far smaller error
    assert max(feedback["error"]) < 0.5 * min(independent["error"])
    assert all(b > 0 for b in feedback["bits"] + independent["bits"])
