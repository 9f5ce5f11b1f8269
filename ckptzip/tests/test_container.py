"""Tests of the container: write/read round trips and manifest validation."""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from typing import Any

import pytest
import torch

import ckptzip
from ckptzip import container
from ckptzip.container import HEADER, MAGIC, Manifest, Reader, TensorEntry, chunk_refs, write
from ckptzip.errors import CorruptCheckpointError, UnsupportedFormatError


def build(chunks: list[bytes], **kw: Any) -> bytes:
    entries = tuple(
        TensorEntry(
            f"t{i}",
            (len(c),),
            "uint8",
            "exact",
            {"stage": {"enc": "raw", "size": len(c)}},
            None,
            0.0,
            (i, 1),
        )
        for i, c in enumerate(chunks)
    )
    skel = {"$": "list", "v": [{"$": "tensor", "i": i} for i in range(len(chunks))]}
    version = kw.get("version", container.FORMAT_VERSION)
    refs = chunk_refs(chunks, [container.chunk_digest(c, version) for c in chunks])
    m = Manifest(skeleton=skel, tensors=entries, chunks=refs, **kw)
    buf = io.BytesIO()
    n = write(buf, m, chunks)
    assert n == len(buf.getvalue())
    return buf.getvalue()


def test_threads_read_an_entrys_chunks_under_their_lock_and_check_them_outside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the reader is one file position, so reads take turns; the digest of each chunk is
    # computed after the lock is released, so threads decoding one file hash side by side
    held = []

    class Lock:
        def __enter__(self) -> None:
            held.append(True)

        def __exit__(self, *exc: object) -> None:
            held.append(False)

    hashed_while = []
    real = container.chunk_digest

    def digest(data: bytes, version: int = container.FORMAT_VERSION) -> str:
        hashed_while.append(held[-1] if held else None)
        return real(data, version)

    monkeypatch.setattr(container, "chunk_digest", digest)
    r = Reader(io.BytesIO(build([b"abc", b"defg"])))
    hashed_while.clear()
    assert r.tensor_chunks(r.manifest.tensors[1], lock=Lock()) == [b"defg"]
    assert held == [True, False] and hashed_while == [False]
    damaged = bytearray(build([b"abc", b"defg"]))
    damaged[-1] ^= 1
    r = Reader(io.BytesIO(bytes(damaged)))
    with pytest.raises(CorruptCheckpointError, match="chunk 1 checksum mismatch"):
        r.tensor_chunks(r.manifest.tensors[1], lock=Lock())


def test_round_trip_in_memory() -> None:
    data = build(
        [b"abc", b"", b"defg"], metadata={"step": "3"}, parent={"hash": "0" * 64, "name": "p.ckz"}
    )
    r = Reader(io.BytesIO(data))
    assert r.manifest.metadata == {"step": "3"}
    assert r.manifest.parent == {"hash": "0" * 64, "name": "p.ckz"}
    assert [c for _, c in r.iter_chunks()] == [b"abc", b"", b"defg"]
    assert r.tensor_chunks(r.manifest.tensors[2]) == [b"defg"]
    assert r.manifest.tensors[0].nbytes == 3


def rewrite_manifest(data: bytes, edit: Any) -> bytes:
    """Apply ``edit`` to the manifest JSON and re-seal it with a correct digest."""
    _, version, flags, mlen = HEADER.unpack(data[: HEADER.size])
    doc = json.loads(data[HEADER.size : HEADER.size + mlen])
    edit(doc)
    raw = json.dumps(doc).encode()
    rest = data[HEADER.size + mlen + 32 :]
    return HEADER.pack(MAGIC, version, flags, len(raw)) + raw + hashlib.sha256(raw).digest() + rest


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda d: d.update(format="zip"), "format"),
        (lambda d: d.pop("skeleton"), "missing"),
        (lambda d: d.update(parent={"hash": "0" * 64, "name": "../etc/passwd"}), "plain file"),
        (lambda d: d.update(parent={"hash": "xyz", "name": "p"}), "sha256"),
        (lambda d: d.update(metadata={"a": 1}), "metadata"),
        (lambda d: d["tensors"][0].update(shape=[-1]), "shape"),
        (lambda d: d["tensors"][0].update(shape=[2**30, 2**30]), "2\\*\\*48"),
        (lambda d: d["tensors"][0].update(dtype="float128"), "dtype"),
        (lambda d: d["tensors"][0].update(rel_error=-1), "rel_error"),
        (lambda d: d["tensors"][0].update(config=[16]), "config must be an object"),
        (lambda d: d["tensors"][0].update(chunks=[1, 1]), "start at 0"),
        (lambda d: d["tensors"][1].update(path="t0"), "share the path"),
        (lambda d: d["tensors"].pop(), "use 1 chunks"),
        (lambda d: d["chunks"][1].__setitem__(0, 1), "contiguous"),
        (lambda d: d["chunks"][1].__setitem__(1, 99), "truncated"),
        (lambda d: d["chunks"][1].__setitem__(1, 0), "padded"),
        (lambda d: d.update(skeleton={"$": "list", "v": []}), "never referenced"),
    ],
)
def test_manifest_rules(edit: Any, fragment: str) -> None:
    data = rewrite_manifest(build([b"abc", b"de"]), edit)
    with pytest.raises(CorruptCheckpointError, match=fragment):
        Reader(io.BytesIO(data))


def test_manifest_version_disagreeing_with_header() -> None:
    data = rewrite_manifest(build([b"a"]), lambda d: d.update(version=2))
    with pytest.raises(UnsupportedFormatError):
        Reader(io.BytesIO(data))


def test_chunk_checksum_is_checked_on_read() -> None:
    data = bytearray(build([b"abc"]))
    data[-1] ^= 1
    r = Reader(io.BytesIO(bytes(data)))  # the manifest is intact
    with pytest.raises(CorruptCheckpointError, match="chunk 0 checksum"):
        r.read_chunk(0)


def test_manifest_size_cap_on_write() -> None:
    big = {"k": "x" * (container.MAX_MANIFEST_BYTES + 1)}
    with pytest.raises(ValueError, match="cap"):
        write(io.BytesIO(), Manifest(skeleton=None, tensors=(), chunks=(), metadata=big), [])


@pytest.mark.parametrize("exact", [True, False])
def test_real_manifests_pass_the_parse_cost_bound_without_its_floor(exact: bool) -> None:
    from ckptzip.container import _PARSE_BYTES_PER_BYTE, _parse_cost

    sd = {f"l{i}.{k}": torch.randn(64, 64) for i in range(150) for k in ("w", "v")}
    sd.update({f"l{i}.b": torch.randn(64) for i in range(150)})
    config = ckptzip.CompressionConfig(exact=("*",) if exact else ())
    buf = io.BytesIO()
    ckptzip.save({"model": sd, "step": 3}, buf, config=config)
    buf.seek(0)
    raw = buf.getvalue()[HEADER.size : HEADER.size + Reader(buf).manifest_size]
    # with a margin: exact files (byte-plane records) are the densest real manifests
    assert _parse_cost(raw) < 0.75 * _PARSE_BYTES_PER_BYTE * len(raw)


def test_a_large_manifest_is_stored_compressed() -> None:
    small = build([b"abc", b"de"])
    assert HEADER.unpack(small[: HEADER.size])[1:3] == (container.FORMAT_VERSION, 0)  # plain
    chunks = [bytes([i]) * (i + 1) for i in range(200)]
    data = build(chunks, metadata={"step": "9"})
    _, version, flags, mlen = HEADER.unpack(data[: HEADER.size])
    assert (version, flags) == (container.FORMAT_VERSION, container.MANIFEST_ZSTD)
    plain = len(container.manifest_bytes(Reader(io.BytesIO(data)).manifest))
    assert mlen < plain / 2
    r = Reader(io.BytesIO(data))
    assert r.manifest.version == container.FORMAT_VERSION
    assert r.manifest.metadata == {"step": "9"}
    assert [c for _, c in r.iter_chunks()] == chunks


@pytest.mark.parametrize(
    ("version", "digest"),
    [
        (4, lambda c: hashlib.sha256(c).hexdigest()[: container.CHUNK_DIGEST_HEX]),
        (5, lambda c: f"{zlib.crc32(c):08x}"),
    ],
)
def test_each_version_stores_its_chunk_digests_and_checks_them(version: int, digest: Any) -> None:
    # version 4: the first 64 bits of sha256; version 5: CRC-32 (what only catches damage)
    data = build([b"abc", b"de"], version=version)
    assert HEADER.unpack(data[: HEADER.size])[1] == version
    r = Reader(io.BytesIO(data))
    assert [c.digest for c in r.manifest.chunks] == [digest(b"abc"), digest(b"de")]
    assert [c for _, c in r.iter_chunks()] == [b"abc", b"de"]
    damaged = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(CorruptCheckpointError, match="chunk 1 checksum mismatch"):
        list(Reader(io.BytesIO(damaged)).iter_chunks())
    # a digest of the other version's form is malformed, not a mismatch
    doc = json.loads(container.manifest_bytes(r.manifest))
    doc["chunks"][0][2] = digest(b"abc") + "00" * 4 if version == 5 else digest(b"abc")[:8]
    raw = json.dumps(doc).encode()
    forged = HEADER.pack(MAGIC, version, 0, len(raw)) + raw + hashlib.sha256(raw).digest()
    with pytest.raises(CorruptCheckpointError, match="chunk 0 must be"):
        Reader(io.BytesIO(forged + b"abcde"))


def test_a_manifest_is_parsed_with_the_collector_off_and_left_as_the_caller_had_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the parse's throwaway JSON tree must not set off collections (a full one visits every
    # object of a process that imported torch), and the collector's state is the caller's
    import gc

    seen = []
    real = container.Manifest.from_json

    def from_json(*args: Any, **kw: Any) -> Manifest:
        seen.append(gc.isenabled())
        return real(*args, **kw)

    monkeypatch.setattr(container.Manifest, "from_json", from_json)
    data = build([b"abc", b"de"])
    assert gc.isenabled()
    Reader(io.BytesIO(data))
    assert seen == [False] and gc.isenabled()
    doc = json.loads(container.manifest_bytes(Reader(io.BytesIO(data)).manifest))
    doc["chunks"] = "nope"
    raw = json.dumps(doc).encode()
    bad = HEADER.pack(MAGIC, container.FORMAT_VERSION, 0, len(raw)) + raw
    with pytest.raises(CorruptCheckpointError, match="chunks must be a list"):
        Reader(io.BytesIO(bad + hashlib.sha256(raw).digest() + b"abcde"))
    assert gc.isenabled()  # back on after a refused manifest too
    gc.disable()
    try:
        Reader(io.BytesIO(data))
        assert not gc.isenabled()  # the caller's choice stays
    finally:
        gc.enable()
