"""Tests of the codecs: registry, a conformance harness every codec runs, hostile metadata."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptzip._types import QuantizedTensor
from ckptzip.codecs import Codec, DecodeContext, EncodeContext, available_codecs, get_codec
from ckptzip.codecs.base import Decoded, register_codec
from ckptzip.codecs.testing import check_round_trip
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.entropy import order0_entropy_bits
from ckptzip.errors import CorruptCheckpointError, UnsupportedFormatError
from ckptzip.structure import DTYPES

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def round_trip(codec_id: str, x: torch.Tensor, quant: QuantConfig | None = None) -> Any:
    """Encode, pass the meta through strict JSON as the container does, decode."""
    codec = get_codec(codec_id)
    enc = codec.encode(x, EncodeContext("t", CompressionConfig(), quant=quant))
    meta = json.loads(json.dumps(enc.meta, allow_nan=False))
    ctx = DecodeContext.of_encoded("t", x, enc)
    fields = {f: getattr(ctx, f) for f in ("path", "shape", "dtype", "config", "rel_error")}
    out = codec.decode(meta, [bytes(c) for c in enc.chunks], ctx)
    assert isinstance(out, Decoded)
    assert out.shape == tuple(x.shape) and out.dtype == x.dtype
    return out.value(), meta, enc.chunks, fields


def test_registry() -> None:
    assert {"exact", "quant"} <= set(available_codecs())
    assert get_codec("exact").lossy is False and get_codec("quant").lossy is True
    with pytest.raises(UnsupportedFormatError, match=r"'lz77-from-the-future'.*ckptzip\.codecs"):
        get_codec("lz77-from-the-future")

    class Impostor(Codec):
        id = "exact"

        def encode(self, x: Any, ctx: Any) -> Any:
            raise NotImplementedError

        def decode(self, meta: Any, chunks: Any, ctx: Any) -> Any:
            raise NotImplementedError

    with pytest.raises(ValueError, match="already taken"):
        register_codec(Impostor)


shapes = st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple)


@given(st.sampled_from(list(DTYPES.values())), shapes, st.data())
def test_exact_codec_is_bit_exact(dtype: torch.dtype, shape: tuple[int, ...], data: Any) -> None:
    n = math.prod(shape) * dtype.itemsize
    raw = data.draw(st.binary(min_size=n, max_size=n))  # any bit pattern: NaN payloads, subnormals
    x = (
        torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
        if n
        else (torch.empty(shape, dtype=dtype))
    )
    check_round_trip("exact", x)


specials = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-40, -5e-324, 1e18])


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(FLOATS),
    st.integers(0, 3000),
    st.lists(st.tuples(st.integers(0, 2999), specials), max_size=6),
    st.sampled_from([2, 3, 4, 8, 16, 33, 256]),
    st.sampled_from([0.0, 0.3]),
    st.sampled_from([0.0, 0.01]),
    st.integers(0, 2**16),
)
def test_quant_codec_round_trip_within_recorded_error(
    dtype: torch.dtype,
    n: int,
    special: list[tuple[int, float]],
    bins: int,
    prune: float,
    protect: float,
    seed: int,
) -> None:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(n, generator=g, dtype=torch.float64) * 0.05).to(dtype)
    for i, v in special:
        if i < n:
            x[i] = v
    check_round_trip("quant", x, quant=QuantConfig(bins=bins, prune=prune, protect=protect))


def test_values_near_fp32_max_record_a_finite_error() -> None:
    x = torch.tensor([3e38, 1.0, -2.0], dtype=torch.float32).repeat(100)
    q_out, _, _, _ = round_trip("quant", x, QuantConfig(bins=2, protect=0.0))
    assert math.isfinite(q_out.rel_error)
    check_round_trip("quant", x, quant=QuantConfig(bins=2, protect=0.0))


def test_quant_codec_keeps_the_smaller_index_layout() -> None:
    x = torch.randn(50_000)
    q, meta, chunks, _ = round_trip("quant", x, QuantConfig(bins=16, protect=0.0))
    assert meta["bits"] == 4 and meta["index_layout"] in ("packed", "bytes", "ans")
    assert len(chunks[1]) <= 50_000 // 2 + 64  # no worse than the packed stream
    # k-means levels are unequally used: ANS codes them near their order-0 entropy
    assert meta["index_layout"] == "ans"
    assert len(chunks[1]) <= 1.02 * order0_entropy_bits(q.indices) / 8 + 64
    _, meta, _, _ = round_trip(
        "quant",
        torch.zeros(10_000).index_fill_(0, torch.tensor([5]), 1.0),
        QuantConfig(bins=4, protect=0.0),
    )
    assert meta["n_levels"] <= 4


def quant_sample() -> tuple[dict[str, Any], list[bytes], dict[str, Any]]:
    x = torch.randn(4000)
    _, meta, chunks, fields = round_trip("quant", x, QuantConfig(bins=16, protect=0.01))
    return meta, [bytes(c) for c in chunks], fields


def _rewrite_positions(meta: dict[str, Any], chunks: list[bytes], gaps: list[int]) -> None:
    chunks[2] = np.array(gaps, dtype="<i8").tobytes()
    meta["positions_stage"] = {"enc": "raw", "size": len(chunks[2])}
    meta["n_protected"] = len(gaps)
    vals = bytes(4 * len(gaps))
    chunks[3] = vals
    meta["values_stage"] = {"enc": "raw", "size": len(vals)}


class _Fields(dict[str, Any]):
    """Replacement DecodeContext fields."""


@pytest.mark.parametrize(
    "damage",
    [
        lambda m, c: m.update(n_levels=300),
        lambda m, c: m.update(n_levels=3),
        lambda m, c: m.update(bits=7),
        lambda m, c: m.update(index_layout="zigzag"),
        lambda m, c: _Fields(config=QuantConfig(bins=2)),
        lambda m, c: _Fields(config=None),
        lambda m, c: _Fields(dtype=torch.int32),
        lambda m, c: m.update(n_protected=10**9),
        lambda m, c: m.pop("values_stage"),
        lambda m, c: c.pop(),
        lambda m, c: c.__setitem__(0, np.array([1.0, 0.0] * 8, dtype="<f8").tobytes()),
        lambda m, c: c.__setitem__(0, np.array([math.nan] * 16, dtype="<f8").tobytes()),
        lambda m, c: _rewrite_positions(m, c, [5, 0]),
        lambda m, c: _rewrite_positions(m, c, [-1]),
        lambda m, c: _rewrite_positions(m, c, [3999, 1]),
        lambda m, c: _rewrite_positions(m, c, [1, 2**62, 2**62, 2**62]),
    ],
)
@pytest.mark.parametrize("values", [False, True])
def test_quant_decode_rejects_inconsistent_parts(damage: Any, values: bool) -> None:
    meta, chunks, fields = quant_sample()
    if values:  # decoded straight into the tensor (load onto the CPU): the same checks
        from ckptzip import entropy
        from ckptzip.codecs.quantized import decode_indices

        idx = decode_indices(meta, chunks[1], 4000, meta["n_levels"])
        (chunks[1],), meta["index_stage"] = entropy.encode_symbols(idx, "ans-lanes")
        meta["index_layout"] = "ans-lanes"
    out = damage(meta, chunks)
    if isinstance(out, _Fields):  # damage to the pipeline's fields rather than the codec's
        fields.update(out)
    with pytest.raises(CorruptCheckpointError):
        get_codec("quant").decode(meta, chunks, DecodeContext(**fields, values=values))


def _beyond_levels_sample() -> tuple[dict[str, Any], list[bytes], dict[str, Any]]:
    """:func:`quant_sample` rewritten to 10 levels whose packed 4-bit indices are all 15: 10
    levels need 4 bits, which can also spell the indices 10..15 that address nothing."""
    from ckptzip import entropy
    from ckptzip.packing import pack_indices

    meta, chunks, fields = quant_sample()
    payload, info = entropy.encode(pack_indices(np.full(4000, 15, dtype=np.uint8), 4))
    meta.update(index_layout="packed", index_stage=info, n_levels=10, bits=4)
    chunks[0] = np.linspace(-1, 1, 10).astype("<f8").tobytes()
    chunks[1] = payload
    return meta, chunks, fields


def test_indices_beyond_levels_are_rejected() -> None:
    meta, chunks, fields = _beyond_levels_sample()
    with pytest.raises(CorruptCheckpointError, match="beyond"):
        get_codec("quant").decode(meta, chunks, DecodeContext(**fields))


def test_indices_are_scanned_unless_the_decoder_held_them_to_the_levels() -> None:
    """``decode_side(below=...)``: a bound the caller's decoder enforced (a bin-index delta's
    bins) spares the scan of the indices only where it is within the level count."""
    from ckptzip.codecs.quantized import decode_side, encode_side
    from ckptzip.quantize import quantize

    q = quantize(torch.randn(4000), QuantConfig(bins=8))
    side = encode_side(q, 3)
    ctx = DecodeContext("w", (4000,), torch.float32, q.config)
    n_levels = q.levels.size
    beyond = q.indices.copy()
    beyond[17] = n_levels  # what a delta with more bins than levels could decode to
    for below in (None, n_levels + 1, 256):
        with pytest.raises(CorruptCheckpointError, match="beyond"):
            decode_side(side, beyond, ctx, below=below)
    # within the levels: taken as the decoder checked it (the indices are not read again)
    ok = decode_side(side, q.indices, ctx, below=n_levels)
    assert np.array_equal(ok.indices, q.indices)


@pytest.mark.parametrize("n", [100, 2_000_000])
def test_index_layouts_round_trip(n: int) -> None:
    from ckptzip import entropy
    from ckptzip.codecs.quantized import decode_indices, encode_indices

    rng = np.random.default_rng(0)
    idx = rng.integers(0, 11, n).astype(np.uint8)
    payload, meta = encode_indices(idx, 11, 3)
    # long streams are coded in wide lanes, short ones as one stream (or packed, when smaller)
    want = ("ans-wide",) if n >= entropy.ANS_LANES_MIN else ("ans", "packed")
    assert meta["index_layout"] in want
    assert np.array_equal(decode_indices(meta, payload, n, 11), idx)
    # the packed layout, written by hand, decodes too
    from ckptzip.packing import pack_indices

    raw, info = entropy.encode(pack_indices(idx, 4))
    meta = {"bits": 4, "index_layout": "packed", "index_stage": info}
    assert np.array_equal(decode_indices(meta, raw, n, 11), idx)
    # the one-byte layout, written by hand, decodes too
    raw, info = entropy.encode(idx.tobytes())
    meta = {"bits": 4, "index_layout": "bytes", "index_stage": info}
    assert np.array_equal(decode_indices(meta, raw, n, 11), idx)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 16),
    st.integers(1, 3000),
    st.integers(1, 400),
    st.integers(0, 2**32 - 1),
)
def test_index_choice_is_never_worse_than_packed_or_ans(
    levels: int, runs: int, run_max: int, seed: int
) -> None:
    # the ANS pass is skipped only below the order-0 floor: the kept payload is never larger
    # than either the packed stream or the ANS coding of the same indices
    from ckptzip import entropy
    from ckptzip.codecs.quantized import encode_indices
    from ckptzip.packing import bits_for, pack_indices

    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(levels))
    idx = np.repeat(
        rng.choice(levels, runs, p=p).astype(np.uint8), rng.integers(1, run_max + 1, runs)
    )
    payload, meta = encode_indices(idx, levels, 3)
    packed, _ = entropy.encode(pack_indices(idx, bits_for(levels)), 3)
    method = "ans-lanes" if idx.size >= entropy.ANS_LANES_MIN else "ans"
    (coded,), _ = entropy.encode_symbols(idx, method)
    assert len(payload) <= min(len(packed), len(coded))
    from ckptzip.codecs.quantized import decode_indices

    assert np.array_equal(decode_indices(meta, payload, idx.size, levels), idx)


def test_index_choice_skips_the_passes_that_cannot_win(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptzip import entropy
    from ckptzip.codecs import quantized

    calls: list[str] = []
    symbols, compress = entropy.encode_symbols, entropy.compress
    monkeypatch.setattr(
        entropy, "encode_symbols", lambda *a, **k: calls.append("ans") or symbols(*a, **k)
    )
    monkeypatch.setattr(
        entropy, "compress", lambda d, *a: calls.append(f"zstd {len(d)}") or compress(d, *a)
    )
    # long runs: zstd on the packed stream is far below the order-0 entropy, so no ANS pass
    runs = np.repeat(np.arange(200_000, dtype=np.uint8) % 16, 20)
    _, meta = quantized.encode_indices(runs, 16, 3)
    assert meta["index_layout"] == "packed" and "ans" not in calls
    # unequally used levels without runs: ANS wins, and at 4 bits the one-byte layout
    # (zstd over a sample, then over all 400 000 bytes) is not tried
    calls.clear()
    rng = np.random.default_rng(0)
    skewed = rng.choice(16, 400_000, p=rng.dirichlet(np.ones(16))).astype(np.uint8)
    _, meta = quantized.encode_indices(skewed, 16, 3)
    assert meta["index_layout"] == "ans-wide" and "ans" in calls
    assert all(int(c.split()[1]) <= skewed.size // 2 for c in calls if c.startswith("zstd"))


class _Parent:
    """A ParentView holding one quantized tensor at path "t"."""

    def __init__(self, q: QuantizedTensor) -> None:
        self.content_hash = "0" * 64
        self._q = q

    def quantized(self, path: str) -> QuantizedTensor | None:
        return self._q if path == "t" else None


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(available_codecs()), st.sampled_from(FLOATS), st.integers(0, 2**16))
def test_every_codec_passes_the_conformance_check(
    codec_id: str, dtype: torch.dtype, seed: int
) -> None:
    from ckptzip.quantize import quantize

    g = torch.Generator().manual_seed(seed)
    base = torch.randn(6000, generator=g, dtype=torch.float64) * 0.05
    x = (base + 0.001 * torch.randn(6000, generator=g, dtype=torch.float64)).to(dtype)
    cfg = QuantConfig(bins=16, protect=0.001)
    parent = _Parent(quantize(base.to(dtype), cfg))
    if get_codec(codec_id).reads_siblings:  # "step": an exp_avg over its exp_avg_sq
        v = (base.square() + 1e-6).to(dtype)
        view = _Siblings({"optimizer/state/0/exp_avg_sq": v})
        check_round_trip(codec_id, x, quant=cfg, path="optimizer/state/0/exp_avg", siblings=view)
        return
    check_round_trip(codec_id, x, quant=cfg, parent=parent)
    check_round_trip(codec_id, x, quant=cfg)  # no parent: delta codecs must fall back


class _Siblings:
    """A SiblingView holding the given tensors."""

    def __init__(self, tensors: dict[str, torch.Tensor]) -> None:
        self._t = tensors

    def value(self, path: str) -> torch.Tensor | None:
        return self._t.get(path)


@pytest.mark.parametrize("layout", ["ans-wide", "ans-lanes", "ans", "packed", "bytes"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("log_domain", [False, True])
def test_decoding_straight_into_the_tensor_gives_the_dequantized_values(
    layout: str, dtype: torch.dtype, log_domain: bool
) -> None:
    # what load decodes onto the CPU (DecodeContext.values) is what dequantize gives, bit for bit
    from ckptzip import entropy
    from ckptzip.codecs.quantized import encode_quantized
    from ckptzip.packing import pack_indices
    from ckptzip.quantize import dequantize, quantize

    g = torch.Generator().manual_seed(1)
    x = torch.randn(70_001, generator=g).to(dtype)
    if log_domain:
        x = x.abs() ** 3
    x[17] = float("nan")  # protected, like the top fraction
    cfg = QuantConfig(bins=12, protect=0.001, prune=0.2 if not log_domain else 0.0,
                      log_domain=log_domain)  # fmt: skip
    q = quantize(x, cfg)
    meta, chunks = encode_quantized(q, 3)
    assert meta["index_layout"] == "ans-wide"  # what this version writes
    if layout in ("ans", "ans-lanes"):  # what earlier versions wrote
        (chunks[1],), meta["index_stage"] = entropy.encode_symbols(q.indices, layout)
    elif layout in ("packed", "bytes"):
        raw = pack_indices(q.indices, meta["bits"]) if layout == "packed" else q.indices.tobytes()
        chunks[1], meta["index_stage"] = entropy.encode(raw)
    meta["index_layout"] = layout
    ctx = DecodeContext("t", tuple(x.shape), dtype, cfg, q.rel_error, values=True)
    out = get_codec("quant").decode(meta, chunks, ctx)
    assert (out.tensor is not None) == (layout != "ans")  # one stream: through the indices
    got = out.materialize()
    want = dequantize(q)
    assert got.dtype == dtype and torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_indices_beyond_levels_are_rejected_straight_into_the_tensor() -> None:
    from ckptzip import entropy

    meta, chunks, fields = _beyond_levels_sample()
    with pytest.raises(CorruptCheckpointError, match="beyond"):
        get_codec("quant").decode(meta, chunks, DecodeContext(**fields, values=True))
    # an ANS alphabet wider than the levels could spell an index that addresses nothing
    for layout in ("ans-lanes", "ans-wide"):
        (chunks[1],), stage = entropy.encode_symbols(np.arange(4000, dtype=np.uint8) % 12, layout)
        meta.update(index_layout=layout, index_stage=stage)
        with pytest.raises(CorruptCheckpointError, match="beyond"):
            get_codec("quant").decode(meta, chunks, DecodeContext(**fields, values=True))


def test_encode_indices_reuses_a_packed_candidate_as_coded() -> None:
    # a caller that coded the packed stream already (the delta codec's floor) passes it on:
    # the same bytes and meta as coding it again, whichever candidate wins
    from ckptzip.codecs.quantized import encode_indices, encode_packed

    rng = np.random.default_rng(5)
    runs = np.repeat(rng.integers(0, 16, 400), 250).astype(np.uint8)
    skewed = rng.choice(16, 100_000, p=np.r_[0.7, np.full(15, 0.02)]).astype(np.uint8)
    layouts = set()
    for idx, levels in ((runs, 16), (skewed, 16), (skewed % 11, 11)):
        packed = encode_packed(idx, levels, 3)
        reused = encode_indices(idx, levels, 3, packed=packed)
        assert reused == encode_indices(idx, levels, 3)
        layouts.add(reused[1]["index_layout"])
    assert len(layouts) >= 2  # both the packed stream and another candidate won somewhere


@pytest.fixture(scope="module")
def wide_entry() -> tuple[dict[str, Any], list[bytes], torch.Tensor, QuantConfig, float]:
    """A quant entry whose indices are an "ans-wide" stream, and its dequantized values."""
    from ckptzip.codecs.quantized import encode_quantized
    from ckptzip.quantize import dequantize, quantize

    x = torch.randn(70_001, generator=torch.Generator().manual_seed(3))
    cfg = QuantConfig(bins=12, protect=0.001)
    q = quantize(x, cfg)
    meta, chunks = encode_quantized(q, 3)
    assert meta["index_layout"] == "ans-wide"
    return meta, list(chunks), dequantize(q), cfg, q.rel_error


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), min_size=1, max_size=4))
def test_a_damaged_ans_wide_index_chunk_is_refused_or_decodes_to_level_values(
    wide_entry: tuple[dict[str, Any], list[bytes], torch.Tensor, QuantConfig, float],
    flips: list[tuple[int, int]],
) -> None:
    # a chunk changed past its digest (a hostile writer reseals it): the straight-into-the-
    # tensor decoder refuses it or writes level values, never reads or writes out of bounds
    meta, chunks, want, cfg, rel = wide_entry
    data = bytearray(chunks[1])
    for where, bits in flips:
        data[where % len(data)] ^= bits
    damaged = [chunks[0], bytes(data), *chunks[2:]]
    ctx = DecodeContext("t", tuple(want.shape), torch.float32, cfg, rel, values=True)
    try:
        got = get_codec("quant").decode(meta, damaged, ctx).materialize()
    except CorruptCheckpointError:
        return
    assert got.shape == want.shape
    assert set(got.unique().tolist()) <= set(want.unique().tolist())
