"""The ``.ckz`` file: a fixed header, a JSON manifest with its digest, checksummed chunks.

Layout (all integers little-endian; the full spec is ``FORMAT.md``)::

    offset 0   8 bytes   magic b"CKPTZIP\\0"
           8   u16       format version (1 to 5)
          10   u16       flags: 0, or (version 3) MANIFEST_ZSTD
          12   u64       manifest length M (at most MAX_MANIFEST_BYTES)
          20   M bytes   manifest, UTF-8 JSON (with MANIFEST_ZSTD: one zstd frame of it)
        20+M   32 bytes  sha256 of the manifest bytes
        52+M   ...       chunks back to back; the manifest gives each one's offset (relative
                         to 52+M), length and digest (a CRC-32 from version 5 on; before
                         it sha256, version 4 its first 64 bits), and they cover the rest
                         exactly

Reading validates before it allocates: magic, then version, then the manifest length against
the cap and the file size, the manifest digest, the JSON schema (types, ranges, shape
arithmetic, chunk tiling), and only then reads chunks, each checked against its digest.
What names content is sha256 (the manifest's digest, a delta's parent hash): it is in
:mod:`hashlib` everywhere and hardware-accelerated on current CPUs. What only catches damage,
a chunk's digest, is a CRC-32 from version 5 on (:data:`CRC_DIGESTS_FROM`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import struct
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO, Protocol

import zstandard

from ckptzip import entropy
from ckptzip._collector import collector_paused
from ckptzip.errors import CorruptCheckpointError, DecodeLimitError, UnsupportedFormatError
from ckptzip.structure import (
    DTYPES,
    MAX_NDIM,
    StandIn,
    dtype_from_name,
    shape_numel,
    skeleton_version,
    unflatten,
    view_numels,
)

__all__ = [
    "CHUNK_DIGEST_HEX",
    "CRC_DIGESTS_FROM",
    "CRC_DIGEST_HEX",
    "FORMAT_VERSION",
    "MANIFEST_ZSTD",
    "HEADER",
    "MAGIC",
    "MAX_MANIFEST_BYTES",
    "SHORT_DIGESTS_FROM",
    "DECODE_OVERHEAD",
    "ChunkRef",
    "Manifest",
    "Reader",
    "TensorEntry",
    "Writable",
    "decoded_limit",
    "manifest_bytes",
    "write",
]

MAGIC = b"CKPTZIP\0"
# The version this release writes; it reads every version up to it. Versions 1-3 differed in
# what a file held (shared storage and NumPy arrays: 2, a compressed manifest: 3); version 4
# shortened every chunk digest and version 5 makes it a CRC-32, so each file is written as
# version 5.
FORMAT_VERSION = 5
READ_VERSIONS = (1, 2, 3, 4, 5)
SHORT_DIGESTS_FROM = 4
"""From this version on, a chunk's digest in the manifest is the first :data:`CHUNK_DIGEST_HEX`
hex digits of its sha256: 64 bits catch a damaged chunk as surely as 256 (the manifest's own
digest and a delta's parent hash stay full sha256), and full digests were about half of a
compressed manifest, i.e. ~170 bytes of the per-tensor cost of a small quantized tensor."""
CHUNK_DIGEST_HEX = 16
CRC_DIGESTS_FROM = 5
"""From this version on, a chunk's digest is its CRC-32 (zlib's, the one gzip, zip and PNG
store), as :data:`CRC_DIGEST_HEX` hex digits. A chunk digest is there to catch damage (the
manifest's own digest and a delta's parent hash, which name content, stay sha256): CRC-32
catches every burst of up to 32 flipped bits and misses a random corruption once in 2^32,
and it runs about 3x as fast as sha256 here: reading and checking a keyframe's chunks went
from a sixth of its load to a tenth (``benchmarks/load_phases.py``)."""
CRC_DIGEST_HEX = 8
MANIFEST_ZSTD = 0x0001
"""Header flag (version 3): the manifest is stored as one zstd frame (content size in its
header). Manifests are mostly chunk digests, codec records and tensor names; on small models
they were 13-18 % of a compressed checkpoint, and zstd takes them to about a sixth."""
# Below this a manifest stays plain JSON (a zstd frame's own overhead eats most of the gain).
# Until version 4 this was 4096, so that small files stayed readable by version 1-2 readers.
_COMPRESS_MANIFEST_FROM = 512
_MANIFEST_LEVEL = 9
HEADER = struct.Struct("<8sHHQ")
DIGEST_SIZE = 32
MAX_MANIFEST_BYTES = 64 << 20
# Parsing JSON costs Python objects: up to 25 bytes per manifest byte for a list of empty
# objects, 5-7 for real manifests (measured with tracemalloc). A manifest whose estimated cost
# (`_parse_cost`: 7-10 per byte for real ones) exceeds this many bytes per byte plus a floor is
# refused before it is parsed; what passes costs at most ~14 bytes per byte.
_PARSE_BYTES_PER_BYTE = 16
_PARSE_FLOOR = 16 << 20
# A compressed manifest's cost is bounded by the bytes the file stores, not the ones they
# inflate to (64 MiB of "0.0," is 6 KB of zstd: 700 MB and 25 s to parse). ckptzip's own
# manifests cost at most ~750 per stored byte (10k constant tensors, whose chunks and records
# compress away; 250 for 10k random ones, 15 for a transformer's) and inflate at most ~330x
# (10k constant tensors with 1000-character names); a manifest past either bound plus a floor
# is refused, and the writer stores such a manifest plain (`_fits_compressed`).
_PARSE_BYTES_PER_STORED_BYTE = 4096
_MAX_INFLATION = 4096
_INFLATION_FLOOR = 1 << 20
# The default read limit is what this process can decode in the memory it has: decoding
# holds, besides the tensors it returns, one tensor's working copies (index stream, lookup
# pairs, decompressed bytes).
DECODE_OVERHEAD = 4
"""The default read limit is the memory available to the process divided by this. A load's
peak memory (the returned tensor included) over the bytes it returns, measured on one
20M-element near-constant tensor (``tests/test_limits.py``, the worst case: one tensor's
working copies on top of it): exact 2.2x (fp32) / 2.5x (bf16), quantized 2.2x / 3.5x."""
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX16 = re.compile(r"[0-9a-f]{16}")
_HEX8 = re.compile(r"[0-9a-f]{8}")
_HEX_RUN = re.compile(r"[0-9a-f]*")  # digests back to back (their lengths checked apart)
_ITEMSIZE = {name: dt.itemsize for name, dt in DTYPES.items()}


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _bad(msg: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(f"invalid manifest: {msg}")


@dataclass(frozen=True)
class ChunkRef:
    """One stored chunk: ``offset`` from the start of the data section, ``length``, and its
    ``digest`` in hex (:func:`chunk_digest`): a CRC-32 from version 5 on, sha256 before (read
    from a version-4 file, its first :data:`CHUNK_DIGEST_HEX` digits)."""

    offset: int
    length: int
    digest: str


@dataclass(frozen=True)
class TensorEntry:
    """One tensor's manifest entry.

    ``chunks`` is ``(first, count)``: the entry owns chunks ``first .. first+count-1``; the
    entries tile the chunk list in order. ``config`` is the JSON object of a lossy tensor's
    quantization config (``None`` when exact; the codec parses it); ``rel_error`` the measured
    relative L2 error (0 when exact, ``None`` when it could not be measured).
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    codec: str
    meta: dict[str, Any]
    config: dict[str, Any] | None
    rel_error: float | None
    chunks: tuple[int, int]

    @functools.cached_property
    def numel(self) -> int:
        # computed once: a chain restore asks each entry of ten manifests a dozen times
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Size of the decoded tensor in bytes."""
        return self.numel * _ITEMSIZE[self.dtype]

    def stand_in(self) -> StandIn:
        """A data-less stand-in of this entry, to check the skeleton's views against."""
        return StandIn(self.numel, DTYPES[self.dtype])

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "codec": self.codec,
            "config": self.config,
            "rel_error": self.rel_error,
            "chunks": list(self.chunks),
            "meta": self.meta,
        }


@dataclass(frozen=True)
class Manifest:
    """Everything in a file except the chunk bytes.

    ``version`` is the file's format version; by default the lowest that holds ``skeleton``.
    """

    skeleton: Any
    tensors: tuple[TensorEntry, ...]
    chunks: tuple[ChunkRef, ...]
    parent: dict[str, str] | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    created_by: str = ""
    version: int = 0

    def __post_init__(self) -> None:
        if not self.version:
            version = max(skeleton_version(self.skeleton), FORMAT_VERSION)
            object.__setattr__(self, "version", version)

    @property
    def data_bytes(self) -> int:
        return sum(c.length for c in self.chunks)

    def _digest(self, c: ChunkRef) -> str:
        """``c``'s digest as this version stores it."""
        if SHORT_DIGESTS_FROM <= self.version < CRC_DIGESTS_FROM:
            return c.digest[:CHUNK_DIGEST_HEX]
        return c.digest

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "ckptzip",
            "version": self.version,
            "created_by": self.created_by,
            "parent": self.parent,
            "metadata": self.metadata,
            "skeleton": self.skeleton,
            "tensors": [t.to_json() for t in self.tensors],
            "chunks": [[c.offset, c.length, self._digest(c)] for c in self.chunks],
        }

    @classmethod
    def from_json(
        cls, doc: Any, *, data_bytes: int | None = None, version: int = FORMAT_VERSION
    ) -> Manifest:
        """Validate a parsed manifest; ``data_bytes`` is the size of the data section and
        ``version`` the header's format version."""
        if not isinstance(doc, dict):
            raise _bad("the top level must be a JSON object")
        required = {"format", "version", "parent", "metadata", "skeleton", "tensors", "chunks"}
        missing = required - set(doc)
        if missing:
            raise _bad(f"missing fields {sorted(missing)}")
        if doc["format"] != "ckptzip":
            raise _bad(f"format={doc['format']!r}, expected 'ckptzip'")
        if doc["version"] != version or not _is_int(doc["version"]):
            raise UnsupportedFormatError(
                f"manifest version {doc['version']!r} disagrees with the header's {version}"
            )
        created_by = doc.get("created_by", "")
        if not isinstance(created_by, str):
            raise _bad("created_by must be a string")

        parent = doc["parent"]
        if parent is not None:
            if not isinstance(parent, dict) or set(parent) != {"hash", "name"}:
                raise _bad(f"parent={parent!r} must be null or {{'hash': ..., 'name': ...}}")
            if not isinstance(parent["hash"], str) or not _HEX64.fullmatch(parent["hash"]):
                raise _bad(f"parent hash {parent['hash']!r} is not a sha256 hex digest")
            name = parent["name"]
            if (
                not isinstance(name, str)
                or not name
                or name in (".", "..")
                or "/" in name
                or "\\" in name
                or "\0" in name
            ):
                # a name with a directory part could point a reader anywhere on the disk
                raise _bad(f"parent name {name!r} must be a plain file name")
        metadata = doc["metadata"]
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise _bad("metadata must be an object of string keys and string values")

        raw_chunks = doc["chunks"]
        if not isinstance(raw_chunks, list):
            raise _bad("chunks must be a list")
        chunks: list[ChunkRef] = []
        expected_offset = 0
        digest, width, what = _digest_form(version)
        # exact types (what json.loads makes: an int is never a bool here), and the digests'
        # hex checked in one match over all of them: a manifest holds hundreds of chunks
        for i, c in enumerate(raw_chunks):
            if (
                type(c) is not list
                or len(c) != 3
                or type(c[0]) is not int
                or type(c[1]) is not int
                or type(c[2]) is not str
            ):
                raise _bad(f"chunk {i} must be [offset, length, {what}], got {c!r}")
            offset, length, hexdigest = c
            if length < 0:
                raise _bad(f"chunk {i} has negative length {length}")
            if offset != expected_offset:
                raise _bad(
                    f"chunk {i} starts at {offset}, expected {expected_offset}: chunks must be "
                    "contiguous and non-overlapping"
                )
            expected_offset += length
            chunks.append(ChunkRef(offset, length, hexdigest))
        if not _HEX_RUN.fullmatch("".join(c.digest for c in chunks)) or not all(
            len(c.digest) == width for c in chunks
        ):
            i = next(i for i, c in enumerate(chunks) if not digest.fullmatch(c.digest))
            raise _bad(f"chunk {i} must be [offset, length, {what}], got {raw_chunks[i]!r}")
        if data_bytes is not None and expected_offset != data_bytes:
            raise CorruptCheckpointError(
                f"the chunks cover {expected_offset} bytes but the file holds {data_bytes} "
                f"after the manifest: the file is "
                f"{'truncated' if data_bytes < expected_offset else 'padded'}"
            )

        raw_tensors = doc["tensors"]
        if not isinstance(raw_tensors, list):
            raise _bad("tensors must be a list")
        tensors: list[TensorEntry] = []
        paths: set[str] = set()
        next_chunk = 0
        for i, t in enumerate(raw_tensors):
            tensors.append(_entry_from_json(i, t, next_chunk, len(chunks)))
            if tensors[-1].path in paths:
                raise _bad(f"two tensors share the path {tensors[-1].path!r}")
            paths.add(tensors[-1].path)
            next_chunk += tensors[-1].chunks[1]
        if next_chunk != len(chunks):
            raise _bad(f"the tensors use {next_chunk} chunks but {len(chunks)} are listed")
        # the skeleton is checked in full here, over data-less stand-ins of the entries (views
        # are bounds-checked against them), so `verify` covers it
        unflatten(doc["skeleton"], [t.stand_in() for t in tensors], version=version)
        return cls(
            skeleton=doc["skeleton"],
            tensors=tuple(tensors),
            chunks=tuple(chunks),
            parent=None if parent is None else dict(parent),
            metadata=dict(metadata),
            created_by=created_by,
            version=version,
        )


_ENTRY_KEYS = frozenset(
    ("path", "shape", "dtype", "codec", "config", "rel_error", "chunks", "meta")
)


def _entry_from_json(i: int, t: Any, first: int, n_chunks: int) -> TensorEntry:
    # exact types, as json.loads makes them (an int is never a bool): the checks run for
    # every entry of every manifest a restore reads
    if type(t) is not dict or t.keys() != _ENTRY_KEYS:
        raise _bad(f"tensor {i} must be an object with exactly the fields {sorted(_ENTRY_KEYS)}")
    path, shape, codec, meta, config = t["path"], t["shape"], t["codec"], t["meta"], t["config"]
    where = f"tensor {i} ({path!r})" if type(path) is str else f"tensor {i}"
    if type(path) is not str:
        raise _bad(f"{where}: path must be a string")
    if type(shape) is not list or len(shape) > MAX_NDIM:
        raise _bad(f"{where}: shape {shape!r} must be a list of at most {MAX_NDIM} ints >= 0")
    for d in shape:
        if type(d) is not int or d < 0:
            raise _bad(f"{where}: shape {shape!r} must be a list of at most {MAX_NDIM} ints >= 0")
    if shape_numel(shape) is None:  # [0, 2**70] too: torch could not make it
        raise _bad(f"{where}: shape {shape!r}: its non-zero dims make more than 2**48 elements")
    dtype_from_name(t["dtype"])
    if type(codec) is not str or not codec:
        raise _bad(f"{where}: codec must be a non-empty string")
    if type(meta) is not dict:
        raise _bad(f"{where}: meta must be an object")
    if config is not None and type(config) is not dict:
        # its fields are the codec's to check (DecodeContext.from_entry), not the container's
        raise _bad(f"{where}: config must be an object or null")
    rel = t["rel_error"]
    if rel is not None and (type(rel) not in (int, float) or not rel >= 0):
        raise _bad(f"{where}: rel_error {rel!r} must be a number >= 0 or null")
    ch = t["chunks"]
    if type(ch) is not list or len(ch) != 2 or type(ch[0]) is not int or type(ch[1]) is not int:
        raise _bad(f"{where}: chunks must be [first, count]")
    if ch[0] != first or ch[1] < 0 or first + ch[1] > n_chunks:
        raise _bad(
            f"{where}: chunks {ch!r} must start at {first} and stay within the {n_chunks} chunks"
        )
    return TensorEntry(
        path=path,
        shape=tuple(shape),
        dtype=t["dtype"],
        codec=codec,
        meta=meta,
        config=config,
        rel_error=None if rel is None else float(rel),
        chunks=(ch[0], ch[1]),
    )


def manifest_bytes(manifest: Manifest) -> bytes:
    """The manifest's canonical JSON bytes (compact, no NaN, key order as built)."""
    try:
        return json.dumps(manifest.to_json(), separators=(",", ":"), allow_nan=False).encode()
    except ValueError as exc:  # NaN/inf slipped into codec meta
        raise ValueError(f"manifest is not strict JSON: {exc}") from exc


class Writable(Protocol):
    """Anything :func:`write` can write to (a binary file, a hashing wrapper ...)."""

    def write(self, data: bytes, /) -> int: ...


def write(f: Writable, manifest: Manifest, chunks: Sequence[bytes]) -> int:
    """Write a whole file to ``f``; ``manifest.chunks`` must describe ``chunks``. Returns bytes."""
    if len(chunks) != len(manifest.chunks):
        raise ValueError("manifest and chunk list disagree")
    head = manifest_bytes(manifest)
    if len(head) > MAX_MANIFEST_BYTES:
        raise ValueError(
            f"manifest of {len(head)} bytes exceeds the format's cap of {MAX_MANIFEST_BYTES}"
        )
    version, flags = manifest.version, 0
    if len(head) >= _COMPRESS_MANIFEST_FROM:
        # the manifest names its own version, so one older than 3 is dumped again as 3
        v3 = manifest if manifest.version >= 3 else replace(manifest, version=3)
        raw = head if v3 is manifest else manifest_bytes(v3)
        packed = entropy.compress(raw, _MANIFEST_LEVEL)
        if len(packed) < len(head) and _fits_compressed(raw, len(packed)):
            head, version, flags = packed, v3.version, MANIFEST_ZSTD
    f.write(HEADER.pack(MAGIC, version, flags, len(head)))
    f.write(head)
    f.write(hashlib.sha256(head).digest())
    total = HEADER.size + len(head) + DIGEST_SIZE
    for c in chunks:
        f.write(c)
        total += len(c)
    return total


def chunk_refs(
    chunks: Sequence[bytes], digests: Sequence[str] | None = None
) -> tuple[ChunkRef, ...]:
    """Offsets, lengths and digests of chunks laid back to back, for a file of this release's
    version (``digests``: their :func:`chunk_digest`, when the caller computed them already,
    one per chunk)."""
    if digests is None:
        digests = [chunk_digest(c) for c in chunks]
    if len(digests) != len(chunks):
        raise ValueError(f"{len(digests)} digests for {len(chunks)} chunks")
    refs, offset = [], 0
    for c, digest in zip(chunks, digests, strict=True):
        refs.append(ChunkRef(offset, len(c), digest))
        offset += len(c)
    return tuple(refs)


def chunk_digest(chunk: bytes, version: int = FORMAT_VERSION) -> str:
    """The digest (hex) a :class:`ChunkRef` of a file of ``version`` records for ``chunk``:
    its CRC-32 from :data:`CRC_DIGESTS_FROM` on, else its sha256 (which version 4 stores
    shortened)."""
    if version >= CRC_DIGESTS_FROM:
        return f"{zlib.crc32(chunk):08x}"
    return hashlib.sha256(chunk).hexdigest()


def _digest_form(version: int) -> tuple[re.Pattern[str], int, str]:
    """How a file of ``version`` writes a chunk digest: its pattern, its length, its name."""
    if version >= CRC_DIGESTS_FROM:
        return _HEX8, CRC_DIGEST_HEX, "CRC-32 as 8 hex digits"
    if version >= SHORT_DIGESTS_FROM:
        return _HEX16, CHUNK_DIGEST_HEX, f"first {CHUNK_DIGEST_HEX} hex digits of sha256"
    return _HEX64, 64, "sha256 hex"


def _parse_manifest(raw: bytes, name: str, data_bytes: int, version: int) -> Manifest:
    """The validated :class:`Manifest` of a file's manifest bytes (its JSON parsed strictly)."""
    try:
        doc = json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_strict_object,
            parse_constant=_reject_constant,
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        if isinstance(exc, CorruptCheckpointError):
            raise
        raise CorruptCheckpointError(f"{name}: manifest is not valid JSON: {exc}") from None
    try:
        return Manifest.from_json(doc, data_bytes=data_bytes, version=version)
    except CorruptCheckpointError as exc:
        # the manifest's own rules know no file name; a copy cut after its manifest
        # lands here, and the caller must learn which file it was
        raise type(exc)(f"{name}: {exc}") from None


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # duplicate keys would let two readers see different manifests
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise CorruptCheckpointError(f"invalid manifest: duplicate JSON key {k!r}")
            seen.add(k)
    return out


def _reject_constant(name: str) -> Any:
    raise CorruptCheckpointError(f"invalid manifest: {name} is not JSON")


def _parse_cost(raw: bytes) -> int:
    """An estimate of the memory ``json.loads(raw)`` takes (within 0.5-3x, measured).

    Every JSON value after the first follows a ``,``, ``:`` or ``[``; objects cost a dict,
    arrays a list, value strings an object (repeated keys are shared by the parser, so strings
    that end in ``":`` are not counted). Counting bytes is C-speed and allocates nothing, so a
    hostile manifest (millions of tiny values) is refused at the cost of reading it once.
    """
    n = raw.count
    strings = max(n(b'"') // 2 - n(b'":'), 0)
    return len(raw) + 200 * n(b"{") + 64 * n(b"[") + 32 * (n(b",") + n(b":")) + 56 * strings


def _parse_limit(raw_size: int, stored: int) -> int:
    """The most a manifest of ``raw_size`` JSON bytes, stored in ``stored`` bytes (fewer when
    compressed), may cost to parse (:func:`_parse_cost`)."""
    per_byte = _PARSE_BYTES_PER_BYTE * raw_size
    return min(per_byte, _PARSE_BYTES_PER_STORED_BYTE * stored) + _PARSE_FLOOR


def _fits_compressed(raw: bytes, stored: int) -> bool:
    """Whether a reader takes ``raw`` compressed into ``stored`` bytes (else it is written
    plain, which a reader bounds by its own size)."""
    if len(raw) > _MAX_INFLATION * stored + _INFLATION_FLOOR:
        return False
    return _parse_cost(raw) <= _parse_limit(len(raw), stored)


def _inflate_manifest(raw: bytes, name: str) -> bytes:
    """The JSON of a compressed manifest: its frame must declare a size within the cap and
    within :data:`_MAX_INFLATION` times its own (plus a floor)."""
    try:
        size = zstandard.frame_content_size(raw)
    except zstandard.ZstdError as exc:
        raise CorruptCheckpointError(f"{name}: compressed manifest is not zstd: {exc}") from None
    if not 0 <= size <= MAX_MANIFEST_BYTES:
        raise CorruptCheckpointError(
            f"{name}: the compressed manifest declares {size} bytes (-1: unknown), not within "
            f"the cap of {MAX_MANIFEST_BYTES}"
        )
    if size > _MAX_INFLATION * len(raw) + _INFLATION_FLOOR:
        raise DecodeLimitError(
            f"{name}: the {len(raw)}-byte compressed manifest declares {size} bytes, "
            f"{size // len(raw)}x its size; no ckptzip writer compresses a manifest past "
            f"{_MAX_INFLATION}x (a zstd bomb)"
        )
    try:
        return entropy.decompress(raw, size)
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(f"{name}: compressed manifest: {exc}") from None


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_available() -> int | None:
    """What the process's memory cgroup (v2, then v1) still allows, if it sets a limit."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        (
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        ),
    ):
        try:
            with open(limit_file, "rb") as f:
                raw = f.read().strip()
            if raw == b"max" or int(raw) >= 1 << 60:  # v1 writes a huge number for none
                return None
            with open(usage_file, "rb") as f:
                return max(int(raw) - int(f.read().strip()), 0)
        except (OSError, ValueError):
            continue
    return None


def _available_memory() -> int | None:
    """Bytes of memory this process can still allocate, as far as the system says (``None``:
    unknown): Linux's ``MemAvailable``, capped by the cgroup's limit; elsewhere the physical
    memory not in use (``sysconf``)."""
    found = [m for m in (_meminfo_available(), _cgroup_available()) if m is not None]
    if not found and hasattr(os, "sysconf"):
        with contextlib.suppress(ValueError, OSError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return min(found) if found else None


def decoded_limit(max_bytes: int | None = None) -> int | None:
    """The most bytes a file's tensors may decode to: the caller's ``max_bytes`` (an int >= 0),
    or by default what the memory available to this process can decode (available memory /
    :data:`DECODE_OVERHEAD`; ``None``: no limit, where the system does not say).

    A file's own size plays no part: a legitimate file of constant tensors is a few hundred
    bytes for any number of elements, so no ratio to its size tells it from a hostile one;
    the codecs bound every stage by the sizes the manifest declares instead.

    Examples
    --------
    >>> decoded_limit(1 << 20)
    1048576
    """
    if max_bytes is None:
        available = _available_memory()
        return None if available is None else available // DECODE_OVERHEAD
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes={max_bytes!r} must be an int >= 0 or None")
    return max_bytes


def _format_hint(head: bytes, name: str) -> str:
    """What a file that is not ckptzip's looks like, for the bad-magic message."""
    if head[:2] == b"PK":
        return " (it looks like a torch.save zip file: use `ckptzip compress` on it)"
    # safetensors: a u64 header length, then a JSON object
    if name.rstrip("'\"").endswith(".safetensors") or head[8:10] == b'{"':
        return (
            " (it looks like a safetensors file: load it with safetensors, or "
            "`ckptzip compress` it)"
        )
    if head[:1] == b"\x80":
        return " (it looks like a pickle, which ckptzip never reads)"
    return ""


class Reader:
    """Validated read access to one open ``.ckz`` file.

    Construction reads and validates the header and manifest (nothing else); chunks are read
    on demand and checked against their digests.

    Examples
    --------
    >>> import io
    >>> m = Manifest(skeleton=None, tensors=(), chunks=())
    >>> buf = io.BytesIO(); _ = write(buf, m, [])
    >>> Reader(io.BytesIO(buf.getvalue())).manifest.skeleton is None
    True
    """

    def __init__(self, f: BinaryIO, *, name: str = "<file>") -> None:
        self._f = f
        self.name = name
        try:
            size = os.fstat(f.fileno()).st_size
        except (AttributeError, OSError, ValueError):  # in-memory buffers
            size = f.seek(0, os.SEEK_END)
        f.seek(0)
        self.file_size = size
        head = f.read(HEADER.size)
        if head[:8] != MAGIC[: len(head[:8])]:
            hint = _format_hint(head, name)
            raise CorruptCheckpointError(f"{name}: not a ckptzip file, bad magic{hint}")
        if len(head) < HEADER.size:
            raise CorruptCheckpointError(f"{name}: truncated: {size} bytes, not even a header")
        _, version, flags, mlen = HEADER.unpack(head)
        if version not in READ_VERSIONS:
            raise UnsupportedFormatError(
                f"{name}: format version {version}; this ckptzip reads versions "
                f"{', '.join(map(str, READ_VERSIONS))}"
                + (" (upgrade ckptzip)" if version > FORMAT_VERSION else "")
            )
        if flags & ~(MANIFEST_ZSTD if version >= 3 else 0):
            raise UnsupportedFormatError(
                f"{name}: header flags {flags:#06x} are not defined in format version {version}"
            )
        if mlen > MAX_MANIFEST_BYTES:
            raise CorruptCheckpointError(
                f"{name}: manifest length {mlen} exceeds the cap of {MAX_MANIFEST_BYTES} bytes"
            )
        self.data_start = HEADER.size + mlen + DIGEST_SIZE
        if self.data_start > size:
            raise CorruptCheckpointError(
                f"{name}: truncated: the manifest needs {self.data_start} bytes, "
                f"the file has {size}"
            )
        raw = f.read(mlen)
        digest = f.read(DIGEST_SIZE)
        if len(raw) != mlen or len(digest) != DIGEST_SIZE:
            raise CorruptCheckpointError(f"{name}: truncated inside the manifest")
        if hashlib.sha256(raw).digest() != digest:
            raise CorruptCheckpointError(f"{name}: manifest checksum mismatch (file is damaged)")
        if flags & MANIFEST_ZSTD:
            raw = _inflate_manifest(raw, name)
        cost = _parse_cost(raw)
        if cost > _parse_limit(len(raw), mlen):
            stored = f", stored in {mlen}," if mlen < len(raw) else ""
            raise DecodeLimitError(
                f"{name}: the {len(raw)}-byte manifest{stored} would take about {cost >> 20} "
                "MiB to parse (millions of tiny JSON values); no ckptzip writer makes such a "
                "manifest"
            )
        with collector_paused():  # the JSON tree is thrown away: see collector_paused
            self.manifest = _parse_manifest(raw, name, size - self.data_start, version)
        self.manifest_size = mlen
        self.flags = flags
        self._checked = False  # see reopen

    def reopen(self, f: BinaryIO, *, checked: bool = False) -> Reader:
        """A reader of the same bytes in ``f`` (another handle on this reader's file, or a
        buffer of a copy of its bytes), sharing this one's validated header and manifest:
        opening it parses nothing. A chain's links are read whole and checked once, then
        decoded through readers of their own bytes (:meth:`ckptzip.chains.Link.reader`).

        ``checked``: ``f`` holds bytes whose sha256 as a whole was just compared with the one
        a child file records (a parent of a delta chain), which covers every chunk: the
        reader does not hash its chunks again.
        """
        other = object.__new__(Reader)
        other.__dict__.update(self.__dict__)
        other._f = f
        other._checked = checked
        return other

    @property
    def decoded_bytes(self) -> int:
        """The bytes every tensor of the file takes decoded (from the validated manifest)."""
        return sum(e.nbytes for e in self.manifest.tensors)

    @functools.cached_property
    def view_bytes(self) -> int:
        """The bytes the skeleton's views of the entries would take as copies (a view of an
        ``expand()`` is stride 0: more elements than its entry holds)."""
        tensors = self.manifest.tensors
        return sum(n * _ITEMSIZE[tensors[i].dtype] for i, n in view_numels(self.manifest.skeleton))

    def check_limit(self, max_bytes: int | None = None) -> None:
        """Refuse, before any chunk is read, a file that decodes past :func:`decoded_limit`.

        What counts is every entry's decoded bytes plus every view's (:attr:`view_bytes`):
        a view comes back sharing its entry's memory, but what a caller does with it next
        (``.clone()``, ``.numpy().tobytes()``) costs its own elements.

        Raises
        ------
        DecodeLimitError
            The manifest declares more decoded bytes (entries and views) than the limit.
        """
        limit = decoded_limit(max_bytes)
        if limit is None:
            return
        total = self.decoded_bytes + self.view_bytes
        if total <= limit:
            return
        views = f" ({self.view_bytes} of them views of its tensors)" if self.view_bytes else ""
        if max_bytes is not None:
            raise DecodeLimitError(
                f"{self.name}: declares {total} decoded bytes{views}, over the read "
                f"limit (max_bytes={max_bytes}); if you trust this file, pass "
                f"max_bytes={total}"
            )
        raise DecodeLimitError(
            f"{self.name}: declares {total} decoded bytes{views}, over the read limit: "
            f"decoding needs about {DECODE_OVERHEAD}x that and this process has "
            f"{DECODE_OVERHEAD * limit} bytes of memory available; free memory or, if you "
            f"trust this file and know it fits, pass max_bytes={total}"
        )

    def read_chunk(self, i: int) -> bytes:
        """Chunk ``i``'s bytes, checked against its digest (as long as the file stores it;
        a reader of bytes checked whole, :meth:`reopen`, does not check each again)."""
        return self._checked_chunk(i, self._raw_chunk(i))

    def _raw_chunk(self, i: int) -> bytes:
        """Chunk ``i``'s bytes as read (the reader's one file position moves)."""
        ref = self.manifest.chunks[i]
        self._f.seek(self.data_start + ref.offset)
        data = self._f.read(ref.length)
        if len(data) != ref.length:
            raise CorruptCheckpointError(f"{self.name}: chunk {i} is truncated")
        return data

    def _checked_chunk(self, i: int, data: bytes) -> bytes:
        """``data``, chunk ``i``'s bytes, once checked against its digest (see
        :meth:`read_chunk`)."""
        if self._checked:
            return data
        ref = self.manifest.chunks[i]
        if chunk_digest(data, self.manifest.version)[: len(ref.digest)] != ref.digest:
            raise CorruptCheckpointError(
                f"{self.name}: chunk {i} checksum mismatch (the file is damaged)"
            )
        return data

    def tensor_chunks(
        self, entry: TensorEntry, *, lock: AbstractContextManager[Any] | None = None
    ) -> list[bytes]:
        """The entry's chunks, each checked (:meth:`read_chunk`). Threads sharing the reader
        pass one ``lock``: it is held while the chunks are read (the reader is one file
        position), not while they are hashed (hashlib lets other threads run meanwhile, so
        threads decoding a file check its chunks side by side)."""
        first, count = entry.chunks
        with lock if lock is not None else contextlib.nullcontext():
            raw = [self._raw_chunk(first + j) for j in range(count)]
        return [self._checked_chunk(first + j, data) for j, data in enumerate(raw)]

    def iter_chunks(self) -> Iterator[tuple[int, bytes]]:
        for i in range(len(self.manifest.chunks)):
            yield i, self.read_chunk(i)
