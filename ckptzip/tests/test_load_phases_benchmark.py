"""benchmarks/load_phases.py: a keyframe's load timed by phase leaves the library as it was,
every phase and kind of load is reported, and a fresh process's first load is timed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import ckptzip
from ckptzip import api

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import load_phases


def _files(tmp_path: Path) -> tuple[Path, Path]:
    g = torch.Generator().manual_seed(0)
    state = {"w": torch.randn(300, 400, generator=g) * 0.02, "b": torch.ones(10)}
    ckptzip.save(state, tmp_path / "k.ckz")
    torch.save(state, tmp_path / "k.pt")
    return tmp_path / "k.ckz", tmp_path / "k.pt"


def test_phases_and_loads_are_timed_and_the_library_restored(tmp_path: Path) -> None:
    ckz, pt = _files(tmp_path)
    before = [getattr(owner, fn) for _, owner, fn in load_phases.PHASES] + [api._threads]
    best, phases = load_phases.loads(ckz, pt, 2)
    assert [getattr(owner, fn) for _, owner, fn in load_phases.PHASES] + [api._threads] == before
    assert set(best) == {
        "torch.load",
        "ckptzip.load, 1 thread",
        "ckptzip.load, default threads",
        "ckptzip.load, in the caller's thread",
    }
    assert all(v > 0 for v in best.values())
    assert set(phases) == {"open", "chunks", "decode", "build", "rest"}
    assert all(phases[k] > 0 for k in ("open", "chunks", "decode", "build"))
    hashing = load_phases.digests(ckz, 2)
    assert set(hashing) == {"sha256 (versions 1-4)", "CRC-32 (version 5)"}
    # a load in the caller's thread gives the same state as the library's own
    state = load_phases.in_caller(lambda: ckptzip.load(ckz))
    assert torch.equal(state["b"], torch.ones(10)) and api._threads is before[-1]


@pytest.mark.slow
def test_a_fresh_process_first_load_is_timed_with_its_imports(tmp_path: Path) -> None:
    ckz, pt = _files(tmp_path)
    fresh = load_phases.first_loads(ckz, pt, 1)
    assert set(fresh) == {
        "torch.load",
        "ckptzip.load",
        "ckptzip.load, 1 thread",
        "ckptzip's modules imported",
    }
    for kind, row in fresh.items():
        assert 0 < row["least"] <= row["median"]
        if kind != "ckptzip's modules imported":
            assert row["loads with a full collection"] == len(row["its ms"]) <= 1
