"""benchmarks/save_kernels.py: it records a save's passes without changing the save, and its
replays compute what the save computed."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import torch

import ckptzip

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import save_kernels


def _current(names: tuple[str, ...]) -> dict[str, object]:
    """What a save would call under each name now (a kernel, or a stage)."""
    return {name: getattr(save_kernels.owner(name), name) for name in names}


def _state() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(300, 400, generator=g) * 0.02,  # past ans-wide's 2^16 indices
        "b": torch.randn(10, generator=g),
    }


def test_recording_a_save_writes_the_same_file_and_restores_the_kernels(tmp_path: Path) -> None:
    originals = _current(save_kernels.PASSES)
    state = _state()
    calls = save_kernels.record(lambda: ckptzip.save(state, tmp_path / "recorded.ckz", threads=1))
    assert _current(save_kernels.PASSES) == originals
    ckptzip.save(_state(), tmp_path / "plain.ckz", threads=1)
    plain = hashlib.sha256((tmp_path / "plain.ckz").read_bytes()).hexdigest()
    assert hashlib.sha256((tmp_path / "recorded.ckz").read_bytes()).hexdigest() == plain
    # the quantized tensor met the sketch pass, the assignment, the index coding stage and
    # the encoder, once each
    for name in ("key_scan", "assign_fused", "encode_indices", "ans_wide_encode"):
        assert len(calls[name]) == 1, name
        assert calls[name][0][3] == 120_000


def test_replays_are_deterministic_and_timed(tmp_path: Path) -> None:
    state = _state()
    calls = save_kernels.record(lambda: ckptzip.save(state, tmp_path / "s.ckz", threads=1))
    rows = save_kernels.measure(calls, repeat=2)
    assert {r["pass"] for r in rows} >= {"key_scan", "assign_fused", "ans_wide_encode"}
    for row in rows:
        assert row["cpu s"] >= 0.0 and row["values"] > 0
        these = calls[row["pass"]]
        assert save_kernels.replay(these, digest=True)[:16] == row["sha256"]


class _Steps:
    """What record_delta needs of a training run: its state, and a step that moves it."""

    def __init__(self) -> None:
        self.weights = _state()
        self.g = torch.Generator().manual_seed(1)

    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.weights.items()}

    def step(self) -> None:
        w = self.weights["w"]
        w += 1e-3 * torch.randn(w.shape, generator=self.g)


def test_a_delta_saves_passes_are_recorded_and_replayed(tmp_path: Path) -> None:
    originals = _current(save_kernels.DELTA_PASSES)
    calls = save_kernels.record_delta(_Steps(), tmp_path)  # type: ignore[arg-type]
    assert _current(save_kernels.DELTA_PASSES) == originals
    # the weight's change against its parent (the manager's error feedback): quantized,
    # reconstructed and measured
    for name in ("key_scan", "residual_error", "gather"):
        assert calls[name], name
    assert calls["gather"][0][3] == 120_000  # gather's values are its indices
    for row in save_kernels.measure(calls, repeat=1):
        these = calls[row["pass"]]
        assert save_kernels.replay(these, digest=True)[:16] == row["sha256"]
