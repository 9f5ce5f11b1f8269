"""delta: the index transform, the entropy back ends, and bounded decoding."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptzip
from ckptzip._types import QuantizedTensor
from ckptzip.api import read_manifest
from ckptzip.bindiff import (
    DEFAULT_METHOD,
    DELTA_METHODS,
    DeltaPayload,
    apply_difference,
    cyclic_difference,
    decode_delta,
    delta_methods,
    encode_delta,
    encode_smallest,
    rearrangement,
)
from ckptzip.codecs.base import DecodeContext, EncodeContext, get_codec
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.entropy import ONE_CONTEXT, SYMBOL_METHODS, order0_entropy_bits
from ckptzip.errors import ConfigError, CorruptCheckpointError, MissingParentError
from ckptzip.quantize import dequantize, quantize, requantize
from ckptzip.storage import sha256_file
from ckptzip.structure import flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from _measure import conditional_entropy_bits, measure_methods


@st.composite
def index_pairs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    """Two index arrays of one tensor, with a realistic mix: most entries keep their bin."""
    bins = draw(st.integers(1, 256))
    n = draw(st.integers(0, 3000))
    seed = draw(st.integers(0, 2**32 - 1))
    change = draw(st.sampled_from([0.0, 0.01, 0.2, 1.0]))
    rng = np.random.default_rng(seed)
    prev = rng.integers(0, bins, n).astype(np.uint8)
    moved = rng.random(n) < change
    step = rng.integers(-2, 3, n)
    now = np.where(moved, np.clip(prev.astype(np.int64) + step, 0, bins - 1), prev)
    return prev, now.astype(np.uint8), bins


@settings(max_examples=60, deadline=None)
@given(index_pairs(), st.sampled_from(sorted(SYMBOL_METHODS)), st.booleans())
def test_round_trip_every_method(
    pair: tuple[np.ndarray, np.ndarray, int], method: str, rearrange: bool
) -> None:
    prev, now, bins = pair
    if method in ONE_CONTEXT and rearrange and bins > 1:  # not the groups by parent bin
        with pytest.raises(ConfigError, match="one context"):
            encode_delta(prev, now, bins, rearrange=rearrange, method=method)
        return
    payload = encode_delta(prev, now, bins, rearrange=rearrange, method=method)
    assert payload.meta["method"] == method
    out = decode_delta(payload.meta, payload.chunks, prev)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, now)


@settings(max_examples=60, deadline=None)
@given(index_pairs())
def test_cyclic_difference_inverts_and_is_zero_where_unchanged(
    pair: tuple[np.ndarray, np.ndarray, int],
) -> None:
    prev, now, bins = pair
    d = cyclic_difference(prev, now, bins)
    assert d.dtype == np.uint8 and (d < bins).all()
    np.testing.assert_array_equal(d == 0, prev == now)
    np.testing.assert_array_equal(apply_difference(prev, d, bins), now)


def test_difference_uses_the_larger_bin_count() -> None:
    # The parent had 4 bins, the new checkpoint 8: B = 8 and the index 7 is reachable.
    prev = np.array([0, 3, 3], np.uint8)
    now = np.array([7, 3, 0], np.uint8)
    d = cyclic_difference(prev, now, 8)
    assert d.tolist() == [1, 0, 3]
    np.testing.assert_array_equal(apply_difference(prev, d, 8), now)


@given(st.lists(st.integers(0, 255), max_size=500))
def test_rearrangement_groups_by_previous_bin_stably(values: list[int]) -> None:
    prev = np.array(values, np.uint8)
    order = rearrangement(prev)
    assert sorted(order.tolist()) == list(range(len(values)))
    grouped = prev[order]
    assert (np.diff(grouped.astype(int)) >= 0).all()
    for b in np.unique(prev):
        # within one group, positions stay in their original order
        pos = order[grouped == b]
        assert (np.diff(pos) > 0).all()


def test_rearrangement_makes_zero_runs() -> None:
    # Only the weights of bin 0 move: grouped, their changes form one block, zeros the rest.
    rng = np.random.default_rng(1)
    prev = rng.integers(0, 16, 50_000).astype(np.uint8)
    now = np.where(prev == 0, 1, prev).astype(np.uint8)
    plain = encode_delta(prev, now, 16, rearrange=False)
    grouped = encode_delta(prev, now, 16, rearrange=True)
    assert grouped.nbytes * 10 < plain.nbytes


def test_order0_entropy() -> None:
    assert order0_entropy_bits(np.array([], np.uint8)) == 0.0
    assert order0_entropy_bits(np.array([5, 5, 5], np.uint8)) == 0.0
    assert order0_entropy_bits(np.arange(256, dtype=np.uint8)) == pytest.approx(256 * 8)
    s = np.array([0] * 6 + [1] * 2, np.uint8)
    h = -(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25))
    assert order0_entropy_bits(s) == pytest.approx(8 * h)


def test_conditional_entropy_never_exceeds_order0() -> None:
    rng = np.random.default_rng(2)
    ctx = rng.integers(0, 4, 10_000).astype(np.uint8)
    sym = np.where(ctx < 2, 0, rng.integers(0, 3, 10_000)).astype(np.uint8)
    assert conditional_entropy_bits(sym, ctx) < order0_entropy_bits(sym)
    with pytest.raises(ValueError, match="differ in length"):
        conditional_entropy_bits(sym, ctx[:-1])


def test_default_method_beats_order0_on_sparse_changes() -> None:
    # The chosen back end must not waste much over the memoryless bound on a typical stream.
    rng = np.random.default_rng(3)
    prev = rng.integers(0, 16, 200_000).astype(np.uint8)
    now = prev.copy()
    moved = rng.random(prev.size) < 0.05
    now[moved] = np.clip(prev[moved].astype(int) + rng.choice([-1, 1], moved.sum()), 0, 15)
    payload = encode_delta(prev, now, 16)
    bound = order0_entropy_bits(cyclic_difference(prev, now, 16)[rearrangement(prev)]) / 8
    assert payload.meta["method"] == DEFAULT_METHOD
    assert payload.nbytes < 1.25 * bound


def test_measure_methods_reports_every_method() -> None:
    sizes = measure_methods(np.zeros(4096, np.uint8))
    assert set(sizes) == set(SYMBOL_METHODS)
    assert all(0 < b < 200 for b in sizes.values())
    with pytest.raises(ConfigError, match="unknown"):
        measure_methods(np.zeros(4, np.uint8), methods=["huffman"])


@pytest.mark.parametrize(
    ("prev", "now", "bins", "match"),
    [
        (np.zeros(3, np.uint8), np.zeros(3, np.uint8), 0, "bins=0"),
        (np.zeros(3, np.uint8), np.zeros(3, np.uint8), 257, "bins=257"),
        (np.zeros(3, np.int64), np.zeros(3, np.uint8), 4, "uint8"),
        (np.zeros(3, np.uint8), np.zeros(4, np.uint8), 4, "same tensor size"),
        (np.full(3, 5, np.uint8), np.zeros(3, np.uint8), 4, "larger bin count"),
    ],
)
def test_bad_arguments_are_named(prev: np.ndarray, now: np.ndarray, bins: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        encode_delta(prev, now, bins)


def test_unknown_method_is_named() -> None:
    with pytest.raises(ConfigError, match="huffman"):
        encode_delta(np.zeros(3, np.uint8), np.zeros(3, np.uint8), 4, method="huffman")


def _payload(method: str = "rle+lzma") -> tuple[DeltaPayload, np.ndarray]:
    rng = np.random.default_rng(4)
    prev = rng.integers(0, 8, 5000).astype(np.uint8)
    now = prev.copy()
    now[::7] = (now[::7] + 1) % 8
    return encode_delta(prev, now, 8, method=method), prev


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"method": "huffman"}, "unknown"),
        ({"bins": 0}, "bins"),
        ({"bins": 4}, "wrong parent"),
        ({"n": 4999}, "wrong parent"),
        ({"rle_bytes": 10**12}, "out of range"),
        ({"nonzero": -1}, "out of range"),
        ({"rle_bytes": 5}, "decoded to"),
    ],
)
def test_damaged_metadata_is_corrupt(change: dict[str, object], match: str) -> None:
    payload, prev = _payload()
    meta = {**payload.meta, **change}
    with pytest.raises(CorruptCheckpointError, match=match):
        decode_delta(meta, payload.chunks, prev)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"alphabet": 300}, "out of range"),
        ({"alphabet": 3}, "claims|count table"),
        ({"table_bytes": 10**9}, "out of range"),
        ({"table_bytes": 3}, "zstd|misaligned"),
        ({"table_width": 3}, "table_width"),
        ({"table_width": 4}, "claims"),
        ({"rearrange": False}, "claims"),
    ],
)
def test_damaged_ans_metadata_is_corrupt(change: dict[str, object], match: str) -> None:
    payload, prev = _payload("ans")
    meta = {**payload.meta, **change}
    with pytest.raises(CorruptCheckpointError, match=match):
        decode_delta(meta, payload.chunks, prev)


def test_ans_codes_within_two_percent_of_the_conditional_entropy() -> None:
    # One context per previous bin: the coder reaches H(difference | previous bin), which is
    # below the order-0 entropy the other back ends aim at.
    rng = np.random.default_rng(6)
    prev = rng.integers(0, 16, 400_000).astype(np.uint8)
    step = rng.choice([0, 1, 15], prev.size, p=[0.8, 0.1, 0.1]).astype(np.int16)
    step[prev == 0] = np.abs(step[prev == 0]) % 2  # the lowest bin only moves up
    now = ((prev.astype(np.int16) + step) % 16).astype(np.uint8)
    payload = encode_delta(prev, now, 16, method="ans")
    symbols = cyclic_difference(prev, now, 16)
    conditional = sum(order0_entropy_bits(symbols[prev == b]) for b in range(16)) / 8
    assert conditional < order0_entropy_bits(symbols) / 8
    assert payload.nbytes <= 1.02 * conditional
    assert (decode_delta(payload.meta, payload.chunks, prev) == now).all()


def test_wrong_parent_length_is_named() -> None:
    payload, prev = _payload()
    with pytest.raises(CorruptCheckpointError, match="wrong parent"):
        decode_delta(payload.meta, payload.chunks, prev[:-1])


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(sorted(SYMBOL_METHODS)), st.binary(max_size=200), st.integers(0, 10_000))
def test_garbage_chunks_only_raise_corrupt(method: str, data: bytes, nonzero: int) -> None:
    prev = np.zeros(1000, np.uint8)
    meta = {
        "method": method,
        "bins": 4,
        "n": 1000,
        "rearrange": True,
        "nonzero": nonzero,
        "rle_bytes": nonzero + 8,
    }
    try:
        out = decode_delta(meta, [data], prev)
    except CorruptCheckpointError:
        return
    # Whatever decodes must still be a valid index array of the right size.
    assert out.shape == (1000,) and (out < 4).all()


@pytest.mark.parametrize("method", sorted(SYMBOL_METHODS))
def test_decompression_is_bounded_by_the_metadata(method: str) -> None:
    # A payload that expands to far more than the metadata says is refused, not inflated.
    rng = np.random.default_rng(5)
    big = rng.integers(0, 4, 10**5).astype(np.uint8)
    bomb = encode_delta(np.zeros(10**5, np.uint8), big, 4, method=method, rearrange=False)
    meta = {**bomb.meta, "n": 1000}
    if "nonzero" in meta:
        meta["nonzero"] = min(meta["nonzero"], 1000)
    if "rle_bytes" in meta:
        meta["rle_bytes"] = min(meta["rle_bytes"], 2000)
    with pytest.raises(CorruptCheckpointError):
        decode_delta(meta, bomb.chunks, np.zeros(1000, np.uint8))


def test_chunk_count_is_checked() -> None:
    payload, prev = _payload()
    with pytest.raises(CorruptCheckpointError, match="chunks"):
        decode_delta(payload.meta, [*payload.chunks, b""], prev)


# -- the "delta" codec -----------------------------------------------------------------------


class _Parent:
    """A ParentView over a dict of QuantizedTensors."""

    def __init__(self, table: dict[str, QuantizedTensor]) -> None:
        self.table = table
        self.content_hash = "ab" * 32

    def quantized(self, path: str) -> QuantizedTensor | None:
        return self.table.get(path)


def _codec_round_trip(
    x: torch.Tensor, parent: _Parent | None, quant: QuantConfig
) -> tuple[dict[str, object], QuantizedTensor, QuantizedTensor]:
    """Encode with the delta codec, decode with the pipeline's fields, as api does."""
    config = CompressionConfig(quant=quant, min_numel=0)
    enc = get_codec("delta").encode(x, EncodeContext("w", config, quant=quant, parent=parent))
    assert enc.quantized is not None
    out = get_codec("delta").decode(
        enc.meta, enc.chunks, DecodeContext.of_encoded("w", x, enc, parent)
    )
    out = out.quantized
    assert isinstance(out, QuantizedTensor)
    return enc.meta, enc.quantized, out


def _same_quantized(a: QuantizedTensor, b: QuantizedTensor) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype and a.config == b.config
    np.testing.assert_array_equal(a.levels, b.levels)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.protected_positions, b.protected_positions)
    assert tensor_to_bytes(a.protected_values) == tensor_to_bytes(b.protected_values)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 2**31 - 1),
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16, torch.float64]),
    st.sampled_from([(0,), (1,), (7, 9), (3000,), (40, 100)]),
    st.sampled_from([0.0, 0.001, 0.05, 1.0]),
    st.sampled_from([(8, 8), (8, 16), (16, 4), (2, 2)]),
    st.booleans(),
)
def test_codec_round_trip_against_a_parent(
    seed: int,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    drift: float,
    bins: tuple[int, int],
    special: bool,
) -> None:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(shape, generator=g, dtype=torch.float64)
    now = (base + drift * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)
    if special and now.numel() > 3:
        flat = now.view(-1)
        flat[0], flat[1], flat[2] = float("nan"), float("inf"), float("-inf")
    parent_q = quantize(base.to(dtype), QuantConfig(bins=bins[0], protect=0.01))
    quant = QuantConfig(bins=bins[1], prune=0.2 if bins[1] > 2 else 0.0, protect=0.01)
    meta, encoded, decoded = _codec_round_trip(now, _Parent({"w": parent_q}), quant)
    _same_quantized(encoded, decoded)
    if meta["mode"] == "delta":
        assert meta["delta"]["bins"] == max(len(parent_q.levels), len(encoded.levels))


def test_codec_stores_small_changes_as_a_delta() -> None:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(50_000, generator=g)
    now = base + 0.001 * torch.randn(50_000, generator=g)
    quant = QuantConfig(bins=16)
    parent = _Parent({"w": quantize(base, quant)})
    meta, encoded, decoded = _codec_round_trip(now, parent, quant)
    assert meta["mode"] == "delta" and meta["delta"]["method"] in DELTA_METHODS
    _same_quantized(encoded, decoded)
    full = get_codec("quant").encode(now, EncodeContext("w", CompressionConfig(), quant=quant))
    delta = get_codec("delta").encode(
        now, EncodeContext("w", CompressionConfig(), quant, None, parent)
    )
    assert sum(map(len, delta.chunks)) * 3 < sum(map(len, full.chunks))


def test_a_delta_far_below_the_indices_entropy_is_kept_without_a_full_trial(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the comparison with the full encoding costs a second coding of every tensor; a delta a
    # fraction of its indices' entropy cannot lose it (FULL_TRIAL)
    import ckptzip.codecs.delta as delta_codec

    calls = []
    real = delta_codec.encode_full
    monkeypatch.setattr(
        delta_codec, "encode_full", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    g = torch.Generator().manual_seed(0)
    base = torch.randn(50_000, generator=g)
    quant = QuantConfig(bins=16)
    parent = _Parent({"w": quantize(base, quant)})
    meta, encoded, decoded = _codec_round_trip(
        base + 1e-4 * torch.randn(50_000, generator=g), parent, quant
    )
    assert meta["mode"] == "delta" and not calls
    _same_quantized(encoded, decoded)
    # an unrelated parent: the differences are noise, the full encoding is coded and kept
    noise = _Parent({"w": quantize(torch.randn(50_000, generator=g), quant)})
    meta, _, _ = _codec_round_trip(base, noise, quant)
    assert meta["mode"] == "full" and calls


@pytest.mark.parametrize(
    ("parent", "why"),
    [
        (None, "no parent"),
        (_Parent({}), "parent lacks"),
        (_Parent({"w": quantize(torch.randn(10, 500), QuantConfig())}), "parent shape"),
        (_Parent({"w": quantize(torch.randn(5000), QuantConfig())}), "delta not smaller"),
    ],
)
def test_codec_falls_back_to_a_full_encoding(parent: _Parent | None, why: str) -> None:
    # The last case: an unrelated tensor as parent, so the differences are noise.
    x = torch.randn(5000, generator=torch.Generator().manual_seed(9))
    meta, encoded, decoded = _codec_round_trip(x, parent, QuantConfig())
    assert meta["mode"] == "full" and meta["inner_codec"] == "quant"
    assert why in str(meta["why"])
    _same_quantized(encoded, decoded)


def _ctx(parent: _Parent | None) -> DecodeContext:
    """The pipeline's fields of :func:`_delta_entry`'s tensor."""
    return DecodeContext("w", (20_000,), torch.float32, QuantConfig(bins=8), 0.0, parent)


def _delta_entry() -> tuple[dict[str, object], list[bytes], _Parent]:
    base = torch.randn(20_000, generator=torch.Generator().manual_seed(1))
    quant = QuantConfig(bins=8)
    parent = _Parent({"w": quantize(base, quant)})
    enc = get_codec("delta").encode(
        base + 0.001, EncodeContext("w", CompressionConfig(), quant, None, parent)
    )
    assert enc.meta["mode"] == "delta"
    return enc.meta, enc.chunks, parent


def test_decoding_a_delta_without_its_parent_is_a_clear_error() -> None:
    meta, chunks, parent = _delta_entry()
    with pytest.raises(MissingParentError, match="no parent checkpoint"):
        get_codec("delta").decode(meta, chunks, _ctx(None))
    with pytest.raises(MissingParentError, match="not this delta's parent"):
        get_codec("delta").decode(meta, chunks, _ctx(_Parent({})))
    other = _Parent({"w": quantize(torch.randn(20, 1000), QuantConfig(bins=8))})
    with pytest.raises(MissingParentError, match="shape"):
        get_codec("delta").decode(meta, chunks, _ctx(other))
    out = get_codec("delta").decode(meta, chunks, _ctx(parent))
    assert isinstance(out.quantized, QuantizedTensor)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"mode": "sideways"}, "mode"),
        ({"delta_chunks": 5}, "chunks"),
        ({"n_levels": 0}, "n_levels"),
        ({"mode": "full", "inner_codec": "delta", "inner": {}}, "wrap itself"),
    ],
)
def test_damaged_codec_metadata_is_corrupt(change: dict[str, object], match: str) -> None:
    meta, chunks, parent = _delta_entry()
    with pytest.raises(CorruptCheckpointError, match=match):
        get_codec("delta").decode({**meta, **change}, chunks, _ctx(parent))


# -- golden files: a delta written by format version 1 decodes forever ------------------------

GOLDEN = Path(__file__).parent / "golden" / "delta"
_spec = importlib.util.spec_from_file_location("make_delta_golden", GOLDEN / "make_delta_golden.py")
assert _spec is not None and _spec.loader is not None
make_delta_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_delta_golden)
EXPECTED = json.loads((GOLDEN / "expected_v1.json").read_text())


def test_golden_delta_decodes_exactly_as_when_written() -> None:
    for kind, digest in EXPECTED["file_sha256"].items():
        assert sha256_file(GOLDEN / f"v1_{kind}.ckz") == digest
    child = GOLDEN / "v1_child.ckz"
    manifest = read_manifest(child)
    assert manifest.parent == {"hash": EXPECTED["file_sha256"]["parent"], "name": "v1_parent.ckz"}
    modes = {e.path: e.meta.get("mode", e.codec) for e in manifest.tensors}
    assert modes == EXPECTED["modes"] and "delta" in modes.values()
    restored = ckptzip.load(child)
    _, leaves = flatten(restored)
    assert {p: make_delta_golden.sha256_tensor(t) for p, t in leaves} == EXPECTED["decoded_sha256"]
    # and it is the recomputed input: exact parts bit for bit, lossy ones within their error
    _, original = make_delta_golden.objects()
    assert restored["step"] == 2 and torch.equal(
        restored["model"]["bias"], original["model"]["bias"]
    )
    for e in manifest.tensors:
        if e.rel_error:
            x, y = (
                original["model"][e.path.split("/")[1]].double(),
                restored["model"][e.path.split("/")[1]].double(),
            )
            finite = x.isfinite()
            err = float((x[finite] - y[finite]).norm() / x[finite].norm())
            assert err == pytest.approx(e.rel_error, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize(
    ("tag", "method"),
    [
        # the first files whose deltas use the "rle+ans" back end (added within format
        # version 1 of the delta codec; an older reader reports the unknown back end)
        ("rle_ans", "rle+ans"),
        # the first whose deltas use "ans-wide-ctx" and "rle+ans-wide" (added later in file
        # format version 5; the second's tensor "w" has both inner streams in the wide lanes)
        ("wide_ctx", "ans-wide-ctx"),
        ("rle_ans_wide", "rle+ans-wide"),
    ],
)
def test_golden_delta_back_end_decodes_exactly_as_when_written(tag: str, method: str) -> None:
    expected = json.loads((GOLDEN / f"expected_{tag}.json").read_text())
    for kind, digest in expected["file_sha256"].items():
        assert sha256_file(GOLDEN / f"{tag}_{kind}.ckz") == digest
    manifest = read_manifest(GOLDEN / f"{tag}_child.ckz")
    methods = {e.path: e.meta["delta"]["method"] for e in manifest.tensors if "delta" in e.meta}
    assert methods == expected["methods"] and method in methods.values()
    _, leaves = flatten(ckptzip.load(GOLDEN / f"{tag}_child.ckz"))
    assert {p: make_delta_golden.sha256_tensor(t) for p, t in leaves} == expected["decoded_sha256"]


def test_golden_delta_without_its_parent_is_refused(tmp_path: Path) -> None:
    shutil.copy(GOLDEN / "v1_child.ckz", tmp_path / "v1_child.ckz")
    with pytest.raises(MissingParentError, match=r"v1_parent\.ckz"):
        ckptzip.load(tmp_path / "v1_child.ckz")
    shutil.copy(GOLDEN / "v1_child.ckz", tmp_path / "v1_parent.ckz")  # a file, but not that one
    with pytest.raises(MissingParentError, match="altered or replaced"):
        ckptzip.load(tmp_path / "v1_child.ckz")


@pytest.mark.parametrize("log_domain", [False, True])
def test_a_child_keeps_its_parents_codebook_when_that_costs_no_error(log_domain: bool) -> None:
    g = torch.Generator().manual_seed(3)
    base = torch.randn(20_000, generator=g)
    x0 = base.abs() if log_domain else base
    x1 = x0 * (1 + 0.01 * torch.randn(20_000, generator=g))  # a small step of training
    quant = QuantConfig(bins=16, prune=0.0 if log_domain else 0.2, log_domain=log_domain)
    parent = _Parent({"w": quantize(x0, quant)})
    meta, child, decoded = _codec_round_trip(x1, parent, quant)
    fresh = quantize(x1, quant)
    _same_quantized(child, decoded)
    assert meta["mode"] == "delta"
    if np.array_equal(child.levels, parent.table["w"].levels):  # kept: never more error
        assert child.rel_error <= fresh.rel_error
        changed = float((child.indices != parent.table["w"].indices).mean())
        assert changed < float((fresh.indices != parent.table["w"].indices).mean())
    else:
        _same_quantized(child, fresh)
    recon = dequantize(child)
    err = float((recon - x1).norm() / x1.norm())
    assert err == pytest.approx(child.rel_error, rel=1e-5)


def test_requantize_keeps_pruned_and_protected_entries() -> None:
    x = torch.randn(10_000, generator=torch.Generator().manual_seed(5))
    q = quantize(x, QuantConfig(bins=8, prune=0.3, protect=0.01))
    other = quantize(x * 1.1, QuantConfig(bins=8, prune=0.3, protect=0.01)).levels
    r = requantize(x, q, other)
    assert r is not None
    np.testing.assert_array_equal(r.levels, other)
    np.testing.assert_array_equal(r.protected_positions, q.protected_positions)
    was_zero = (dequantize(q) == 0).numpy()
    assert bool((dequantize(r).numpy()[was_zero] == 0).all())
    pos = torch.from_numpy(q.protected_positions)
    assert torch.equal(dequantize(r)[pos], x[pos])
    # levels that cannot hold the pruned zeros, or too many of them, are refused
    assert requantize(x, q, np.array([-1.0, 1.0])) is None
    assert requantize(x, q, np.linspace(-1, 1, 9)) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_requantize_log_domain_takes_the_nearest_level_in_log_space(seed: int) -> None:
    """A log-domain tensor (a second moment, with exact zeros) requantized against another
    codebook: every entry but the kept zeros and the protected ones takes the non-zero level
    nearest in log space (the value-space cut-offs are the levels' geometric midpoints; an
    entry within float32 rounding of one may go either way)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(50_000, generator=g).square() * 1e-6
    x[torch.rand(50_000, generator=g) < 0.03] = 0.0
    cfg = QuantConfig(bins=16, protect=0.001, log_domain=True)
    q = quantize(x, cfg)
    other = quantize(x * 1.3, cfg).levels  # zeros too: a zero level to keep them
    r = requantize(x, q, other)
    assert r is not None
    np.testing.assert_array_equal(r.levels, other)
    idx = r.indices.reshape(-1).astype(np.int64)
    nonzero = np.flatnonzero(other != 0.0)
    xs = x.double().numpy()
    kept_zero = dequantize(q).numpy() == 0
    free = ~kept_zero
    free[q.protected_positions] = False
    logs = np.log(xs[free])
    want = nonzero[np.abs(logs[:, None] - other[nonzero][None, :]).argmin(axis=1)]
    cuts = (other[nonzero][1:] + other[nonzero][:-1]) / 2
    near_cut = (np.abs(logs[:, None] - cuts[None, :]) < 1e-6).any(axis=1)
    assert (idx[free] == want)[~near_cut].all()
    zero_at = int(np.flatnonzero(other == 0.0)[0])
    assert (idx[kept_zero & ~np.isin(np.arange(x.numel()), q.protected_positions)] == zero_at).all()
    recon = dequantize(r)
    assert float((recon - x).norm() / x.norm()) == pytest.approx(r.rel_error, rel=1e-5)


def _smallest_by_trying_all(prev: np.ndarray, now: np.ndarray, bins: int) -> DeltaPayload:
    tried = (encode_delta(prev, now, bins, method=m) for m in delta_methods(prev.size))
    return min(tried, key=lambda p: p.nbytes)


@pytest.mark.parametrize("changed", [0.0005, 0.02, 0.6])
def test_encode_smallest_matches_trying_every_method(changed: float) -> None:
    """Sparse changes (rle+ans far smaller than ANS: ANS is left out by its size from the
    counts), dense ones (ANS far smaller) and ones between give the payload that trying every
    back end in full gives."""
    rng = np.random.default_rng(1)
    prev = rng.integers(0, 16, 1 << 21).astype(np.uint8)
    now = prev.copy()
    moved = rng.random(prev.size) < changed
    now[moved] = (now[moved] + rng.integers(1, 3, int(moved.sum()))) % 16
    got = encode_smallest(prev, now, 16)
    want = _smallest_by_trying_all(prev, now, 16)
    assert got.meta == want.meta and got.chunks == want.chunks
    assert (decode_delta(got.meta, got.chunks, prev) == now).all()
