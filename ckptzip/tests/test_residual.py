"""Error feedback along a delta chain: the ``"residual"`` codec, its parent views, the switch."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import ckptzip
from ckptzip import CheckpointManager, CompressionConfig, QuantConfig
from ckptzip.api import _FileParent, read_manifest, read_quantized
from ckptzip.codecs import DecodeContext, EncodeContext, get_codec
from ckptzip.codecs.quantized import decode_quantized
from ckptzip.codecs.residual import reconstruct
from ckptzip.codecs.testing import check_round_trip
from ckptzip.errors import CorruptCheckpointError, MissingParentError
from ckptzip.plan import RESIDUAL, Planner
from ckptzip.quantize import dequantize, quantize
from ckptzip.storage import sha256_file
from ckptzip.structure import flatten

KEY = QuantConfig(bins=16, protect=0.005)  # a keyframe's config
CONFIG = CompressionConfig(quant=KEY, min_numel=1000, residual=RESIDUAL)
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _parent(table: dict[str, Any]) -> _FileParent:
    return _FileParent("ab" * 32, table)


def _drifting(n: int, steps: int, seed: int = 0) -> list[torch.Tensor]:
    """A weight-like tensor after each of ``steps`` small moves (a random walk with drift)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 0.05
    out = [x]
    drift = torch.randn(n, generator=g) * 0.002
    for _ in range(steps):
        x = x + drift + 0.002 * torch.randn(n, generator=g)
        out.append(x)
    return out


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    a, b = x.double(), y.double()
    finite = a.isfinite()
    return float((a[finite] - b[finite]).norm() / a[finite].norm())


# -- the codec ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["quantized", "reconstruction"])
def test_round_trip_passes_the_conformance_check(dtype: torch.dtype, kind: str) -> None:
    p, x = _drifting(8000, 1)
    p, x = p.to(dtype), x.to(dtype)
    x[5], x[9], p[11] = float("nan"), float("inf"), float("-inf")  # protected: exact after
    parent_value: Any = quantize(p, KEY) if kind == "quantized" else p
    y = check_round_trip(
        "residual", x, quant=KEY, parent=_parent({"t": parent_value}), config=CONFIG
    )
    assert torch.equal(y[[5, 9, 11]].isnan(), x[[5, 9, 11]].isnan())
    assert y[9] == x[9] and y[11] == x[11]
    # the change is far smaller than the tensor: 4 levels of it beat 16 of the tensor
    assert _rel(x, y) < 0.5 * quantize(x, KEY).rel_error


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(FLOATS),
    st.integers(1, 5000),
    st.sampled_from([2, 4, 16]),
    st.floats(0.0, 0.01),
    st.integers(0, 2**16),
)
def test_round_trip_property(
    dtype: torch.dtype, n: int, bins: int, protect: float, seed: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    p = torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    x = (p.double() + 0.01 * torch.randn(n, generator=g, dtype=torch.float64)).to(dtype)
    config = CompressionConfig(residual=QuantConfig(bins=bins, protect=protect))
    parent = _parent({"t": p})
    y = check_round_trip("residual", x, quant=KEY, parent=parent, config=config)
    enc = get_codec("residual").encode(x, EncodeContext("t", config, quant=KEY, parent=parent))
    assert enc.meta["mode"] == "residual" and enc.reconstruction is not None
    assert torch.equal(enc.reconstruction, y)  # what the writer caches is what a reader gets


def test_falls_back_to_the_full_encoding_where_the_parent_has_nothing_to_offer() -> None:
    x = _drifting(6000, 1)[1]
    codec = get_codec("residual")
    for parent, why in [
        (None, "no parent"),
        (_parent({}), "parent lacks a lossy tensor here"),
        (_parent({"t": torch.zeros(5)}), "parent [5] float32"),
        (_parent({"t": x.double()}), "parent [6000] float64"),
    ]:
        enc = codec.encode(x, EncodeContext("t", CONFIG, quant=KEY, parent=parent))
        assert enc.meta["mode"] == "full" and enc.meta["why"] == why
        assert enc.config == KEY and enc.reconstruction is None
        check_round_trip("residual", x, quant=KEY, parent=parent, config=CONFIG)
    # a ParentView written before reconstruction() existed: every path is absent
    legacy = type("Legacy", (), {"content_hash": "0" * 64, "quantized": lambda s, p: None})()
    enc = codec.encode(x, EncodeContext("t", CONFIG, quant=KEY, parent=legacy))
    assert enc.meta["mode"] == "full"


def test_a_jump_the_change_cannot_follow_is_stored_in_full() -> None:
    # Between two saves a tensor is re-initialised (a new head, LoRA's merge and reset) or
    # zeroed: its change, quantized with the residual's 4 levels, came back with 0.6-0.9
    # relative error (a zeroed tensor non-zero, its error "0"), where the tensor quantized
    # alone errs by under 0.1. Such an entry is stored in full; an ordinary change is not.
    codec = get_codec("residual")
    p, x = _drifting(20_000, 1)
    g = torch.Generator().manual_seed(7)
    fresh = torch.randn(20_000, generator=g) * 0.05
    for new, kind in [(x, "residual"), (fresh, "full"), (torch.zeros(20_000), "full")]:
        enc = codec.encode(new, EncodeContext("t", CONFIG, quant=KEY, parent=_parent({"t": p})))
        assert enc.meta["mode"] == kind, enc.meta.get("why")
        got = check_round_trip("residual", new, quant=KEY, parent=_parent({"t": p}), config=CONFIG)
        if kind == "full":
            assert "its change against the parent quantized with relative error" in enc.meta["why"]
            alone = quantize(new, KEY)
            assert enc.rel_error == alone.rel_error
            assert torch.equal(got, dequantize(alone))
    assert torch.count_nonzero(got) == 0  # the zeroed tensor comes back zero


def test_records_the_reconstructions_error_and_the_residuals_config() -> None:
    p, x = _drifting(20_000, 1)
    enc = get_codec("residual").encode(
        x, EncodeContext("t", CONFIG, quant=KEY, parent=_parent({"t": p}))
    )
    assert enc.config == RESIDUAL
    assert enc.reconstruction is not None
    assert enc.rel_error == pytest.approx(_rel(x, enc.reconstruction), rel=1e-6)
    # not the residual's own error, which is far larger relative to its own (small) norm
    own = _rel(x - p, enc.reconstruction - p)
    assert own > 5 * enc.rel_error


def _encoded(x: torch.Tensor, p: torch.Tensor) -> tuple[dict[str, Any], list[bytes], Any]:
    codec = get_codec("residual")
    enc = codec.encode(x, EncodeContext("t", CONFIG, quant=KEY, parent=_parent({"t": p})))
    meta = json.loads(json.dumps(enc.meta))
    return meta, list(enc.chunks), DecodeContext.of_encoded("t", x, enc)


def test_a_missing_or_mismatched_parent_is_refused() -> None:
    p, x = _drifting(6000, 1)
    meta, chunks, ctx = _encoded(x, p)
    codec = get_codec("residual")
    with pytest.raises(MissingParentError, match="no parent was given"):
        codec.decode(meta, chunks, ctx)
    for table in ({}, {"t": torch.zeros(7)}, {"t": p.double()}):
        view = DecodeContext.of_encoded("t", x, codec.encode(x, _ctx(p)), _parent(table))
        with pytest.raises(MissingParentError, match="not this residual's parent"):
            codec.decode(meta, chunks, view)
    good = DecodeContext.of_encoded("t", x, codec.encode(x, _ctx(p)), _parent({"t": p}))
    codec.decode(meta, chunks, good)


def _ctx(p: torch.Tensor) -> EncodeContext:
    return EncodeContext("t", CONFIG, quant=KEY, parent=_parent({"t": p}))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: m.pop("mode"),
        lambda m: m.update(mode="delta"),
        lambda m: m.update(mode=3),
        lambda m: m.pop("residual"),
        lambda m: m.update(residual=[1]),
        lambda m: m["residual"].update(n_levels=99),
        lambda m: m["residual"].update(n_protected=-1),
        lambda m: m["residual"].pop("index_stage"),
        lambda m: m.update(mode="full", inner_codec="residual", inner={}),
        lambda m: m.update(mode="full", inner_codec="quant", inner={"n_levels": 4}),
    ],
)
def test_hostile_meta_is_corrupt_never_a_crash(mutate: Any) -> None:
    p, x = _drifting(6000, 1)
    meta, chunks, _ = _encoded(x, p)
    mutate(meta)
    codec = get_codec("residual")
    enc = codec.encode(x, _ctx(p))
    ctx = DecodeContext.of_encoded("t", x, enc, _parent({"t": p}))
    with pytest.raises(CorruptCheckpointError):
        codec.decode(meta, chunks, ctx)
    codec.describe(meta)  # never raises
    codec.max_numel(meta, [len(c) for c in chunks], 4)


def _bits(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1).contiguous().view(torch.uint8)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [6000, 300_000])  # under and over the lanes' 65 536 symbols
@pytest.mark.parametrize("reuse", [False, True])
def test_the_one_pass_reconstruction_gives_the_two_pass_bits(
    dtype: torch.dtype, n: int, reuse: bool
) -> None:
    p, x = (t.to(dtype) for t in _drifting(n, 1, seed=n))
    x[5], x[17], p[40] = float("nan"), float("inf"), float("-inf")  # protected, kept exactly
    codec = get_codec("residual")
    enc = codec.encode(x, EncodeContext("t", CONFIG, quant=KEY, parent=_parent({"t": p})))
    meta, chunks = json.loads(json.dumps(enc.meta)), list(enc.chunks)
    assert meta["mode"] == "residual"
    plain = DecodeContext.of_encoded("t", x, enc)
    # the two passes: the change decoded to a QuantizedTensor, then added to the parent
    want = reconstruct(p, decode_quantized(meta["residual"], chunks, plain))
    mine = p.clone()
    ctx = replace(plain, parent=_parent({"t": mine}), reuse_parent=reuse)
    got = codec.decode(meta, chunks, ctx).value()
    assert isinstance(got, torch.Tensor) and got.shape == x.shape and got.dtype == dtype
    assert torch.equal(_bits(got), _bits(want))
    overwritten = got.data_ptr() == mine.data_ptr()
    # float32 and float64 add in one pass (over the parent when the reader allows it) where
    # the indices decode straight into a tensor; float16 and bfloat16, and the single ANS
    # stream of a small tensor, take the two passes, never over the parent
    one_pass = meta["residual"]["index_layout"] in ("packed", "bytes", "ans-lanes", "ans-wide")
    assert one_pass == (n > 65_536)
    assert overwritten == (reuse and one_pass and dtype in (torch.float32, torch.float64))
    if not overwritten:
        assert torch.equal(_bits(mine), _bits(p))


def test_wrong_chunks_are_corrupt_before_the_parent_is_looked_at() -> None:
    p, x = _drifting(6000, 1)
    meta, chunks, ctx = _encoded(x, p)  # ctx has no parent: damage is reported first
    codec = get_codec("residual")
    with pytest.raises(CorruptCheckpointError, match="chunks, expected 4"):
        codec.decode(meta, chunks[:3], ctx)
    with pytest.raises(CorruptCheckpointError):
        codec.decode(meta, [chunks[0][:-8], *chunks[1:]], ctx)


def test_describe_and_max_numel() -> None:
    p, x = _drifting(6000, 1)
    meta, chunks, _ = _encoded(x, p)
    codec = get_codec("residual")
    d = codec.describe(meta)
    assert d.note == "residual against the parent's reconstruction"
    assert d.protected == meta["residual"]["n_protected"]
    full = codec.encode(x, EncodeContext("t", CONFIG, quant=KEY)).meta
    assert codec.describe(full).note == "stored in full (no parent)"
    for hostile in (None, [], {"mode": "residual", "residual": {"n_protected": True}}, {"mode": 1}):
        codec.describe(hostile)  # type: ignore[arg-type]
        assert codec.max_numel(hostile, [1, 2, 3, 4], 4) is None  # type: ignore[arg-type]
    bound = codec.max_numel(meta, [len(c) for c in chunks], 4)
    assert bound is None or bound >= x.numel()


# -- the planner, save and load -------------------------------------------------------------


def test_the_plan_uses_residuals_for_every_lossy_tensor_but_the_moments() -> None:
    leaves = [
        ("model/w", torch.randn(5000)),
        ("optimizer/state/0/exp_avg", torch.randn(5000)),
        ("optimizer/state/0/exp_avg_sq", torch.rand(5000)),
        ("model/b", torch.randn(5)),
    ]
    codecs = [t.codec for t in Planner(CONFIG, parent=True).plan(leaves)]
    assert codecs == ["residual", "delta", "delta", "exact"]
    assert [t.codec for t in Planner(CONFIG).plan(leaves)] == ["quant", "quant", "quant", "exact"]
    off = CompressionConfig(quant=KEY, min_numel=1000)
    assert Planner(off, parent=True).plan(leaves)[0].codec == "delta"
    assert Planner(CONFIG, parent=True).plan(leaves)[0].quant == KEY  # its own, for fallback


def test_config_round_trips_and_is_unchanged_when_off() -> None:
    assert "residual" not in CompressionConfig().to_json()
    assert CompressionConfig.from_json(CONFIG.to_json()) == CONFIG
    assert CompressionConfig.from_json(CompressionConfig().to_json()).residual is None
    with pytest.raises(ckptzip.ConfigError):
        CompressionConfig(residual=4)  # type: ignore[arg-type]


def _save_chain(tmp_path: Path, xs: list[torch.Tensor], config: CompressionConfig) -> list[Path]:
    paths: list[Path] = []
    for k, x in enumerate(xs):
        path = tmp_path / f"c{k}.ckz"
        ckptzip.save({"w": x, "step": k}, path, config=config, parent=paths[-1] if paths else None)
        paths.append(path)
    return paths


def test_a_chain_of_residuals_restores_to_what_was_saved_and_errors_do_not_grow(
    tmp_path: Path,
) -> None:
    xs = _drifting(50_000, 9)  # a keyframe and 9 links
    cache: dict[str, Any] = {}
    paths: list[Path] = []
    errors = []
    for k, x in enumerate(xs):
        path = tmp_path / f"c{k}.ckz"
        r = ckptzip.save(
            {"w": x}, path, config=CONFIG, parent=paths[-1] if paths else None, cache=cache
        )
        paths.append(path)
        errors.append(r.entries[0].rel_error)
        # what the writer believes this file decodes to, against a reader in a fresh process
        # (no cache: the chain decoded from its keyframe)
        believed = cache[r.sha256]["w"]
        believed = dequantize(believed) if not isinstance(believed, torch.Tensor) else believed
        back = ckptzip.load(path)["w"]
        assert torch.equal(back, believed)
        assert _rel(x, back) == pytest.approx(errors[-1], rel=1e-6)
    assert [e.codec for e in read_manifest(paths[-1]).tensors] == ["residual"]
    independent = [ckptzip.save({"w": x}, tmp_path / f"i{k}.ckz", config=CONFIG) for k, x in
                   enumerate(xs)]  # fmt: skip
    indep = [r.entries[0].rel_error for r in independent]
    # independent quantization: the same error at every link; feedback: far below it, and it
    # does not grow along the chain
    assert all(e < 0.5 * min(indep) for e in errors[1:])
    assert max(errors[5:]) <= 1.5 * max(errors[1:5])


def test_without_its_parent_a_residual_file_is_refused(tmp_path: Path) -> None:
    paths = _save_chain(tmp_path, _drifting(6000, 2), CONFIG)
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(paths[2], lone / paths[2].name)
    with pytest.raises(MissingParentError):
        ckptzip.load(lone / paths[2].name)
    # the parent replaced by another file under its name
    shutil.copy(paths[0], lone / paths[1].name)
    with pytest.raises(MissingParentError):
        ckptzip.load(lone / paths[2].name)


def test_a_loaded_tensor_does_not_alias_the_cache(tmp_path: Path) -> None:
    # load() hands out the decoded reconstruction; the cache keeps its own copy, so a caller
    # that writes into what it loaded does not move the next residual's parent
    paths = _save_chain(tmp_path, _drifting(6000, 1), CONFIG)
    cache: dict[str, Any] = {}
    out = ckptzip.load(paths[1], cache=cache)
    kept = cache[sha256_file(paths[1])]["w"].clone()
    out["w"].add_(1.0)
    assert torch.equal(cache[sha256_file(paths[1])]["w"], kept)
    assert "step" not in cache[sha256_file(paths[1])]  # exact entries are never cached


# -- the manager ----------------------------------------------------------------------------


def _model_run(tmp_path: Path, **kwargs: Any) -> tuple[CheckpointManager, Any, Any, list[Any]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(128, 64), torch.randn(128, 64)
    calls: list[int] = []

    def eval_fn(m: nn.Module) -> float:
        calls.append(1)
        with torch.no_grad():
            return float(nn.functional.mse_loss(m(x), y))

    mgr = CheckpointManager(
        tmp_path, model=model, optimizer=opt, eval_fn=eval_fn, keyframe_every=4, **kwargs
    )
    reports = []

    def train_and_save(step: int) -> None:
        for _ in range(3):
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        n = len(calls)
        reports.append((mgr.save(step), len(calls) - n))

    return mgr, train_and_save, model, reports


def test_the_manager_restores_bit_for_bit_what_its_saves_believed(tmp_path: Path) -> None:
    mgr, train_and_save, _, reports = _model_run(tmp_path, error_feedback=True)
    believed: dict[int, dict[str, torch.Tensor]] = {}
    for step in range(1, 8):
        train_and_save(step)
        r = reports[-1][0]
        table = mgr._cache.get(r.sha256)
        believed[step] = {
            p: (v.clone() if isinstance(v, torch.Tensor) else dequantize(v))
            for p, v in table.items()
            if p.startswith("model/")
        }
    mgr.close()
    codecs = [
        sorted({e.codec for e in r.entries if e.path.startswith("model/")}) for r, _ in reports
    ]
    assert codecs[0] == ["exact", "quant"] and codecs[4] == ["exact", "quant"]  # keyframes
    assert all(c == ["exact", "residual"] for i, c in enumerate(codecs) if i not in (0, 4))
    # delta saves search no weight: one eval_fn call (the exact weights' baseline), no trial
    for i, (r, calls) in enumerate(reports):
        if i not in (0, 4):
            assert r.search.strategy == "residual" and r.search.trials == 0 and calls == 1
    # a fresh process (a new manager, no cache) restores what the saves believed, bit for bit
    for step in (2, 3, 7):
        state = CheckpointManager(tmp_path).load(step)
        for path, v in believed[step].items():
            assert torch.equal(state["model"][path.removeprefix("model/")], v), (step, path)
    weights = {e.path: e for e in reports[2][0].entries if e.codec == "residual"}
    restored = CheckpointManager(tmp_path).load(3)["model"]
    assert weights and all(e.rel_error is not None and e.rel_error < 0.1 for e in weights.values())
    assert set(restored) >= {p.removeprefix("model/") for p in weights}


def test_the_switch_off_writes_no_residual_and_a_config_turns_it_on(tmp_path: Path) -> None:
    mgr, train_and_save, _, reports = _model_run(tmp_path / "off", error_feedback=False)
    for step in range(1, 4):
        train_and_save(step)
    mgr.close()
    assert all(e.codec != "residual" for r, _ in reports for e in r.entries)
    assert all(r.search.strategy != "residual" for r, _ in reports)
    mgr = CheckpointManager(tmp_path / "on", config=CompressionConfig(residual=RESIDUAL))
    w = _drifting(6000, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        codecs = [mgr.save(k, {"w": x}).entries[0].codec for k, x in enumerate(w)]
    assert codecs == ["quant", "residual", "residual"]
    with pytest.raises(ckptzip.ConfigError, match="error_feedback"):
        CheckpointManager(tmp_path / "x", error_feedback=1)  # type: ignore[arg-type]


def test_restoring_a_residual_chain_into_a_model_and_saving_on(tmp_path: Path) -> None:
    mgr, train_and_save, model, _ = _model_run(tmp_path, error_feedback=True)
    for step in range(1, 4):
        train_and_save(step)
    mgr.close()
    sd = copy.deepcopy(model.state_dict())
    mgr2, train2, model2, reports = _model_run(tmp_path, error_feedback=True)
    assert mgr2.restore() == 3
    for k, v in model2.state_dict().items():
        assert _rel(sd[k], v) < 0.1
    train2(4)  # the next delta, against the chain read back from disk
    assert any(e.codec == "residual" for e in reports[-1][0].entries)
    assert CheckpointManager(tmp_path).chain(4) == [1, 2, 3, 4]
    mgr2.close()


# -- golden files: a residual chain written by this version decodes forever -----------------

GOLDEN = Path(__file__).parent / "golden" / "residual"
_spec = importlib.util.spec_from_file_location(
    "make_residual_golden", GOLDEN / "make_residual_golden.py"
)
assert _spec is not None and _spec.loader is not None
make_residual_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_residual_golden)
EXPECTED = json.loads((GOLDEN / "expected_v1.json").read_text())


def test_golden_residual_chain_decodes_exactly_as_when_written() -> None:
    for name, digest in EXPECTED["file_sha256"].items():
        assert sha256_file(GOLDEN / f"v1_{name}.ckz") == digest
    for k, name in enumerate(make_residual_golden.NAMES):
        path = GOLDEN / f"v1_{name}.ckz"
        entries = {e.path: [e.codec, e.meta.get("mode", e.codec), e.rel_error]
                   for e in read_manifest(path).tensors}  # fmt: skip
        assert entries == EXPECTED["entries"][name]
        restored = ckptzip.load(path)
        _, leaves = flatten(restored)
        got = {p: make_residual_golden.sha256_tensor(t) for p, t in leaves}
        assert got == EXPECTED["decoded_sha256"][name]
        # and it is the recomputed input: lossy parts within their recorded error
        _, original = flatten(make_residual_golden.state(k))
        back = dict(leaves)
        for e in read_manifest(path).tensors:
            x, y = dict(original)[e.path], back[e.path]
            if e.rel_error:
                assert _rel(x, y) == pytest.approx(e.rel_error, rel=1e-6, abs=1e-9)
            else:
                assert torch.equal(x, y)
    assert {v[0] for v in EXPECTED["entries"]["grandchild"].values()} >= {"residual", "delta"}
    # read_quantized gives the reconstruction of a residual entry, as a tensor
    q = read_quantized(GOLDEN / "v1_grandchild.ckz")
    assert isinstance(q["model/w"], torch.Tensor)
    assert not isinstance(q["optimizer/state/0/exp_avg"], torch.Tensor)


def test_golden_residual_without_its_parent_is_refused(tmp_path: Path) -> None:
    shutil.copy(GOLDEN / "v1_grandchild.ckz", tmp_path / "v1_grandchild.ckz")
    with pytest.raises(MissingParentError, match=r"v1_child\.ckz"):
        ckptzip.load(tmp_path / "v1_grandchild.ckz")


def test_asynchronous_saves_with_error_feedback_restore_what_they_believed(
    tmp_path: Path,
) -> None:
    torch.manual_seed(1)
    model = nn.Linear(64, 96)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    mgr = CheckpointManager(tmp_path, model=model, optimizer=opt, error_feedback=True)
    sha = {}
    for step in range(1, 5):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        mgr.save(step, blocking=False)
        r = mgr.wait()
        assert r is not None
        sha[step] = r.sha256
        if step > 1:
            assert {e.codec for e in r.entries if e.path == "model/weight"} == {"residual"}
    believed = mgr._cache.get(sha[4])["model/weight"].clone()
    mgr.close()
    got = CheckpointManager(tmp_path).load(4)["model"]["weight"]
    assert torch.equal(got, believed)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_relative_error_matches_the_masked_float64_definition(dtype: torch.dtype) -> None:
    # the all-finite path skips the mask: the same float64 sums, the same rounded figure
    from ckptzip.codecs.residual import _relative_error
    from ckptzip.quantize import _relative_error as rounded

    g = torch.Generator().manual_seed(3)
    x = torch.randn(20_000, generator=g).to(dtype)
    y = (x.double() + 1e-3 * torch.randn(20_000, generator=g, dtype=torch.float64)).to(dtype)

    def masked(a: torch.Tensor, b: torch.Tensor) -> float:
        a, b = a.double(), b.double()
        keep = torch.isfinite(a)
        a, b = a[keep], b[keep]
        return rounded(float((b - a).square().sum()), float(a.square().sum()))

    assert _relative_error(x, y) == masked(x, y) > 0
    x[[5, 17, 400]] = torch.tensor([float("inf"), float("nan"), -float("inf")], dtype=dtype)
    assert _relative_error(x, y) == masked(x, y) > 0
    assert _relative_error(torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype)) == 0.0
