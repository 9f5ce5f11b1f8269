"""Tests of the public API: save/load round trips, the Report, refusals and parents."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import random
import tempfile
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
from _attack import scaled
from _checks import assert_same
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptzip
from ckptzip.api import exact_reason, read_manifest, verify
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.errors import (
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    CorruptCheckpointError,
    MissingParentError,
    UnsupportedValueError,
)
from ckptzip.structure import DTYPES

EXACT = ckptzip.CompressionConfig(exact=("*",))  # everything lossless


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


def test_exact_round_trip_of_a_real_checkpoint(tmp_path: Path) -> None:
    obj = checkpoint()
    report = ckptzip.save(obj, tmp_path / "c.ckz", config=EXACT)
    back = ckptzip.load(tmp_path / "c.ckz")
    assert_same(obj, back)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.BatchNorm1d(4))
    model.load_state_dict(back["model"])  # a plain dict loads like the OrderedDict did
    assert isinstance(obj["model"], OrderedDict)
    assert report.bytes_out == os.path.getsize(tmp_path / "c.ckz")
    assert report.sha256 == hashlib.sha256((tmp_path / "c.ckz").read_bytes()).hexdigest()
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


leaf_tensor = st.builds(
    lambda dtype, n, seed, nonfinite: _tensor(dtype, n, seed, nonfinite),
    st.sampled_from(list(DTYPES.values())),
    st.sampled_from([0, 1, 7, 300, 2000]),
    st.integers(0, 1000),
    st.booleans(),
)


def _tensor(dtype: torch.dtype, n: int, seed: int, nonfinite: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * 3
    if dtype.is_floating_point and dtype.itemsize > 1:
        x = x.to(dtype)
        if nonfinite and n > 3:
            x[0], x[1], x[2] = math.nan, math.inf, -math.inf
            x[3] = torch.finfo(dtype).tiny / 4 if dtype != torch.bfloat16 else 1e-40  # subnormal
        return x if n != 1 else x.reshape(())
    if dtype == torch.bool:
        return x > 0
    return x.to(torch.int64).to(dtype) if not dtype.is_complex else x.to(dtype)


tree = st.recursive(
    st.one_of(leaf_tensor, st.integers(), st.floats(), st.text(max_size=5), st.none()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(
            st.one_of(st.text(alphabet="xyz", min_size=1, max_size=2), st.integers(0, 3)),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=8,
)


def _paired(a: Any, b: Any, report: dict[str, Any], path: str = "") -> None:
    """Exact leaves identical; lossy tensors within their recorded error."""
    if isinstance(a, torch.Tensor):
        entry = report[path]
        if entry.codec == "exact":
            assert tensor_to_bytes(a) == tensor_to_bytes(b)
            return
        assert a.shape == b.shape and a.dtype == b.dtype
        fin = torch.isfinite(a)
        assert tensor_to_bytes(a[~fin]) == tensor_to_bytes(b[~fin])
        x, y = a[fin].double(), b[fin].double()
        err = float((x - y).norm() / x.norm()) if float(x.norm()) > 0 else 0.0
        assert err <= entry.rel_error * (1 + 1e-4) + 1e-7  # recorded in float32
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _paired(a[k], b[k], report, f"{path}/{k}" if path else str(k))
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _paired(x, y, report, f"{path}/{i}" if path else str(i))
    else:
        assert_same(a, b)


@settings(max_examples=scaled(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree, st.sampled_from([4, 16]))
def test_save_load_property(obj: Any, bins: int) -> None:
    cfg = ckptzip.CompressionConfig(quant=ckptzip.QuantConfig(bins=bins), min_numel=256)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "c.ckz")
        report = ckptzip.save(obj, p, config=cfg)
        back = ckptzip.load(p)
        quantized = ckptzip.read_quantized(p)
    by_path = {e.path: e for e in report.entries}
    assert set(quantized) == set(by_path)
    _paired(obj, back, by_path)


def test_save_load_on_an_fsspec_url() -> None:
    fsspec = pytest.importorskip("fsspec")
    root = f"memory://ckptzip-api-{os.getpid()}"
    obj = {"w": torch.randn(5000), "ids": torch.arange(4), "epoch": 1}
    try:
        r = ckptzip.save(obj, f"{root}/p.ckz")
        assert r.bytes_out == fsspec.filesystem("memory").size(
            f"{root}/p.ckz".removeprefix("memory://")
        )
        back = ckptzip.load(f"{root}/p.ckz")
        assert torch.equal(back["ids"], obj["ids"]) and back["epoch"] == 1
        assert verify(f"{root}/p.ckz", decode=True).tensors[0].path == "w"
        ckptzip.save(obj, f"{root}/c.ckz", parent=f"{root}/p.ckz")
        assert read_manifest(f"{root}/c.ckz").parent["name"] == "p.ckz"  # type: ignore[index]
        assert ckptzip.load(f"{root}/c.ckz")["epoch"] == 1
        with pytest.raises(CheckpointExistsError):
            ckptzip.save(obj, f"{root}/p.ckz")
    finally:
        fs = fsspec.filesystem("memory")
        if fs.exists(root.removeprefix("memory://")):
            fs.rm(root.removeprefix("memory://"), recursive=True)


def test_public_names() -> None:
    for name in [
        "save",
        "load",
        "read_quantized",
        "Report",
        "TensorReport",
        "QuantConfig",
        "CompressionConfig",
        "CkptzipError",
        "CorruptCheckpointError",
        "verify",
        "DecodeLimitError",
        "DecodeMemoryError",
    ]:
        assert name in ckptzip.__all__ and hasattr(ckptzip, name)
    assert ckptzip.verify is verify


def _adam_with_dead_units() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A trained Linear+Adam whose first 8 output units never got a gradient (m = v = 0)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 64)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(10):
        out = model(torch.randn(32, 256))
        out[:, 8:].pow(2).mean().backward()  # units 0..7 are dead
        opt.step()
        opt.zero_grad()
    return model, opt


def _one_step_after_restore(path: Any) -> torch.Tensor:
    """The weight change of one Adam step taken right after restoring ``path``."""
    model, opt = _adam_with_dead_units()
    state = ckptzip.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    before = model.weight.detach().clone()
    model(torch.randn(32, 256))[:, 8:].pow(2).mean().backward()
    opt.step()
    return (model.weight.detach() - before).abs()


@pytest.mark.parametrize("prune", [0.0, 0.3])
def test_moment_rules_keep_a_restored_adam_step_sane(tmp_path: Path, prune: float) -> None:
    model, opt = _adam_with_dead_units()
    obj = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    cfg = ckptzip.CompressionConfig(quant=ckptzip.QuantConfig(bins=8, prune=prune), min_numel=64)
    report = ckptzip.save(obj, tmp_path / "safe.ckz", config=cfg)
    by_path = {e.path: e for e in report.entries}
    v = by_path["optimizer/state/0/exp_avg_sq"]
    assert v.config is not None and v.config.log_domain and v.config.prune == 0.0
    state = ckptzip.load(tmp_path / "safe.ckz")
    m_back = state["optimizer"]["state"][0]["exp_avg"]
    assert torch.count_nonzero(m_back[:8]) == 0  # dead units' zero moments stay exactly zero
    # Adam's step is at most about lr per element, and the dead units do not move at all.
    step = _one_step_after_restore(tmp_path / "safe.ckz")
    assert float(step.max()) < 1e-2
    assert float(step[:8].max()) == 0.0

    unsafe = dataclasses.replace(cfg, moment_rules=False)
    ckptzip.save(obj, tmp_path / "unsafe.ckz", config=unsafe)
    # Without the rules the same checkpoint restores an optimizer that moves the dead units
    # (their zero first moment came back as a nonzero level) or, with pruning (zeros in the
    # second moment under nonzero first moments), throws weights far away.
    step = _one_step_after_restore(tmp_path / "unsafe.ckz")
    if prune > 0:
        assert float(step.max()) > 1.0
    else:
        assert float(step[:8].max()) > 0.0


# -- torch's conventions: file objects, map_location, weights_only ------------------------


def _small() -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    return {"w": torch.randn(80, 64, generator=g), "ids": torch.arange(5), "epoch": 4}


def test_a_file_object_left_at_its_end_says_to_seek(tmp_path: Path) -> None:
    # the commonest slip with a buffer: save into it, load from it without seek(0); "truncated:
    # 0 bytes" sent users looking for a damaged file
    buf = io.BytesIO()
    ckptzip.save(_small(), buf)
    with pytest.raises(CorruptCheckpointError, match=r"position \d+.*seek\(0\)"):
        ckptzip.load(buf)
    with open(tmp_path / "c.ckz", "wb") as f:
        ckptzip.save(_small(), f)
    with open(tmp_path / "c.ckz", "rb") as f:
        f.seek(0, os.SEEK_END)
        with pytest.raises(CorruptCheckpointError, match=r"seek\(0\)"):
            ckptzip.verify(f)


def test_numpy_scalars_and_ordered_dicts_come_back_as_python_kin(tmp_path: Path) -> None:
    # what the README says differs from torch.load
    import numpy as np

    obj = {"f": np.float32(0.1), "i": np.int64(7), "o": OrderedDict(b=1, a=2)}
    ckptzip.save(obj, tmp_path / "c.ckz")
    back = ckptzip.load(tmp_path / "c.ckz")
    assert type(back["f"]) is float and back["f"] == float(np.float32(0.1))
    assert type(back["i"]) is int and back["i"] == 7
    assert type(back["o"]) is dict and list(back["o"].items()) == [("b", 1), ("a", 2)]


def test_save_and_load_with_file_objects(tmp_path: Path) -> None:
    obj = _small()
    buf = io.BytesIO()
    report = ckptzip.save(obj, buf)
    assert report.bytes_out == len(buf.getvalue()) and report.path == "<BytesIO>"
    assert report.sha256 == hashlib.sha256(buf.getvalue()).hexdigest()
    buf.seek(0)
    from_buf = ckptzip.load(buf)
    with open(tmp_path / "c.ckz", "wb") as f:
        ckptzip.save(obj, f)
    with open(tmp_path / "c.ckz", "rb") as f:
        from_file = ckptzip.load(f)
        assert not f.closed  # the caller's file stays the caller's
    assert_same(from_buf, ckptzip.load(tmp_path / "c.ckz"))
    assert_same(from_file, from_buf)
    # a stream positioned after other data is read from there, as torch.load does
    prefixed = io.BytesIO(b"header!" + buf.getvalue())
    prefixed.seek(7)
    assert_same(ckptzip.load(prefixed), from_buf)
    # and a stream that cannot seek (a pipe) is read whole
    r, w = os.pipe()
    with os.fdopen(w, "wb") as wf:
        wf.write(buf.getvalue())
    with os.fdopen(r, "rb", buffering=0) as rf:
        assert_same(ckptzip.load(rf), from_buf)
    assert ckptzip.verify(io.BytesIO(buf.getvalue()), decode=True).tensors
    with pytest.raises(ConfigError, match="binary file object"):
        ckptzip.load(12345)  # type: ignore[arg-type]


def test_delta_needs_a_path_not_a_file_object(tmp_path: Path) -> None:
    base = tmp_path / "a.ckz"
    ckptzip.save(_small(), base)
    with pytest.raises(ConfigError, match="file object"):
        ckptzip.save(_small(), io.BytesIO(), parent=base)
    child = tmp_path / "b.ckz"
    ckptzip.save(_small(), child, parent=base)
    with pytest.raises(MissingParentError, match="by its path"):
        ckptzip.load(io.BytesIO(child.read_bytes()))


@pytest.mark.parametrize(
    "map_location",
    [
        "cpu",
        None,
        torch.device("cpu"),
        {"cpu": "cpu"},
        {"cuda:0": "cpu"},
        lambda storage, location: storage,
        lambda storage, location: None,
        lambda storage, location: storage.cpu(),
    ],
)
def test_map_location_takes_what_torch_load_takes(tmp_path: Path, map_location: Any) -> None:
    obj = _small()
    ckptzip.save(obj, tmp_path / "c.ckz", config=ckptzip.CompressionConfig(exact=("*",)))
    torch.save(obj, tmp_path / "c.pt")
    ours = ckptzip.load(tmp_path / "c.ckz", map_location=map_location, weights_only=True)
    theirs = torch.load(tmp_path / "c.pt", map_location=map_location, weights_only=True)
    assert_same(ours, theirs)


def test_map_location_callable_sees_each_storage_and_its_location(tmp_path: Path) -> None:
    w = torch.randn(6, 4)
    ckptzip.save({"w": w, "tied": w, "row": w[1]}, tmp_path / "c.ckz")
    seen: list[tuple[int, str]] = []

    def fn(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage:
        seen.append((storage.nbytes(), location))
        return storage

    out = ckptzip.load(tmp_path / "c.ckz", map_location=fn)
    assert seen == [(w.numel() * 4, "cpu")]  # one storage, as torch.load calls it
    assert out["row"].data_ptr() == out["w"][1].data_ptr()
    with pytest.raises(ConfigError, match="map_location returned int"):
        ckptzip.load(tmp_path / "c.ckz", map_location=lambda s, loc: 3)
    with pytest.raises(ConfigError, match="map_location"):
        ckptzip.load(tmp_path / "c.ckz", map_location={"cpu": "warp-drive"})


def test_weights_only_is_accepted_either_way(tmp_path: Path) -> None:
    ckptzip.save({"a": torch.ones(2)}, tmp_path / "c.ckz")
    for flag in (True, False, None):
        assert ckptzip.load(tmp_path / "c.ckz", weights_only=flag)["a"].tolist() == [1, 1]


def test_tied_weights_and_views_are_stored_once_and_stay_consistent(tmp_path: Path) -> None:
    torch.manual_seed(0)
    w = torch.randn(256, 64)
    obj = {"wte": w, "lm_head": w, "first_rows": w[:8], "t": w.t()}
    report = ckptzip.save(obj, tmp_path / "c.ckz", config=ckptzip.CompressionConfig(min_numel=1))
    assert [e.path for e in report.entries] == ["wte"]
    assert report.entries[0].codec == "quant"  # one lossy decision for every name
    out = ckptzip.load(tmp_path / "c.ckz")
    assert out["wte"].data_ptr() == out["lm_head"].data_ptr()
    # each view is the same values as its (dequantized) base, not a second quantization
    assert torch.equal(out["first_rows"], out["wte"][:8])
    assert torch.equal(out["t"], out["wte"].t())
    separate = ckptzip.save(
        {k: v.clone() for k, v in obj.items()}, tmp_path / "d.ckz", overwrite=True
    )
    assert report.bytes_out < separate.bytes_out / 2


def test_tensors_packed_in_one_buffer_are_each_judged_by_their_own_elements(
    tmp_path: Path,
) -> None:
    # Views of one storage are one entry with one treatment. It was decided on the whole
    # span with the first name's config: a LayerNorm's 128-element gain and bias packed in a
    # flat parameter buffer were quantized with the weights' levels (0.85 relative error),
    # and Adam's exp_avg_sq stacked under exp_avg got the first moment's linear levels (39).
    torch.manual_seed(0)
    flat = torch.randn(8448 + 512) * 0.1
    flat[8192:8320] = 1.0 + 0.01 * torch.randn(128)
    params = {"w": flat[:8192].view(128, 64), "g": flat[8192:8320], "b": flat[8320:8448],
              "head": flat[8448:].view(4, 128)}  # fmt: skip
    report = ckptzip.save(params, tmp_path / "flat.ckz")
    assert [e.codec for e in report.entries] == ["exact"]
    out = ckptzip.load(tmp_path / "flat.ckz")
    assert all(torch.equal(out[k], v) for k, v in params.items())
    n = 20_000
    moments = torch.empty(2, n)
    moments[0], moments[1] = torch.randn(n) * 1e-3, torch.rand(n) * 1e-6 + 1e-10
    state = {"state": {0: {"exp_avg": moments[0], "exp_avg_sq": moments[1]}}}
    report = ckptzip.save({"optimizer": state}, tmp_path / "moments.ckz")
    assert [e.codec for e in report.entries] == ["exact"]
    # a weight's slices and transpose still follow the weight: quantized with it
    w = torch.randn(256, 64)
    report = ckptzip.save({"wte": w, "row": w[3], "t": w.t()}, tmp_path / "w.ckz")
    assert [e.codec for e in report.entries] == ["quant"]


def test_numpy_rng_state_is_saved_exactly(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    np.random.seed(3)
    # what Hugging Face's Trainer writes to rng_state.pth, plus a Generator's state
    state = {
        "python": random.Random(4).getstate(),
        "numpy": np.random.get_state(),
        "generator": np.random.default_rng(9).bit_generator.state,
        "torch": torch.get_rng_state(),
        "big_float_array": np.linspace(0, 1, 10_000),  # exact, though large and floating
    }
    report = ckptzip.save(state, tmp_path / "rng_state.ckz")
    assert {e.codec for e in report.entries} == {"exact"}
    back = ckptzip.load(tmp_path / "rng_state.ckz")
    np.random.set_state(back["numpy"])
    expected = np.random.RandomState(3).random_sample(3)
    assert np.array_equal(np.random.random_sample(3), expected)
    assert np.array_equal(back["big_float_array"], state["big_float_array"])
    r = random.Random()
    r.setstate(back["python"])
    assert r.random() == random.Random(4).random()
    assert torch.equal(back["torch"], state["torch"])
    assert back["generator"] == {
        **state["generator"],
        "state": dict(state["generator"]["state"]),
    }


def test_verify_says_what_a_safetensors_file_is(tmp_path: Path) -> None:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    p = tmp_path / "model.safetensors"
    safetensors_torch.save_file({"w": torch.ones(2)}, str(p))
    with pytest.raises(CorruptCheckpointError, match="safetensors file"):
        ckptzip.verify(p)
    renamed = tmp_path / "weights.bin"
    renamed.write_bytes(p.read_bytes())  # recognised by content too
    with pytest.raises(CorruptCheckpointError, match="safetensors file"):
        ckptzip.verify(renamed)


def _odd_tensors() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    c = torch.randn(5000, dtype=torch.complex64, generator=g)
    with torch.inference_mode():
        inference = torch.randn(64, generator=g)
    return {
        "conj": c.conj(),
        "conj-view-of-a-view": torch.randn(64, 64, dtype=torch.complex128, generator=g).conj()[::2],
        "neg-view": torch.randn(10, dtype=torch.complex64, generator=g).conj().imag,
        "resolved-neg": torch._neg_view(torch.randn(6000, generator=g)),
        "complex": c,
        "view-as-real": torch.view_as_real(c),
        "transposed": torch.randn(100, 100, generator=g).t(),
        "zero-stride": torch.randn(1, 100, generator=g).expand(5000, 100),
        "scalar-expanded": torch.tensor(3.0).expand(10),
        "parameter": torch.nn.Parameter(torch.randn(10, generator=g)),
        "grad-view": torch.randn(6000, requires_grad=True, generator=g)[2:],
        "inference-mode": inference,
    }


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("name", list(_odd_tensors()))
def test_odd_tensors_are_saved_as_the_values_they_show(name: str, exact: bool) -> None:
    x = _odd_tensors()[name]
    config = EXACT if exact else ckptzip.CompressionConfig(min_numel=64)
    buf = io.BytesIO()
    ckptzip.save({name: x, "base": x._base if x._base is not None else 1}, buf, config=config)
    back = ckptzip.load(io.BytesIO(buf.getvalue()))[name]
    want = x.detach().resolve_conj().resolve_neg()
    assert back.shape == want.shape and back.dtype == want.dtype
    assert not back.is_conj() and not back.is_neg()
    if exact or want.is_complex():
        assert torch.equal(back, want)
    else:
        assert float((back - want).norm()) <= 0.2 * float(want.norm())


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: torch.randn(4, 4).to_sparse(), "layout torch.sparse_coo"),
        (lambda: torch.randn(4, 4).to_sparse_csr(), "layout torch.sparse_csr"),
        (lambda: torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.quint8), "quantized"),
        (lambda: torch.empty(4, device="meta"), "meta tensor"),
        (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested tensor"),
    ],
)
def test_tensors_that_cannot_be_stored_are_refused_typed_by_key(make: Any, match: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sparse CSR and nested tensors warn they are beta
        x = make()
    out = io.BytesIO()
    with pytest.raises(ckptzip.UnsupportedValueError, match=f"'model/odd'.*{match}|{match}"):
        ckptzip.save({"model": {"odd": x}}, out)
    with pytest.raises(ckptzip.UnsupportedValueError, match="'model/odd'"):
        ckptzip.save({"model": {"odd": x}}, out)
    assert out.getvalue() == b""
