"""Tests of the public API: save/load round trips, the Report, refusals and parents."""

from __future__ import annotations

import io
import json
import math
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch

import ckptzip
from ckptzip.api import exact_reason, read_manifest
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    MissingParentError,
    UnsupportedValueError,
)

EXACT = ckptzip.CompressionConfig(min_numel=1 << 40)  # everything lossless


def checkpoint() -> dict[str, Any]:
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 8)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 3,
        "rng": torch.get_rng_state(),
        "history": [0.5, math.nan, math.inf],
        "note": None,
    }


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert tensor_to_bytes(a) == tensor_to_bytes(b)  # bit-exact, NaN payloads too
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b)
    else:
        assert type(a) is type(b) and a == b


def test_exact_round_trip_of_a_real_checkpoint(tmp_path: Path) -> None:
    obj = checkpoint()
    report = ckptzip.save(obj, tmp_path / "c.ckz", config=EXACT)
    back = ckptzip.load(tmp_path / "c.ckz")
    assert_same(obj, back)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    model.load_state_dict(back["model"])  # a plain dict loads like the OrderedDict did
    assert isinstance(obj["model"], OrderedDict)
    assert report.bytes_out == os.path.getsize(tmp_path / "c.ckz")
    assert all(e.codec == "exact" and e.rel_error == 0.0 for e in report.entries)


def test_report_bytes_in_is_the_torch_save_size(tmp_path: Path) -> None:
    obj = checkpoint()
    buf = io.BytesIO()
    torch.save(obj, buf)
    report = ckptzip.save(obj, tmp_path / "c.ckz", config=EXACT)
    assert report.bytes_in == len(buf.getvalue())
    assert report.ratio == pytest.approx(report.bytes_in / report.bytes_out)
    assert report.tensor_nbytes == sum(e.nbytes for e in report.entries)
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["entries"][0]["path"] == "model/0.weight"
    assert [e.path for e in report.entries][-1] == "rng"


def test_exact_rules() -> None:
    cfg = ckptzip.CompressionConfig(exact=("model/keep*",), min_numel=10)
    big = torch.zeros(100)
    assert exact_reason("model/w", big, cfg) is None
    assert exact_reason("model/keep.w", big, cfg) == "matched config.exact"
    assert exact_reason("model/w", torch.zeros(5), cfg) is not None
    assert exact_reason("model/w", torch.zeros(100, dtype=torch.int64), cfg) == "dtype int64"
    assert exact_reason("optimizer/state/0/step", torch.zeros(100), cfg) == "optimizer step counter"
    assert exact_reason("x", torch.tensor(1.0), cfg) == "0-d tensor"


def test_no_overwrite_and_metadata(tmp_path: Path) -> None:
    p = tmp_path / "c.ckz"
    ckptzip.save({"a": 1}, p, metadata={"step": "10"})
    with pytest.raises(CheckpointExistsError):
        ckptzip.save({"a": 2}, p)
    assert ckptzip.load(p) == {"a": 1}
    ckptzip.save({"a": 2}, p, overwrite=True)
    assert ckptzip.load(p) == {"a": 2}
    assert read_manifest(p).metadata == {}
    with pytest.raises(ConfigError, match="metadata"):
        ckptzip.save({}, tmp_path / "d.ckz", metadata={"step": 3})  # type: ignore[dict-item]


def test_unsupported_value_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedValueError, match="'model/fn'"):
        ckptzip.save({"model": {"fn": print}}, tmp_path / "c.ckz")
    assert os.listdir(tmp_path) == []


def test_missing_file_and_bad_device(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError):
        ckptzip.load(tmp_path / "nope.ckz")
    ckptzip.save({"a": torch.ones(2)}, tmp_path / "c.ckz")
    with pytest.raises(ConfigError, match="map_location"):
        ckptzip.load(tmp_path / "c.ckz", map_location="warp-drive")
    out = ckptzip.load(tmp_path / "c.ckz", map_location=torch.device("cpu"))
    assert out["a"].device.type == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_map_location_cuda(tmp_path: Path) -> None:
    ckptzip.save({"a": torch.arange(5.0)}, tmp_path / "c.ckz")
    out = ckptzip.load(tmp_path / "c.ckz", map_location="cuda")
    assert out["a"].is_cuda and out["a"].cpu().tolist() == [0, 1, 2, 3, 4]


def test_parent_is_recorded_and_checked(tmp_path: Path) -> None:
    ckptzip.save({"w": torch.ones(3)}, tmp_path / "p.ckz")
    ckptzip.save({"w": torch.ones(3)}, tmp_path / "c.ckz", parent=tmp_path / "p.ckz")
    ref = read_manifest(tmp_path / "c.ckz").parent
    assert ref is not None and ref["name"] == "p.ckz" and len(ref["hash"]) == 64
    assert ckptzip.load(tmp_path / "c.ckz")["w"].tolist() == [1, 1, 1]
    # the parent altered: a clear error naming it, never a wrong tensor
    (tmp_path / "p.ckz").unlink()
    ckptzip.save({"w": torch.zeros(3)}, tmp_path / "p.ckz")
    with pytest.raises(MissingParentError, match="altered"):
        ckptzip.load(tmp_path / "c.ckz")
    (tmp_path / "p.ckz").unlink()
    with pytest.raises(MissingParentError, match="missing"):
        ckptzip.load(tmp_path / "c.ckz")
    with pytest.raises(MissingParentError):
        ckptzip.save({}, tmp_path / "d.ckz", parent=tmp_path / "p.ckz")


def test_progress_callback(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    ckptzip.save(
        {"a": torch.ones(4), "b": torch.ones(2)},
        tmp_path / "c.ckz",
        progress=lambda d, t: seen.append((d, t)),
    )
    assert seen == [(16, 24), (24, 24)]
