"""What an attacker who writes a whole file does: take a file apart and seal it again.

Shared by the malformed-file tests and the sanitizer harness (``_native_fuzz.py``, which runs
in a fresh interpreter: this module imports nothing of pytest's).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import zstandard

from ckptzip.container import FORMAT_VERSION, HEADER, MAGIC, MANIFEST_ZSTD, chunk_digest

__all__ = ["body_chunks", "reseal_chunks", "seal", "split"]


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A file's manifest as JSON (decompressed when stored so) and its data section."""
    _, _, flags, mlen = HEADER.unpack(data[: HEADER.size])
    raw = data[HEADER.size : HEADER.size + mlen]
    if flags & MANIFEST_ZSTD:
        raw = zstandard.ZstdDecompressor().decompress(raw)
    return json.loads(raw), data[HEADER.size + mlen + 32 :]


def seal(doc: Any, body: bytes, *, version: int = FORMAT_VERSION, flags: int = 0) -> bytes:
    """A file with a correct manifest digest: what an attacker who recomputes checksums makes."""
    raw = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    return HEADER.pack(MAGIC, version, flags, len(raw)) + raw + hashlib.sha256(raw).digest() + body


def reseal_chunks(doc: dict[str, Any], chunks: list[bytes]) -> bytes:
    """A file of these chunks, laid end to end, with every chunk digest recomputed."""
    off, refs = 0, []
    for c in chunks:
        refs.append([off, len(c), chunk_digest(c)])
        off += len(c)
    doc["chunks"] = refs
    return seal(doc, b"".join(chunks))


def body_chunks(doc: dict[str, Any], body: bytes) -> list[bytes]:
    """The chunks of a data section, as the manifest lays them out."""
    return [body[o : o + n] for o, n, _ in doc["chunks"]]
