"""benchmarks/restore_kernels.py --phases: a restore timed in its phases restores the same
state, leaves the library's functions as they were, and reports every phase."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import torch

import ckptzip

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import restore_kernels


def test_phases_time_each_restore_and_restore_the_library(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 400, generator=g) * 0.02
    mgr = ckptzip.CheckpointManager(tmp_path, keyframe_every=10)
    for step in range(3):
        w += 1e-3 * torch.randn(w.shape, generator=g)
        mgr.save(step, {"w": w.clone(), "b": torch.ones(10)})
    mgr.close()
    before = [getattr(owner, fn) for _, owner, fn in restore_kernels.PHASES]
    callbacks = list(gc.callbacks)
    rows = restore_kernels.phases(tmp_path, 2)
    assert [getattr(owner, fn) for _, owner, fn in restore_kernels.PHASES] == before
    by = {r["phase"]: r for r in rows}
    collections = {p for p in by if p.startswith("garbage collections")}
    assert set(by) - collections == {"chain", "parents", "last link", "state", "whole restore"}
    assert len(collections) == 3  # one row per generation: how many, and their ms a restore
    assert gc.callbacks == callbacks  # its counter is gone again
    for phase, row in by.items():
        if phase in collections:
            assert row["calls"] >= 0 and 0 <= row["least ms"] <= row["median ms"]
        else:
            assert row["calls"] == 2 and 0 < row["least ms"] <= row["median ms"]
    assert by["parents"]["least ms"] < by["whole restore"]["median ms"]
    restored = ckptzip.CheckpointManager(tmp_path).load(2)
    assert torch.equal(restored["b"], torch.ones(10))


def test_stages_time_the_python_side_and_restore_the_library(tmp_path: Path) -> None:
    """--stages: every stage a chain restore runs is timed where it is called from (the
    functions other modules imported by name included), then put back everywhere."""
    import ckptzip.codecs.delta as delta_codec
    from ckptzip.codecs import quantized

    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 400, generator=g) * 0.02
    mgr = ckptzip.CheckpointManager(tmp_path, keyframe_every=10, error_feedback=False)
    for step in range(3):
        w += 1e-3 * torch.randn(w.shape, generator=g)
        mgr.save(step, {"w": w.clone(), "b": torch.ones(10)})
    mgr.close()
    side, delta_side = quantized.decode_side, delta_codec.decode_side
    rows = restore_kernels.stages(tmp_path, 2)
    assert quantized.decode_side is side and delta_codec.decode_side is delta_side
    by = {r["stage"]: r for r in rows}
    assert set(by) == {qual for _, qual, _ in restore_kernels.STAGES}
    # three links of one delta-coded weight: the keyframe's quantized entry, then two deltas
    # (their side parts decoded through the name the delta codec imported)
    assert by["decode_delta"]["calls"] == 2
    assert by["decode_side"]["calls"] == 3
    assert by["Reader.__init__"]["calls"] >= 3
    for row in rows:
        assert 0 <= row["least ms"] <= row["median ms"]
    assert by["_decode_entry"]["median ms"] > 0
