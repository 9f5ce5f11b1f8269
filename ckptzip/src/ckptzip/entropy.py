"""The lossless stage: zstandard, bounded on decode by sizes the manifest records.

A stage is a payload plus a small JSON record ``{"enc": "zstd" | "raw", "size": n}``: ``size``
is the decoded length, written by :func:`encode` and checked by :func:`decode` before and after
decompressing. The frame's own content-size field is never trusted on its own: it must be
present and equal ``size``, and ``size`` must be physically reachable from the payload length
(:data:`MAX_RATIO`), so a hostile file cannot make the reader allocate more than a legitimate
file of the same length could.

``"raw"`` is chosen when zstd would not make the payload smaller (high-entropy float mantissas),
which saves the decode time too; a sample is tried first, so incompressible data costs no
full zstd pass.

``"planes"`` (for elements wider than one byte, e.g. fp32 tensors stored exactly) splits the
bytes into ``itemsize`` planes (byte ``j`` of every element, in order) and codes each plane on
its own as above: the sign/exponent plane of floats compresses well, the low mantissa planes
do not and stay raw. On fp32 weights this takes zstd from about 1.08x to 1.17x, on bf16 from
1.28x to 1.41x on Gaussian weights (the lossless-stage table of ``benchmarks/format.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import zstandard

from ckptzip.errors import ConfigError, CorruptCheckpointError

__all__ = ["MAX_RATIO", "compress", "decode", "decompress", "encode"]

# Plane splitting pays off only once the per-plane frame overhead is amortised.
_PLANES_MIN = 4096
_MAX_PLANES = 16
# A sample this long decides whether a large payload is worth a full zstd pass.
_SAMPLE = 1 << 16
_SAMPLE_GAIN = 0.98

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


def _encode_one(raw: bytes | memoryview, level: int) -> tuple[bytes, dict[str, Any]]:
    if len(raw) >= 4 * _SAMPLE:
        mid = len(raw) // 2
        sample = bytes(raw[:_SAMPLE]) + bytes(raw[mid : mid + _SAMPLE])
        if len(compress(sample, level)) >= _SAMPLE_GAIN * len(sample):
            return bytes(raw), {"enc": "raw", "size": len(raw)}
    packed = compress(raw, level)
    if len(packed) < len(raw):
        return packed, {"enc": "zstd", "size": len(raw)}
    return bytes(raw), {"enc": "raw", "size": len(raw)}


def encode(
    data: bytes | bytearray | memoryview, level: int = 3, *, itemsize: int = 1
) -> tuple[bytes, dict[str, Any]]:
    """Compress ``data`` when that helps; return the payload and its stage record.

    With ``itemsize > 1`` (``data`` is elements of that many bytes) a large payload is coded
    as byte planes (``"planes"``).

    Examples
    --------
    >>> payload, info = encode(bytes(4096))
    >>> info["enc"], info["size"], len(payload) < 100
    ('zstd', 4096, True)
    >>> decode(payload, info) == bytes(4096)
    True
    >>> payload, info = encode(bytes(range(256)) * 64, itemsize=4)
    >>> info["enc"], len(info["planes"]), decode(payload, info) == bytes(range(256)) * 64
    ('planes', 4, True)
    """
    raw = bytes(data)
    if 1 < itemsize <= _MAX_PLANES and len(raw) >= _PLANES_MIN and len(raw) % itemsize == 0:
        # one transposing copy: copying each strided plane alone is several times slower
        planes = np.ascontiguousarray(np.frombuffer(raw, dtype=np.uint8).reshape(-1, itemsize).T)
        parts = [_encode_one(memoryview(p), level) for p in planes]
        records = [{**info, "length": len(payload)} for payload, info in parts]
        return b"".join(p for p, _ in parts), {
            "enc": "planes",
            "size": len(raw),
            "planes": records,
        }
    return _encode_one(raw, level)


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
    if enc == "planes":
        return _decode_planes(payload, info, size)
    if enc == "zstd":
        return decompress(payload, size)
    if enc == "raw":
        if len(payload) != size:
            raise CorruptCheckpointError(
                f"raw payload has {len(payload)} bytes, the manifest records {size}"
            )
        return bytes(payload)
    raise CorruptCheckpointError(
        f"unknown lossless encoding {enc!r} (known: 'zstd', 'raw', 'planes'); "
        "the file may need a newer ckptzip"
    )


def _decode_planes(
    payload: bytes | bytearray | memoryview, info: dict[str, Any], size: int
) -> bytes:
    records = info.get("planes")
    if not isinstance(records, list) or not 2 <= len(records) <= _MAX_PLANES:
        raise CorruptCheckpointError(f"'planes' stage needs 2..{_MAX_PLANES} plane records")
    k = len(records)
    if size % k:
        raise CorruptCheckpointError(f"{size} bytes do not split into {k} planes")
    rows, offset = size // k, 0
    # filled column by column: measured 2-4x faster than transposing a (k, rows) array
    out = np.empty((rows, k), dtype=np.uint8)
    view = memoryview(payload)  # slices of a memoryview copy nothing
    for j, rec in enumerate(records):
        length = rec.get("length") if isinstance(rec, dict) else None
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise CorruptCheckpointError(f"plane {j} record {rec!r} lacks a valid length")
        if rec.get("enc") == "planes" or rec.get("size") != rows:
            raise CorruptCheckpointError(f"plane {j} record {rec!r} must be a {rows}-byte stage")
        if offset + length > len(payload):
            raise CorruptCheckpointError(f"plane {j} runs past the end of its payload")
        part = view[offset : offset + length]
        if rec.get("enc") == "raw":  # the common case for float mantissas: no copy to bytes
            if length != rows:
                raise CorruptCheckpointError(f"raw plane {j} has {length} bytes, not {rows}")
            out[:, j] = np.frombuffer(part, dtype=np.uint8)
        else:
            out[:, j] = np.frombuffer(decode(part, rec), dtype=np.uint8)
        offset += length
    if offset != len(payload):
        raise CorruptCheckpointError(
            f"the planes cover {offset} of the payload's {len(payload)} bytes"
        )
    return out.tobytes()
