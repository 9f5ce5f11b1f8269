"""The lossless stage: zstandard, bounded on decode by sizes the manifest records.

A stage is a payload plus a small JSON record ``{"enc": "zstd" | "raw", "size": n}``: ``size``
is the decoded length, written by :func:`encode` and checked by :func:`decode` before and after
decompressing. The frame's own content-size field is never trusted on its own: it must be
present and equal ``size``, and ``size`` must be physically reachable from the payload length
(:data:`MAX_RATIO`), so a hostile file cannot make the reader allocate more than a legitimate
file of the same length could.

``"raw"`` is chosen when zstd would not make the payload smaller (high-entropy float mantissas),
which saves the decode time too.
"""

from __future__ import annotations

from typing import Any

import zstandard

from ckptzip.errors import ConfigError, CorruptCheckpointError

__all__ = ["MAX_RATIO", "compress", "decode", "decompress", "encode"]

# A zstd block decodes to at most 128 KiB and takes at least 4 bytes (3-byte header plus one
# RLE byte), so no valid frame expands by more than 32768x; the slack covers tiny frames.
MAX_RATIO = 32768
_SLACK = 1 << 10


def compress(data: bytes | bytearray | memoryview, level: int = 3) -> bytes:
    """One zstd frame of ``data`` with its content size recorded in the frame header.

    Examples
    --------
    >>> decompress(compress(b"abc" * 100), 300) == b"abc" * 100
    True
    """
    if not -7 <= level <= 22:
        raise ConfigError(f"zstd level={level!r} must lie in [-7, 22]")
    return zstandard.ZstdCompressor(level=level, write_content_size=True).compress(data)


def decompress(data: bytes | bytearray | memoryview, expected_size: int) -> bytes:
    """Decompress one zstd frame that must decode to exactly ``expected_size`` bytes.

    Raises
    ------
    CorruptCheckpointError
        The frame is malformed, lacks a content size, claims a size other than
        ``expected_size``, carries trailing bytes, or ``expected_size`` is larger than any
        frame of this length could produce.

    Examples
    --------
    >>> decompress(compress(bytes(1000)), 1000) == bytes(1000)
    True
    """
    if isinstance(expected_size, bool) or not isinstance(expected_size, int) or expected_size < 0:
        raise CorruptCheckpointError(f"decoded size {expected_size!r} must be an integer >= 0")
    if expected_size > len(data) * MAX_RATIO + _SLACK:
        raise CorruptCheckpointError(
            f"a zstd frame of {len(data)} bytes cannot decode to the recorded "
            f"{expected_size} bytes: the size field is corrupt"
        )
    try:
        claimed = zstandard.frame_content_size(data)
    except zstandard.ZstdError as exc:
        raise CorruptCheckpointError(f"not a zstd frame: {exc}") from exc
    if claimed != expected_size:
        raise CorruptCheckpointError(
            f"zstd frame claims {claimed} decoded bytes (-1: unknown) but the manifest records "
            f"{expected_size}: the payload is corrupt or was tampered with"
        )
    try:
        out = zstandard.ZstdDecompressor().decompress(
            data, max_output_size=expected_size, allow_extra_data=False
        )
    except zstandard.ZstdError as exc:
        raise CorruptCheckpointError(f"corrupt zstd frame: {exc}") from exc
    if len(out) != expected_size:
        raise CorruptCheckpointError(
            f"zstd frame decoded to {len(out)} bytes, the manifest records {expected_size}"
        )
    return out


def encode(data: bytes | bytearray | memoryview, level: int = 3) -> tuple[bytes, dict[str, Any]]:
    """Compress ``data`` when that helps; return the payload and its stage record.

    Examples
    --------
    >>> payload, info = encode(bytes(4096))
    >>> info["enc"], info["size"], len(payload) < 100
    ('zstd', 4096, True)
    >>> decode(payload, info) == bytes(4096)
    True
    """
    raw = bytes(data)
    packed = compress(raw, level)
    if len(packed) < len(raw):
        return packed, {"enc": "zstd", "size": len(raw)}
    return raw, {"enc": "raw", "size": len(raw)}


def decode(payload: bytes | bytearray | memoryview, info: Any) -> bytes:
    """Invert :func:`encode` given its stage record, checking every size.

    Raises
    ------
    CorruptCheckpointError
        The record is malformed or the payload disagrees with it.
    """
    if not isinstance(info, dict):
        raise CorruptCheckpointError(f"lossless stage record {info!r} must be a JSON object")
    enc, size = info.get("enc"), info.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise CorruptCheckpointError(f"lossless stage size {size!r} must be an integer >= 0")
    if enc == "zstd":
        return decompress(payload, size)
    if enc == "raw":
        if len(payload) != size:
            raise CorruptCheckpointError(
                f"raw payload has {len(payload)} bytes, the manifest records {size}"
            )
        return bytes(payload)
    raise CorruptCheckpointError(
        f"unknown lossless encoding {enc!r} (known: 'zstd', 'raw'); "
        "the file may need a newer ckptzip"
    )
