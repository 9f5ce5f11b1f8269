"""Malformed and hostile files: one hand-made file per parsing rule, then fuzzing.

Every case must end in a specific :class:`CkptzipError` subclass: never another exception,
a hang, a large allocation, executed code, or tensors that differ from what was saved.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import pickle
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import zstandard
from _attack import scaled
from _crafted import body_chunks, reseal_chunks, seal, split
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckptzip
from ckptzip import entropy
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.container import (
    FORMAT_VERSION,
    HEADER,
    MAGIC,
    MAX_MANIFEST_BYTES,
)
from ckptzip.errors import (
    CkptzipError,
    CorruptCheckpointError,
    DecodeLimitError,
    DecodeMemoryError,
    UnsupportedFormatError,
    UnsupportedValueError,
)
from ckptzip.structure import flatten

CANARY = Path(os.environ.get("TMPDIR", "/tmp")) / "ckptzip-canary-must-not-exist"


class Canary:
    """Unpickling this would create the canary file: proof that a pickle was executed."""

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (open, (str(CANARY), "w"))


PICKLE = pickle.dumps(Canary())


def sample_obj() -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    return {
        "model": {"w": torch.randn(64, 80, generator=g), "b": torch.arange(10.0)},
        "ids": torch.arange(6, dtype=torch.int64),
        "epoch": 2,
    }


CONFIG = ckptzip.CompressionConfig(min_numel=1000)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    p = tmp_path_factory.mktemp("good") / "c.ckz"
    ckptzip.save(sample_obj(), p, config=CONFIG)
    return p.read_bytes()


@pytest.fixture(scope="module")
def reference(good: bytes, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    p = tmp_path_factory.mktemp("ref") / "c.ckz"
    p.write_bytes(good)
    return leaf_bytes(ckptzip.load(p))


def leaf_bytes(obj: Any) -> dict[str, bytes]:
    _, leaves = flatten(obj)
    return {path: tensor_to_bytes(t) for path, t in leaves}


_FUZZ_DIR = Path(tempfile.mkdtemp(prefix="ckptzip-fuzz-"))


def decode_bytes(data: bytes) -> Any:
    """Load ``data`` as a file (one scratch path reused across fuzz examples)."""
    return load_bytes(data, _FUZZ_DIR)


def load_bytes(data: bytes, tmp: Path, **kw: Any) -> Any:
    p = tmp / "x.ckz"
    p.write_bytes(data)
    return ckptzip.load(p, **kw)


# -- one file per rule ---------------------------------------------------------------------


def test_bad_magic(good: bytes, tmp_path: Path) -> None:
    with pytest.raises(CorruptCheckpointError, match="bad magic"):
        load_bytes(b"NOTCKPT\0" + good[8:], tmp_path)


def test_torch_save_file_is_refused_not_unpickled(tmp_path: Path) -> None:
    buf = io.BytesIO()
    torch.save({"x": Canary()}, buf)
    with pytest.raises(CorruptCheckpointError, match=r"torch\.save zip"):
        load_bytes(buf.getvalue(), tmp_path)
    with pytest.raises(CorruptCheckpointError, match="pickle"):
        load_bytes(PICKLE, tmp_path)
    assert not CANARY.exists()


@pytest.mark.parametrize("version", [0, FORMAT_VERSION + 1, 65535])
def test_bad_version(good: bytes, tmp_path: Path, version: int) -> None:
    doc, body = split(good)
    with pytest.raises(UnsupportedFormatError, match=f"version {version}"):
        load_bytes(seal(doc, body, version=version), tmp_path)


def test_unknown_flags(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    with pytest.raises(UnsupportedFormatError, match="flags"):
        load_bytes(seal(doc, body, flags=2), tmp_path)


def test_manifest_flag_needs_version_3_and_other_flags_stay_undefined(
    good: bytes, tmp_path: Path
) -> None:
    doc, body = split(good)
    packed = entropy.compress(json.dumps({**doc, "version": 2}).encode())
    with pytest.raises(UnsupportedFormatError, match="flags 0x0001"):
        load_bytes(seal(packed, body, version=2, flags=1), tmp_path)
    with pytest.raises(UnsupportedFormatError, match="flags 0x0003"):
        load_bytes(seal(packed, body, version=3, flags=3), tmp_path)


@pytest.mark.parametrize(
    ("manifest", "match"),
    [
        (b"not zstd at all", "not zstd"),
        # a frame that does not say how large it decodes (streamed): refused before inflating
        (zstandard.ZstdCompressor(write_content_size=False).compress(b"{}"), "declares -1"),
        (entropy.compress(b"{}")[:-3], "compressed manifest"),  # truncated frame
        (entropy.compress(bytes(MAX_MANIFEST_BYTES + 1)), "not within the cap"),
    ],
)
def test_damaged_compressed_manifest(
    good: bytes, tmp_path: Path, manifest: bytes, match: str
) -> None:
    _, body = split(good)
    with pytest.raises(CorruptCheckpointError, match=match):
        load_bytes(seal(manifest, body, version=3, flags=1), tmp_path)


def test_compressed_manifest_round_trips(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    packed = entropy.compress(json.dumps(doc).encode())
    assert leaf_bytes(load_bytes(seal(packed, body, flags=1), tmp_path))


def test_oversized_header(good: bytes, tmp_path: Path) -> None:
    head = HEADER.pack(MAGIC, 1, 0, MAX_MANIFEST_BYTES + 1)
    with pytest.raises(CorruptCheckpointError, match="exceeds the cap"):
        load_bytes(head + good[HEADER.size :], tmp_path)
    huge = HEADER.pack(MAGIC, 1, 0, 2**64 - 1)
    with pytest.raises(CorruptCheckpointError, match="exceeds the cap"):
        load_bytes(huge + good[HEADER.size :], tmp_path)
    longer = HEADER.pack(MAGIC, 1, 0, len(good))  # under the cap, beyond the file
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        load_bytes(longer + good[HEADER.size :], tmp_path)


def test_manifest_checksum(good: bytes, tmp_path: Path) -> None:
    data = bytearray(good)
    data[HEADER.size + 5] ^= 0x20
    with pytest.raises(CorruptCheckpointError, match="manifest checksum"):
        load_bytes(bytes(data), tmp_path)


def test_overlapping_chunks(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    doc["chunks"][1][0] -= 1  # starts inside chunk 0
    with pytest.raises(CorruptCheckpointError, match="contiguous and non-overlapping"):
        load_bytes(seal(doc, body), tmp_path)


def test_short_chunks(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    doc["chunks"][-1][1] -= 1  # the chunks no longer cover the file
    with pytest.raises(CorruptCheckpointError, match="padded"):
        load_bytes(seal(doc, body), tmp_path)
    doc, body = split(good)
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        load_bytes(seal(doc, body[:-1]), tmp_path)


def test_chunk_checksum(good: bytes, tmp_path: Path) -> None:
    data = bytearray(good)
    data[-3] ^= 0x01
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
        load_bytes(bytes(data), tmp_path)


def test_every_truncation(good: bytes, tmp_path: Path) -> None:
    step = max(1, len(good) // 400)
    for n in [*range(0, 64), *range(64, len(good), step), len(good) - 1]:
        with pytest.raises(CorruptCheckpointError):
            load_bytes(good[:n], tmp_path)


def test_a_file_cut_or_padded_past_its_manifest_is_named(good: bytes, tmp_path: Path) -> None:
    # a copy interrupted half-way keeps the whole manifest: the error must still say which
    # file, as the ones for a cut header or manifest do
    for data, what in ((good[: len(good) - 100], "truncated"), (good + b"junk", "padded")):
        with pytest.raises(CorruptCheckpointError, match=what) as info:
            load_bytes(data, tmp_path)
        assert str(tmp_path / "x.ckz") in str(info.value), info.value


def test_flipped_bytes_at_sampled_offsets(good: bytes, tmp_path: Path) -> None:
    step = max(1, len(good) // 500)
    for off in range(0, len(good), step):
        data = bytearray(good)
        data[off] ^= 1 << (off % 8)
        with pytest.raises(CorruptCheckpointError):
            load_bytes(bytes(data), tmp_path)


@settings(
    max_examples=scaled(200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_any_burst_of_up_to_32_flipped_bits_in_the_data_is_caught(
    good: bytes, tmp_path: Path, data: st.DataObject
) -> None:
    # format version 5 checks each chunk by its CRC-32, which catches every burst of up to
    # 32 flipped bits (a run of damaged bits in one place, what storage and transfer errors
    # make): never a wrong tensor, whatever the burst's place and pattern
    _, body = split(good)
    start = len(good) - len(body)
    bits = data.draw(st.integers(1, 32), label="burst length")
    first = data.draw(st.integers(0, 8 * len(body) - bits), label="first bit")
    pattern = data.draw(st.integers(0, (1 << bits) - 1), label="pattern") | 1 | 1 << (bits - 1)
    damaged = bytearray(good)
    for k in range(bits):
        if pattern >> k & 1:
            bit = 8 * start + first + k
            damaged[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(CorruptCheckpointError, match="checksum mismatch"):
        load_bytes(bytes(damaged), tmp_path)


def test_pickle_payload_in_every_bytes_field(good: bytes, tmp_path: Path) -> None:
    """A pickle where each chunk was, checksums recomputed: rejected, never unpickled."""
    doc, body = split(good)
    chunks = body_chunks(doc, body)
    for i in range(len(chunks)):
        evil = list(chunks)
        evil[i] = PICKLE
        with pytest.raises(CorruptCheckpointError):
            load_bytes(reseal_chunks(json.loads(json.dumps(doc)), evil), tmp_path)
    # as the manifest itself, and as a structure node
    with pytest.raises(CorruptCheckpointError, match="not valid JSON"):
        load_bytes(seal(PICKLE, body), tmp_path)
    doc["skeleton"]["v"].append({"$": "pickle", "v": PICKLE.hex()})
    doc["skeleton"]["k"].append("evil")
    with pytest.raises(CorruptCheckpointError, match="unknown node tag"):
        load_bytes(seal(doc, body), tmp_path)
    assert not CANARY.exists()


def _exact_entry(doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    for t in doc["tensors"]:
        if t["codec"] == "exact" and t["path"] == "model/b":
            return t["chunks"][0], t
    raise AssertionError("no exact entry")


def test_zstd_frame_lying_about_its_size(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    chunks = body_chunks(doc, body)
    ci, entry = _exact_entry(doc)
    # a frame of 41 bytes that says 40 in the manifest and the shape
    chunks[ci] = entropy.compress(bytes(41))
    entry["meta"]["stage"] = {"enc": "zstd", "size": 40}
    with pytest.raises(CorruptCheckpointError, match="claims 41"):
        load_bytes(reseal_chunks(doc, chunks), tmp_path)


def test_zstd_bomb_is_rejected_before_decompressing(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    chunks = body_chunks(doc, body)
    ci, entry = _exact_entry(doc)
    bomb = entropy.compress(bytes(64 << 20))  # 64 MiB of zeros in a few KB
    assert len(bomb) < 64 << 10
    chunks[ci] = bomb
    # manifest honest about the frame but not about the tensor: refused by the shape check
    entry["meta"]["stage"] = {"enc": "zstd", "size": 64 << 20}
    with pytest.raises(CorruptCheckpointError, match="disagrees with its float32 shape"):
        load_bytes(reseal_chunks(doc, chunks), tmp_path)
    # shape enlarged to match: over the read limit, refused before any chunk is read
    entry["shape"] = [1 << 40]
    entry["meta"]["stage"] = {"enc": "zstd", "size": 4 << 40}
    with pytest.raises(DecodeLimitError, match="over the read limit"):
        load_bytes(reseal_chunks(doc, chunks), tmp_path)
    # and with the limit lifted, still refused before any chunk is read: the chunk cannot
    # physically hold that many elements (no zstd frame expands more than 32768x)
    with pytest.raises(CorruptCheckpointError, match="can hold at most"):
        load_bytes(reseal_chunks(doc, chunks), tmp_path, max_bytes=1 << 50)
    with pytest.raises(CorruptCheckpointError, match="can hold at most"):
        ckptzip.verify(tmp_path / "x.ckz", max_bytes=1 << 50)
    # the stage bound inside the codec still stands behind it (the frame lies about its size)
    entry["shape"] = [len(bomb) * 4096]
    entry["meta"]["stage"] = {"enc": "zstd", "size": len(bomb) * 4096 * 4}
    with pytest.raises(CorruptCheckpointError, match="claims"):
        load_bytes(reseal_chunks(doc, chunks), tmp_path, max_bytes=1 << 50)


def test_huge_shape_is_refused_by_arithmetic(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    doc["tensors"][0]["shape"] = [2**40, 2**40, 2**40]
    with pytest.raises(CorruptCheckpointError, match="2\\*\\*48"):
        load_bytes(seal(doc, body), tmp_path)


def test_deeply_nested_manifest_json(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    raw = json.dumps(doc).encode()
    deep = raw[:-1] + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(CorruptCheckpointError):
        load_bytes(seal(deep, body), tmp_path)


def test_duplicate_json_keys(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    raw = json.dumps(doc).encode()
    dup = b'{"version":1,' + raw[1:]
    with pytest.raises(CorruptCheckpointError, match="duplicate JSON key"):
        load_bytes(seal(dup, body), tmp_path)


def test_parent_name_cannot_escape_the_directory(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    doc["parent"] = {"hash": "0" * 64, "name": "../../etc/passwd"}
    with pytest.raises(CorruptCheckpointError, match="plain file name"):
        load_bytes(seal(doc, body), tmp_path)


def test_unknown_codec(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    doc["tensors"][0]["codec"] = "pickle"
    with pytest.raises(UnsupportedFormatError, match="unknown codec id 'pickle'"):
        load_bytes(seal(doc, body), tmp_path)


# -- fuzzing -------------------------------------------------------------------------------


@settings(max_examples=scaled(300), deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    with pytest.raises(CkptzipError):
        decode_bytes(data)


@settings(max_examples=scaled(150), deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_after_a_valid_header(data: bytes) -> None:
    head = HEADER.pack(MAGIC, 1, 0, len(data) // 2)
    with pytest.raises(CkptzipError):
        decode_bytes(head + data)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10**6), st.integers(1, 64)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.none()),
)


def mutate(data: bytes, ops: list[Any]) -> bytes:
    buf = bytearray(data)
    for kind, where, arg in ops:
        i = where % max(1, len(buf))
        if kind == "flip" and buf:
            buf[i] ^= arg
        elif kind == "cut":
            del buf[i : i + arg]
        elif kind == "insert":
            buf[i:i] = arg
        elif kind == "truncate":
            del buf[i:]
    return bytes(buf)


@settings(
    max_examples=scaled(200),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(mutation, min_size=1, max_size=3))
def test_mutated_real_file(good: bytes, reference: dict[str, bytes], ops: list[Any]) -> None:
    data = mutate(good, ops)
    try:
        back = decode_bytes(data)
    except CkptzipError:
        return
    assert data == good  # only an unchanged file may load, and then it loads identically
    assert leaf_bytes(back) == reference


def _jitter(value: Any, draw: Any) -> Any:
    """Replace one JSON value with a hostile one of a random kind."""
    return draw(
        st.one_of(
            st.integers(-(2**70), 2**70),
            st.floats(allow_nan=False),
            st.text(max_size=6),
            st.none(),
            st.booleans(),
            st.just([]),
            st.just({}),
            st.just([value, value]) if not isinstance(value, dict) else st.just(value),
        )
    )


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(node, dict):
        out = [path] if path else []
        for k, v in node.items():
            out += _leaves(v, (*path, k))
        return out
    if isinstance(node, list):
        out = [path]
        for i, v in enumerate(node):
            out += _leaves(v, (*path, i))
        return out
    return [path]


def _edit_leaves(doc: Any, data: Any) -> None:
    """Replace one to three leaves of a manifest with hostile values, in place."""
    paths = _leaves(doc)
    for _ in range(data.draw(st.integers(1, 3))):
        where = data.draw(st.sampled_from(paths))
        try:  # an earlier edit may have removed or replaced the way to this place
            parent = doc
            for k in where[:-1]:
                parent = parent[k]
            parent[where[-1]] = _jitter(parent[where[-1]], data.draw)
        except (KeyError, IndexError, TypeError):
            continue


@settings(
    max_examples=scaled(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_resealed_manifest_edits(good: bytes, data: Any) -> None:
    """An attacker who recomputes the manifest digest: edits of any field fail cleanly."""
    doc, body = split(good)
    _edit_leaves(doc, data)
    try:
        back = decode_bytes(seal(doc, body))
    except CkptzipError:
        return
    # accepted (the edit kept the file valid): every tensor is what the manifest declares
    declared = sorted((tuple(t["shape"]), t["dtype"]) for t in doc["tensors"])
    got = sorted((tuple(t.shape), str(t.dtype).removeprefix("torch.")) for _, t in flatten(back)[1])
    assert got == declared


def test_canary_never_appeared() -> None:
    assert not CANARY.exists()


@pytest.fixture(scope="module")
def delta_pair() -> tuple[Path, bytes]:
    """A parent and a delta child in one scratch directory (the child is fuzzed in place)."""
    d = Path(tempfile.mkdtemp(prefix="ckptzip-fuzz-delta-"))
    obj = sample_obj()
    ckptzip.save(obj, d / "parent.ckz", config=CONFIG)
    obj["model"]["w"] = obj["model"]["w"] + 0.001
    ckptzip.save(obj, d / "child.ckz", config=CONFIG, parent=d / "parent.ckz")
    return d, (d / "child.ckz").read_bytes()


@settings(
    max_examples=scaled(150),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.data())
def test_resealed_delta_child_edits(delta_pair: tuple[Path, bytes], data: Any) -> None:
    """The same attacker against a delta file whose parent is present."""
    d, good_child = delta_pair
    doc, body = split(good_child)
    _edit_leaves(doc, data)
    target = d / "edited.ckz"
    target.write_bytes(seal(doc, body))
    try:
        back = ckptzip.load(target)
    except CkptzipError:
        return
    declared = sorted((tuple(t["shape"]), t["dtype"]) for t in doc["tensors"])
    got = sorted((tuple(t.shape), str(t.dtype).removeprefix("torch.")) for _, t in flatten(back)[1])
    assert got == declared


# -- bombs: small files with honest headers and valid checksums that declare huge tensors ----


def _zeros_frame(n: int) -> bytes:
    """One zstd frame of ``n`` zero bytes (content size recorded), built without holding them."""
    out = io.BytesIO()
    block = bytes(1 << 20)
    with zstandard.ZstdCompressor(write_content_size=True).stream_writer(
        out, size=n, closefd=False
    ) as w:
        for start in range(0, n, len(block)):
            w.write(block[: min(len(block), n - start)])
    return out.getvalue()


def quant_bomb(numel: int) -> bytes:
    """A constant tensor's file with its shape and index stream grown to ``numel`` elements:
    every size in it is honest (one level, one bit per index, a real zstd frame of zeros)."""
    buf = io.BytesIO()
    ckptzip.save({"w": torch.full((5000,), 0.5)}, buf, config=CONFIG)
    doc, body = split(buf.getvalue())
    chunks = body_chunks(doc, body)
    (entry,) = doc["tensors"]
    first = entry["chunks"][0]
    assert entry["codec"] == "quant" and entry["meta"]["bits"] == 1
    entry["shape"] = [numel]
    entry["meta"]["index_layout"] = "packed"  # whatever the writer chose for 5000 indices
    entry["meta"]["index_stage"] = {"enc": "zstd", "size": (numel + 7) // 8}
    chunks[first + 1] = _zeros_frame((numel + 7) // 8)
    return reseal_chunks(doc, chunks)


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {"512MiB": quant_bomb(1 << 27), "16GiB": quant_bomb(1 << 32)}


def _refused_at_small_memory(
    data: bytes, tmp: Path, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> None:
    """Load (and verify, with a limit of the caller's) must refuse ``data`` before reading any
    chunk, at bounded memory."""
    p = tmp / "bomb.ckz"
    p.write_bytes(data)

    def no_chunks(self: Any, i: int) -> bytes:
        raise AssertionError("a chunk was read before the size was checked")

    monkeypatch.setattr(ckptzip.container.Reader, "read_chunk", no_chunks)
    calls: list[Callable[..., Any]] = [ckptzip.load, ckptzip.read_quantized]
    calls.append(ckptzip.verify if kw else functools.partial(ckptzip.verify, decode=True))
    for call in calls:
        tracemalloc.start()
        try:
            with pytest.raises(DecodeLimitError, match="over the read limit"):
                call(p, **kw)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 4 << 20, (call, peak)


def test_a_1409_byte_file_of_512_mib_is_refused_where_it_does_not_fit(
    bombs: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bombs["512MiB"]
    assert len(data) < 2048  # the issue had 1,409 bytes (compact JSON; this one has spaces)
    # every size in it is honest (a constant tensor's file is that small), so only memory
    # or the caller refuses it: here a process with 1 GiB available, a quarter of it decodable
    monkeypatch.setattr(ckptzip.container, "_available_memory", lambda: 1 << 30)
    _refused_at_small_memory(data, tmp_path, monkeypatch)
    # an explicit limit is the caller's: a smaller one refuses smaller files too
    _refused_at_small_memory(data, tmp_path, monkeypatch, max_bytes=100)


def test_quant_entries_are_bounded_by_their_index_chunk(
    bombs: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc, body = split(bombs["512MiB"])
    n_bytes = doc["chunks"][doc["tensors"][0]["chunks"][0] + 1][1]
    # one bit per element through zstd: at most 8 * (32768 * n + slack) elements
    doc["tensors"][0]["shape"] = [8 * (32768 * n_bytes + 16 * 1024) + 1]
    p = tmp_path / "x.ckz"
    p.write_bytes(seal(doc, body))
    monkeypatch.setattr(
        ckptzip.container.Reader, "read_chunk", lambda *a: pytest.fail("a chunk was read")
    )
    for call in (ckptzip.load, ckptzip.verify):
        with pytest.raises(CorruptCheckpointError, match="can hold at most"):
            call(p, max_bytes=1 << 62)


def test_a_17_kb_file_declaring_16_gib_is_refused(
    bombs: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = bombs["16GiB"]
    assert len(data) < 20_000
    # on a machine with 24 GiB free: decoding 16 GiB needs about 4x that
    monkeypatch.setattr(ckptzip.container, "_available_memory", lambda: 24 << 30)
    _refused_at_small_memory(data, tmp_path, monkeypatch)


def test_the_limit_lifted_loads_what_the_file_honestly_holds(tmp_path: Path) -> None:
    # the same construction at 8M elements (32 MiB) over the 64 MiB floor: decodes for real
    data = quant_bomb(1 << 23)
    x = load_bytes(data, tmp_path, max_bytes=None)["w"]
    assert x.shape == (1 << 23,) and float(x[-1]) == 0.5
    with pytest.raises(DecodeLimitError, match="max_bytes=33554432"):
        load_bytes(data, tmp_path, max_bytes=1 << 20)


def test_a_manifest_of_tiny_ignored_values_is_refused_before_parsing(
    good: bytes, tmp_path: Path
) -> None:
    doc, body = split(good)
    raw = json.dumps(doc).encode()
    n = (MAX_MANIFEST_BYTES - len(raw) - 64) // 3
    hostile = raw[:-1] + b',"ignored":[' + b"{}," * n + b"{}]}"
    assert len(hostile) <= MAX_MANIFEST_BYTES
    p = tmp_path / "x.ckz"
    p.write_bytes(seal(hostile, body))
    del hostile
    tracemalloc.start()
    try:
        with pytest.raises(DecodeLimitError, match="to parse"):
            ckptzip.verify(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_MANIFEST_BYTES  # the bytes read (and their digest), no JSON objects
    # a few ignored fields of ordinary density are still ignored, as version 1 promises
    ok = raw[:-1] + b',"ignored":' + json.dumps({"notes": ["x"] * 100}).encode() + b"}"
    assert ckptzip.verify(io.BytesIO(seal(ok, body))).tensors


def test_a_huge_integer_is_a_typed_error_both_ways(good: bytes, tmp_path: Path) -> None:
    doc, body = split(good)
    raw = json.dumps(doc).encode()
    huge = raw[:-1] + b',"ignored":' + b"9" * 5000 + b"}"
    with pytest.raises(CorruptCheckpointError, match="not valid JSON"):
        load_bytes(seal(huge, body), tmp_path)
    # saving one fails at once, before any tensor is encoded, and writes nothing
    out = tmp_path / "big.ckz"
    with pytest.raises(UnsupportedValueError, match="bits"):
        ckptzip.save({"w": torch.randn(1 << 20), "n": 10**5000}, out)
    assert not out.exists()


@pytest.mark.parametrize(
    "failure",
    [
        MemoryError("numpy: Unable to allocate 16.0 GiB"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory"
        ),
    ],
)
def test_out_of_memory_while_decoding_is_typed(
    good: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception
) -> None:
    from ckptzip import quantize

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise failure

    monkeypatch.setattr(quantize, "dequantize", boom)
    with pytest.raises(DecodeMemoryError, match="out of memory") as info:
        load_bytes(good, tmp_path)
    assert isinstance(info.value, MemoryError) and info.value.__cause__ is failure
    # other runtime errors keep their meaning
    monkeypatch.setattr(quantize, "dequantize", lambda *a, **k: (_ for _ in ()).throw(KeyError))
    with pytest.raises(KeyError):
        load_bytes(good, tmp_path)


@settings(
    max_examples=scaled(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    numel=st.integers(1, 1 << 48),
    stage=st.one_of(st.none(), st.integers(0, 1 << 62)),
    limit=st.one_of(st.none(), st.integers(0, 1 << 40)),
)
def test_fuzzed_bomb_sizes_never_allocate_past_the_limit(
    bombs: dict[str, bytes], numel: int, stage: int | None, limit: int | None
) -> None:
    doc, body = split(bombs["512MiB"])
    entry = doc["tensors"][0]
    entry["shape"] = [numel]
    if stage is not None:
        entry["meta"]["index_stage"]["size"] = stage
    # a process with 256 MiB available: the default limit is 64 MiB
    small = mock.patch.object(ckptzip.container, "_available_memory", lambda: 256 << 20)
    with small:
        cap = ckptzip.container.decoded_limit(limit)
    assert cap is not None
    tracemalloc.start()
    try:
        with contextlib.suppress(CkptzipError), small:
            decode_bytes_with(seal(doc, body), max_bytes=limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # whatever is decoded stays within the limit (index bytes + float64 levels per element)
    assert peak < 16 * min(cap, 4 * numel) + (8 << 20)


def decode_bytes_with(data: bytes, **kw: Any) -> Any:
    return load_bytes(data, _FUZZ_DIR, **kw)


_SHARED = (Path(__file__).parent / "golden" / "v2_shared.ckz").read_bytes()


@settings(max_examples=scaled(150), deadline=None)
@given(st.data())
def test_resealed_edits_of_shared_storage_and_views(data: Any) -> None:
    """Edits of a version-2 file (views, repeated references): a clean error, or views that
    stay inside their entry and share its storage."""
    doc, body = split(_SHARED)
    _edit_leaves(doc, data)
    try:
        back = decode_bytes(seal(doc, body, version=2))
    except CkptzipError:
        return
    stack = [back]
    while stack:  # every tensor of the result, views included, lies inside its storage
        x = stack.pop()
        if isinstance(x, dict):
            stack.extend(x.values())
        elif isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, torch.Tensor) and x.numel():
            dims = zip(x.shape, x.stride(), strict=True)
            reach = x.storage_offset() + sum((n - 1) * st for n, st in dims)
            assert (reach + 1) * x.element_size() <= x.untyped_storage().nbytes()
