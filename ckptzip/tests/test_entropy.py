"""Tests of the lossless stage: round trips and every way a payload can lie about its size."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from ckptzip import entropy
from ckptzip.errors import ConfigError, CorruptCheckpointError


@given(st.binary(max_size=5000), st.integers(-7, 9))
def test_encode_decode_round_trip(data: bytes, level: int) -> None:
    payload, info = entropy.encode(data, level)
    assert info["size"] == len(data)
    assert len(payload) <= len(data)  # "raw" whenever zstd does not help
    assert entropy.decode(payload, info) == data


def test_compressible_data_uses_zstd_random_data_stays_raw() -> None:
    assert entropy.encode(bytes(10_000))[1]["enc"] == "zstd"
    assert entropy.encode(bytes(range(256)))[1]["enc"] == "raw"


def test_frame_lying_about_its_size_is_rejected() -> None:
    frame = entropy.compress(bytes(1000))
    with pytest.raises(CorruptCheckpointError, match="claims 1000"):
        entropy.decompress(frame, 999)


def test_frame_without_content_size_is_rejected() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(bytes(100))
    with pytest.raises(CorruptCheckpointError, match="claims -1"):
        entropy.decompress(frame, 100)


def test_bomb_claim_is_rejected_before_allocating() -> None:
    # a 20-byte payload cannot legitimately decode to 1 TiB: refused by arithmetic alone
    with pytest.raises(CorruptCheckpointError, match="cannot decode"):
        entropy.decompress(entropy.compress(bytes(10)), 1 << 40)


def test_trailing_bytes_and_garbage_are_rejected() -> None:
    frame = entropy.compress(b"x" * 100)
    with pytest.raises(CorruptCheckpointError):
        entropy.decompress(frame + b"\0\0", 100)
    with pytest.raises(CorruptCheckpointError):
        entropy.decompress(b"not a frame at all", 10)
    # a flipped byte inside a frame may still decode (zstd frames carry no checksum here):
    # the container's per-chunk sha256 catches that; truncation is caught by zstd itself
    truncated = entropy.compress(bytes(range(256)) * 40)[:-3]
    with pytest.raises(CorruptCheckpointError):
        entropy.decompress(truncated, 256 * 40)


@pytest.mark.parametrize(
    "info",
    [
        None,
        {},
        {"enc": "zstd"},
        {"enc": "lz4", "size": 1},
        {"enc": "raw", "size": -1},
        {"enc": "raw", "size": True},
        {"enc": "raw", "size": 5},
    ],
)
def test_bad_stage_records(info: object) -> None:
    with pytest.raises(CorruptCheckpointError):
        entropy.decode(b"abc", info)


def test_level_is_validated() -> None:
    with pytest.raises(ConfigError, match="level=30"):
        entropy.compress(b"", 30)


@given(st.binary(max_size=20000), st.sampled_from([1, 2, 4, 8]), st.integers(1, 5))
def test_planes_round_trip(data: bytes, itemsize: int, level: int) -> None:
    data = data[: len(data) - len(data) % itemsize]
    payload, info = entropy.encode(data, level, itemsize=itemsize)
    assert entropy.decode(payload, info) == data
    if itemsize > 1 and len(data) >= 4096:
        assert info["enc"] == "planes" and len(info["planes"]) == itemsize


def test_planes_compress_float_exponents() -> None:
    import torch

    x = torch.randn(1 << 16, generator=torch.Generator().manual_seed(0)) * 0.02
    raw = x.numpy().tobytes()
    plain, _ = entropy.encode(raw)
    planes, info = entropy.encode(raw, itemsize=4)
    assert len(planes) < 0.95 * len(plain)
    # low mantissa bytes are noise: stored raw, no zstd pass spent on decoding them
    assert [p["enc"] for p in info["planes"]][:2] == ["raw", "raw"]
    assert info["planes"][3]["enc"] == "zstd"


def _planes_sample() -> tuple[bytes, dict]:
    return entropy.encode(bytes(range(256)) * 64, itemsize=4)


@pytest.mark.parametrize(
    "damage",
    [
        lambda i: i.update(planes=[]),
        lambda i: i.update(planes=i["planes"][:3]),
        lambda i: i.update(size=i["size"] + 1),
        lambda i: i["planes"][0].update(length=-1),
        lambda i: i["planes"][0].update(length=10**9),
        lambda i: i["planes"][1].update(size=5),
        lambda i: i["planes"][2].update(enc="planes"),
        lambda i: i["planes"][3].update(length=i["planes"][3]["length"] - 1),
    ],
)
def test_bad_planes_records(damage: object) -> None:
    payload, info = _planes_sample()
    damage(info)  # type: ignore[operator]
    with pytest.raises(CorruptCheckpointError):
        entropy.decode(payload, info)


# -- the ANS symbol back end -----------------------------------------------------------------


@st.composite
def _segmented(draw: st.DrawFn) -> tuple[np.ndarray, list[int]]:
    alphabet = draw(st.integers(1, 256))
    symbols = draw(st.lists(st.integers(0, alphabet - 1), max_size=600))
    cuts = sorted(draw(st.lists(st.integers(0, len(symbols)), max_size=5)))
    sizes = np.diff([0, *cuts, len(symbols)]).tolist()
    return np.array(symbols, dtype=np.uint8), sizes


ANS = pytest.mark.parametrize("method", ["ans", "ans-lanes"])


@ANS
@given(_segmented(), st.booleans())
def test_ans_round_trips_with_and_without_contexts(
    method: str, case: tuple[np.ndarray, list[int]], ctx: bool
) -> None:
    symbols, sizes = case
    segments = sizes if ctx else None
    chunks, meta = entropy.encode_symbols(symbols, method, segments=segments)
    back = entropy.decode_symbols(chunks, meta, symbols.size, method, segments=segments)
    assert back.dtype == np.uint8 and np.array_equal(back, symbols)


@given(st.lists(st.integers(0, 255), max_size=3000), st.integers(0, 255))
def test_ans_wide_round_trips(symbols: list[int], mask: int) -> None:
    s = np.array(symbols, dtype=np.uint8) & mask  # narrow alphabets too
    for segments in (None, [s.size]):
        chunks, meta = entropy.encode_symbols(s, "ans-wide", segments=segments)
        back = entropy.decode_symbols(chunks, meta, s.size, "ans-wide", segments=segments)
        assert back.dtype == np.uint8 and np.array_equal(back, s)


def test_ans_wide_codes_one_context() -> None:
    with pytest.raises(ConfigError, match="one context"):
        entropy.encode_symbols(np.zeros(10, np.uint8), "ans-wide", segments=[5, 5])
    chunks, meta = entropy.encode_symbols(np.zeros(10, np.uint8), "ans-wide")
    with pytest.raises(CorruptCheckpointError, match="one context"):
        entropy.decode_symbols(chunks, meta, 10, "ans-wide", segments=[5, 5])


ANS_ONE = pytest.mark.parametrize("method", ["ans", "ans-lanes", "ans-wide"])


@ANS_ONE
def test_ans_reaches_the_order0_entropy_within_two_percent(method: str) -> None:
    rng = np.random.default_rng(0)
    p = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02])
    symbols = rng.choice(p.size, 200_000, p=p).astype(np.uint8)
    (chunk,), _ = entropy.encode_symbols(symbols, method)
    bound = entropy.order0_entropy_bits(symbols) / 8
    assert bound <= len(chunk) <= 1.02 * bound


@ANS_ONE
def test_ans_context_with_one_symbol_costs_no_coded_bits(method: str) -> None:
    symbols = np.zeros(1_000_000, np.uint8)
    (chunk,), meta = entropy.encode_symbols(symbols, method)
    # the coder's empty state at most; in lanes, each lane's length (4 bytes) too; in wide
    # lanes each block's (4 bytes)
    limit = {
        "ans": 8,
        "ans-lanes": 4 * entropy.ANS_LANES * -(-symbols.size // entropy.ANS_BLOCK),
        "ans-wide": 4 * -(-symbols.size // entropy.ANS_WIDE_BLOCK),
    }[method]
    assert len(chunk) - meta["table_bytes"] <= limit


def test_ans_segments_must_cover_the_stream() -> None:
    with pytest.raises(ConfigError, match="summing to 10"):
        entropy.encode_symbols(np.zeros(10, np.uint8), "ans", segments=[3, 3])


@ANS
@given(
    st.binary(max_size=300), st.integers(1, 256), st.integers(0, 300), st.sampled_from([1, 2, 4])
)
def test_ans_garbage_only_raises_corrupt(
    method: str, data: bytes, alphabet: int, table: int, width: int
) -> None:
    meta = {"alphabet": alphabet, "table_bytes": table, "table_width": width}
    meta.update(block=64, lanes=3)  # what the one-stream layout ignores
    try:
        out = entropy.decode_symbols([data], meta, 500, method, segments=[250, 250])
    except CorruptCheckpointError:
        return
    assert out.shape == (500,) and int(out.max()) < alphabet


WIDE = pytest.mark.parametrize(
    ("method", "segments"), [("ans-wide", None), ("ans-wide-ctx", [1000, 0, 2000])]
)
"""The wide-lane layouts, with contexts for the one that takes them (sizes of a 3000-symbol
stream)."""


@WIDE
@given(
    st.binary(max_size=400),
    st.integers(1, 256),
    st.integers(0, 300),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([32, 64, 96, 1 << 18]),
)
def test_ans_wide_garbage_only_raises_corrupt(
    method: str, segments: list[int] | None, data: bytes, alphabet: int, table: int, width: int,
    block: int,
) -> None:  # fmt: skip
    meta = {"alphabet": alphabet, "table_bytes": table, "table_width": width, "block": block}
    try:
        out = entropy.decode_symbols([data], meta, 3000, method, segments=segments)
    except CorruptCheckpointError:
        return
    assert out.shape == (3000,) and int(out.max()) < alphabet


@WIDE
def test_ans_wide_forged_table_with_garbage_words_only_raises_corrupt(
    method: str, segments: list[int] | None
) -> None:
    # a valid count table after random words: decodes to something or is refused
    rng = np.random.default_rng(1)
    symbols = rng.integers(0, 5, 3000).astype(np.uint8)
    (chunk,), meta = entropy.encode_symbols(symbols, method, segments=segments)
    table = chunk[len(chunk) - meta["table_bytes"] :]
    for trial in range(200):
        k = 60 + trial
        words = rng.integers(0, 2**16, k, dtype=np.uint64).astype("<u2").tobytes()
        body = np.array([k], "<u4").tobytes() + words
        try:
            out = entropy.decode_symbols([body + table], meta, 3000, method, segments=segments)
        except CorruptCheckpointError:
            continue
        assert out.shape == (3000,) and int(out.max()) < 5


@pytest.mark.parametrize(
    "damage",
    [
        lambda m, c: m.update(block=0),
        lambda m, c: m.update(block=48),  # not a multiple of 32
        lambda m, c: m.update(block=1 << 31),
        lambda m, c: m.update(block=32),  # more block lengths than the payload holds
        lambda m, c: m.pop("block"),
        lambda m, c: m.update(table_bytes=m["table_bytes"] + 1),  # odd words
        lambda m, c: c[2:],  # the lengths sum past the words
        lambda m, c: bytes(2) + c,  # a word no block claims
    ],
)
@WIDE
def test_ans_wide_bad_layout_is_refused(
    damage: Any, method: str, segments: list[int] | None
) -> None:
    symbols = np.random.default_rng(0).integers(0, 6, 3000).astype(np.uint8)
    (chunk,), meta = entropy.encode_symbols(symbols, method, segments=segments)
    out = damage(meta, chunk)
    with pytest.raises(CorruptCheckpointError):
        entropy.decode_symbols(
            [out if isinstance(out, bytes) else chunk], meta, 3000, method, segments=segments
        )


def test_ans_wide_ctx_payload_under_other_contexts_is_refused() -> None:
    symbols = np.random.default_rng(0).integers(0, 6, 3000).astype(np.uint8)
    (chunk,), meta = entropy.encode_symbols(symbols, "ans-wide-ctx", segments=[1000, 2000])
    with pytest.raises(CorruptCheckpointError, match="segments"):
        entropy.decode_symbols([chunk], meta, 3000, "ans-wide-ctx", segments=[1500, 1500])


@ANS
def test_ans_forged_table_with_garbage_words_only_raises_corrupt(method: str) -> None:
    # a valid count table over random coder words: decodes to something or is refused
    rng = np.random.default_rng(1)
    symbols = rng.integers(0, 5, 1000).astype(np.uint8)
    (chunk,), meta = entropy.encode_symbols(symbols, method)
    for trial in range(50):
        words = rng.integers(0, 2**32, 40 + trial, dtype=np.uint64).astype("<u4").tobytes()
        if method == "ans-lanes":  # lane lengths that add up, then the garbage
            k = (40 + trial) // 2
            lengths = np.array([k - 3, 1, 1, (40 + trial) - k - 4 - 1], "<u4").tobytes()
            words = lengths + words[16:]
        try:
            out = entropy.decode_symbols([chunk[: meta["table_bytes"]] + words], meta, 1000, method)
        except CorruptCheckpointError:
            continue
        assert out.shape == (1000,) and int(out.max()) < 5


@pytest.mark.parametrize(
    "damage",
    [
        lambda m, c: m.update(block=0),
        lambda m, c: m.update(lanes=65),
        lambda m, c: m.update(lanes=8),  # more lane lengths than the payload's words
        lambda m, c: m.update(block=1 << 31),
        lambda m, c: m.pop("lanes"),
        lambda m, c: c[:-4],  # the lane lengths sum past the words
        lambda m, c: c + bytes(4),  # a word no lane claims
    ],
)
def test_ans_lanes_bad_layout_is_refused(damage: Any) -> None:
    symbols = np.random.default_rng(0).integers(0, 6, 3000).astype(np.uint8)
    (chunk,), meta = _lanes(symbols, 1000, 2)  # 3 blocks of 2 lanes
    out = damage(meta, chunk)
    with pytest.raises(CorruptCheckpointError):
        entropy.decode_symbols([out if isinstance(out, bytes) else chunk], meta, 3000, "ans-lanes")


def _lanes(symbols: np.ndarray, block: int, lanes: int) -> tuple[list[bytes], dict[str, Any]]:
    from ckptzip import kernels

    bounds = np.array([0, symbols.size], np.int64)
    counts = kernels.ans_counts(symbols, bounds, int(symbols.max()) + 1)
    lengths, words = kernels.ans_lanes_encode(symbols, bounds, counts, block, lanes)
    table = entropy.compress(counts.astype("<u2").tobytes(), 19)
    meta = {"alphabet": int(symbols.max()) + 1, "table_bytes": len(table), "table_width": 2,
            "block": block, "lanes": lanes}  # fmt: skip
    body = lengths.astype("<u4").tobytes() + words.astype("<u4").tobytes()
    return [table + body], meta


def test_ans_lanes_hand_made_layout_round_trips() -> None:
    symbols = np.random.default_rng(0).integers(0, 6, 3000).astype(np.uint8)
    chunks, meta = _lanes(symbols, 1000, 2)
    assert np.array_equal(entropy.decode_symbols(chunks, meta, 3000, "ans-lanes"), symbols)


# -- "ans-wide-ctx": the wide lanes with one model per context (the delta codec's groups) -----


@given(_segmented())
def test_ans_wide_ctx_round_trips(case: tuple[np.ndarray, list[int]]) -> None:
    symbols, sizes = case
    for segments in (sizes, None):
        chunks, meta = entropy.encode_symbols(symbols, "ans-wide-ctx", segments=segments)
        back = entropy.decode_symbols(chunks, meta, symbols.size, "ans-wide-ctx", segments=segments)
        assert back.dtype == np.uint8 and np.array_equal(back, symbols)


def test_ans_wide_ctx_codes_each_context_near_its_entropy() -> None:
    # four contexts of different distributions, one of them a single symbol: within 1 % of
    # the entropy given the context, plus the blocks' final states; the single-symbol
    # context costs nothing
    rng = np.random.default_rng(0)
    parts = [
        rng.choice(4, 150_000, p=[0.9, 0.05, 0.03, 0.02]),
        rng.choice(8, 200_000, p=[0.05, 0.1, 0.4, 0.2, 0.1, 0.1, 0.03, 0.02]),
        np.full(300_000, 5),
        rng.choice(16, 90_000),
    ]
    symbols = np.concatenate(parts).astype(np.uint8)
    sizes = [p.size for p in parts]
    (chunk,), meta = entropy.encode_symbols(symbols, "ans-wide-ctx", segments=sizes)
    bound = sum(entropy.order0_entropy_bits(p.astype(np.uint8)) for p in parts) / 8
    words = len(chunk) - meta["table_bytes"]
    assert bound <= words <= 1.01 * bound + entropy.ans_wide_overhead(symbols.size)
    assert abs(entropy.ans_wide_ctx_size(symbols, sizes) - len(chunk)) < 0.01 * len(chunk)


@given(_segmented())
def test_rle_ans_wide_round_trips(case: tuple[np.ndarray, list[int]]) -> None:
    symbols, sizes = case  # short: both inner streams "ans", as "rle+ans" codes them
    chunks, meta = entropy.encode_symbols(symbols, "rle+ans-wide", segments=sizes)
    assert meta["runs_method"] == meta["values_method"] == "ans"
    back = entropy.decode_symbols(chunks, meta, symbols.size, "rle+ans-wide", segments=sizes)
    assert np.array_equal(back, symbols)


def test_rle_ans_wide_codes_long_inner_streams_in_the_wide_lanes() -> None:
    # a delta-like stream: 16 groups of 2^17 symbols, mostly 0; about 5 % others, so both
    # the run tokens and the other symbols pass RLE_WIDE_MIN
    rng = np.random.default_rng(3)
    sizes = [1 << 17] * 16
    symbols = np.where(rng.random(1 << 21) < 0.05, rng.integers(1, 6, 1 << 21), 0)
    symbols = symbols.astype(np.uint8)
    chunks, meta = entropy.encode_symbols(symbols, "rle+ans-wide", segments=sizes)
    assert meta["runs_method"] == meta["values_method"] == "ans-wide-ctx"
    back = entropy.decode_symbols(chunks, meta, symbols.size, "rle+ans-wide", segments=sizes)
    assert np.array_equal(back, symbols)
    size = len(chunks[0])
    plain = len(entropy.encode_symbols(symbols, "rle+ans", segments=sizes)[0][0])
    assert plain <= size <= 1.01 * plain  # the 12-bit models and the blocks' states
    estimate, _ = entropy.rle_ans_size_and_probe(symbols, sizes, probe_below=0.0, wide=True)
    assert abs(estimate - size) < 0.01 * size
    # an inner back end this version does not know is refused, not guessed
    for bad in ("ans-lanes", None, 3):
        with pytest.raises(CorruptCheckpointError, match="inner back ends"):
            entropy.decode_symbols(
                chunks, {**meta, "values_method": bad}, symbols.size, "rle+ans-wide",
                segments=sizes,
            )  # fmt: skip
