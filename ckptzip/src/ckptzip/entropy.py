"""Every lossless stage of the format: zstd, byte planes, LZMA, run lengths, bitmaps.

Two kinds of stage live here, each bounded on decode by sizes the manifest records.

**Byte stages** (:func:`encode` / :func:`decode`, used by the exact and quant codecs):

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

**Symbol back ends** (:data:`SYMBOL_METHODS`, :func:`encode_symbols` / :func:`decode_symbols`,
used by :mod:`ckptzip.bindiff` for bin-index differences): a uint8 symbol stream of known
length ``n`` as one chunk, by

* ``"zstd"`` / ``"lzma"``: the n symbols as one zstd frame / one raw LZMA2 stream;
* ``"rle+zstd"`` / ``"rle+lzma"``: run lengths: for each nonzero symbol, the length ``g`` of
  the zero run before it as ``g // 255`` bytes 255 and one byte ``g % 255``, then the nonzero
  symbols (meta ``nonzero``, ``rle_bytes``), as a zstd frame / raw LZMA2 stream;
* ``"bitmap+zstd"``: the MSB-first bitmap of ``symbol != 0`` then the nonzero symbols, one
  zstd frame (meta ``nonzero``);
* ``"ans"``: asymmetric numeral systems (``constriction``'s ``AnsCoder``, a maintained Rust
  coder, or the compiled kernel that writes and reads the same words:
  :func:`ckptzip.kernels.ans_encode`) under a static categorical model per *context*,
  which reaches the stream's empirical entropy given its context within a fraction of a
  percent plus the count table (quant indices: within 0.3 % of their order-0 entropy,
  tables included, on ``gru``/``lm`` by ``benchmarks/entropy_stage.py``). The caller
  may split the stream into contiguous segments, each its own context (the delta codec's
  groups by the parent's bin, so the coder reaches the entropy *given* the parent's bin);
  the decoder gets the same segment sizes from what it already knows. Chunk: a zstd frame of
  the counts (little-endian unsigned of ``table_width`` 1, 2 or 4 bytes, ``contexts ×
  alphabet``, meta ``alphabet``, ``table_bytes``, ``table_width``) then the coder's
  ``uint32`` little-endian words. A context holding one distinct symbol costs no coded bits.
  The counts are the model: decoding rebuilds the same ``Categorical(counts, perfect=False)``,
  checks each context's counts sum to its segment size and that the coder ends empty.
* ``"ans-lanes"``: the same coder and count table, but many independent coders: the stream is
  cut into blocks of ``block`` symbols (meta; this version writes :data:`ANS_BLOCK`), and
  symbol ``i`` of a block belongs to lane ``i mod lanes`` (meta, 1 to 64; this version writes
  :data:`ANS_LANES`). Each (block, lane) is its own ``AnsCoder`` holding its symbols in
  position order, each under its position's context model (single-symbol contexts again code
  nothing). Chunk: the count table's zstd frame (as ``"ans"``), then one ``uint32`` word
  count per coder (``ceil(n / block) × lanes``, block by block, lane by lane), then each
  coder's words in that order. Independent coders are what make it fast: a block's lanes
  decode in one loop whose steps do not wait on each other, blocks code and decode on as many
  threads as there are, and :func:`decode_ans_into` writes each symbol's level straight into
  the output tensor. It costs up to 12 bytes a lane (a final state, a length): under 0.1 %
  on 2^18 three-bit symbols, which is why callers take ``"ans"`` below
  :data:`ANS_LANES_MIN` symbols. Decoding checks the word counts against the payload before
  allocating anything, and that every coder ends empty.

* ``"ans-wide"``: one context only (``segments`` None), a faster coder for the same model
  idea: the stream is cut into blocks of ``block`` symbols (meta, a multiple of 32; this
  version writes :data:`ANS_WIDE_BLOCK`), symbol ``i`` of a block in lane ``i mod 32``, each
  lane a rANS coder with a 32-bit state, 16-bit words and 12-bit frequencies, the model
  ``left[s] = trunc(C_s · (2^12 − alphabet) / n) + s`` (``"ans"``'s rule at 12 bits). A
  block's words are one uint16 stream: its lanes' 32 final states (low word, high word), then
  the words its encoder pushed, in the order the decoder takes them back (step by step, lane
  by lane). Chunk: ``ceil(n / block)`` uint32 little-endian word counts, the blocks' uint16
  little-endian words, then the count table's zstd frame (as ``"ans"``, ``table_bytes`` long,
  last so the words stay aligned). A stream holding one distinct symbol has no words. The
  coder is written out in ``ckptzip/kernels/_wide.c``. Decoding checks the word counts against
  the payload before allocating, and that each block reads exactly its words and leaves every
  lane in its initial state (2^16). With AVX2 it decodes 2-4x faster than ``"ans-lanes"``
  (32 lanes step as four 8-lane vectors, symbols of alphabets up to 16 by compares instead of
  loads; with AVX-512 two 16-lane vectors, alphabets up to 32 by register permutes;
  ``benchmarks/ans_wide.py``), without it 0.75x, for about 0.1 % more bytes (132 a block,
  and the coarser frequencies).

* ``"ans-wide-ctx"``: ``"ans-wide"``'s blocks, lanes, words and chunk layout (word counts,
  words, then the count table last) with ``"ans"``'s contexts: the table holds ``contexts ×
  alphabet`` counts (as ``"ans"``), and symbol ``i`` takes the model of the context
  (segment) it lies in, so a lane's model changes where the segments change, inside a step
  if a boundary falls there. A context's model covers only the symbols it holds: with
  ``s_0 < s_1 < …`` the symbols of non-zero count, ``left[s_j] = trunc(C_j · (2^12 − k) /
  n_c) + j`` (``C_j`` the counts of ``s_0 .. s_{j-1}``, ``k`` how many there are, ``n_c``
  the context's size; in float64, in order), ``f_{s_j} = left[s_{j+1}] − left[s_j]``
  (``2^12`` past the last), and every other symbol has frequency 0. A context holding fewer
  than two distinct symbols codes nothing: its positions leave their lanes' states alone
  (the decoder writes its one symbol, 0 when it is empty). Unlike ``"ans-wide"``, every block
  holds its 32 final states, even one that codes nothing. The delta codec writes it from
  :data:`ANS_LANES_MIN` symbols on, in place of ``"ans-lanes"`` (``bindiff.delta_methods``):
  whole steps inside a context decode as ``"ans-wide"``'s vectors with that context's model
  in registers; the steps a boundary cuts go lane by lane (``ckptzip/kernels/_wide.c``).

* ``"rle+ans"``: run lengths coded by ANS, for streams of long runs (the delta codec's
  differences, where most weights keep their bin). Per context (segment) its *base*, the
  symbol it holds most often (the smallest on a tie; 0 for an empty segment), and per symbol
  other than the base the length ``r`` of the run of base symbols before it, then the length
  of the run after the last one (a segment with ``k`` other symbols has ``k + 1`` runs; an
  empty segment none). A run ``r < 16`` is the token ``r``; a longer one the token
  ``11 + bitlen(r)`` (17 .. 73) followed by the ``bitlen(r) - 1`` bits of ``r`` below its
  leading one, appended LSB first to one bit stream (stream bit ``b`` is bit ``b mod 8`` of
  byte ``⌊b/8⌋``, the last byte zero-padded). Chunk: the tokens as an ``ans`` stream (one
  context per segment, the run counts as its segment sizes), then the other symbols as an
  ``ans`` stream (one context per segment, ``k`` symbols each), then the bit stream. Meta:
  ``base`` and ``others`` (one integer per segment), ``runs`` / ``values`` (the two ``ans``
  metas), ``runs_bytes`` / ``values_bytes`` (their lengths in the chunk) and
  ``extra_bits``. Decoding checks every count against the segment sizes, that the runs and
  symbols of each segment fill it exactly, that no other symbol equals its base and that
  the bit stream is used exactly. Coding cost is per run, not per symbol
  (:func:`ckptzip.kernels.rle_split` / :func:`~ckptzip.kernels.rle_join`).

* ``"rle+ans-wide"``: ``"rle+ans"``'s run split, chunk and meta, but each of its two inner
  streams (the run tokens, the other symbols) coded by the back end its meta names,
  ``runs_method`` and ``values_method``: ``"ans"`` (as in ``"rle+ans"``) or
  ``"ans-wide-ctx"`` (the same contexts, in the wide lanes), ``runs`` and ``values`` then
  holding that back end's meta. This version writes the wide lanes for an inner stream of at
  least :data:`RLE_WIDE_MIN` symbols, and the delta codec offers it in place of
  ``"rle+ans"`` from :data:`ANS_LANES_MIN` symbols on: the two scalar coders of
  ``"rle+ans"`` decoded its long streams at 2.2 ns a symbol, the wide lanes at 1.0
  (``benchmarks/restore_kernels.py`` on a chain-end restore).

The raw LZMA2 filter options (``dict_size`` 2^20, ``lc`` 3, ``lp`` 0, ``pb`` 0) are part of the
format. Every decoded size is bounded by ``n`` before decompressing.

:func:`order0_entropy_bits` is the order-0 bound the search's size estimate and the benchmarks
measure streams against.
"""

from __future__ import annotations

import functools
import lzma
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zstandard

from ckptzip import kernels
from ckptzip.errors import ConfigError, CorruptCheckpointError

__all__ = [
    "MAX_RATIO",
    "max_decoded_size",
    "SYMBOL_METHODS",
    "ONE_CONTEXT",
    "ANS_BLOCK",
    "ANS_LANES",
    "ANS_LANES_MIN",
    "ANS_WIDE_BLOCK",
    "ans_wide_overhead",
    "compress",
    "decode",
    "decode_ans_into",
    "decode_symbols",
    "decompress",
    "encode",
    "encode_symbols",
    "ans_size",
    "rle_ans_size",
    "rle_ans_size_and_probe",
    "LZ_PROBE_LEVEL",
    "estimate_symbols",
    "order0_entropy_bits",
]

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


def max_decoded_size(payload_bytes: int) -> int:
    """The most bytes any stage record can decode to from ``payload_bytes`` of payload.

    A bound a codec can state from chunk lengths alone, before reading them: each zstd frame
    expands at most :data:`MAX_RATIO` times plus a small slack, and a ``planes`` record holds
    at most 16 frames.

    Examples
    --------
    >>> max_decoded_size(0) == 16 * 1024
    True
    """
    return payload_bytes * MAX_RATIO + _MAX_PLANES * _SLACK


_local = threading.local()


def _compressor(level: int) -> zstandard.ZstdCompressor:
    """This thread's compressor for ``level``: a compressor sets its parameters from the
    level and each input's size, so one reused writes the frames a new one would, without
    allocating its tables again (a save makes hundreds of frames)."""
    cache: dict[int, zstandard.ZstdCompressor] | None = getattr(_local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = zstandard.ZstdCompressor(level=level, write_content_size=True)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    """This thread's decompressor: each call starts a fresh frame, so one reused decodes what
    a new one would, without allocating its context again (a chain's restore decodes over a
    thousand small frames; a new context costs ~10 us, more than most of them take)."""
    d: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if d is None:
        d = _local.decompressor = zstandard.ZstdDecompressor()
    return d


def compress(data: bytes | bytearray | memoryview, level: int = 3) -> bytes:
    """One zstd frame of ``data`` with its content size recorded in the frame header.

    Examples
    --------
    >>> decompress(compress(b"abc" * 100), 300) == b"abc" * 100
    True
    """
    if not -7 <= level <= 22:
        raise ConfigError(f"zstd level={level!r} must lie in [-7, 22]")
    return _compressor(level).compress(data)


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
        out = _decompressor().decompress(
            data, max_output_size=expected_size, allow_extra_data=False
        )
    except zstandard.ZstdError as exc:
        raise CorruptCheckpointError(f"corrupt zstd frame: {exc}") from exc
    return _sized(out, expected_size, "zstd frame")


def _sized(out: bytes, size: int, what: str) -> bytes:
    """``out`` if it is ``size`` bytes long, else the corruption it reveals."""
    if len(out) != size:
        raise CorruptCheckpointError(
            f"{what} decoded to {len(out)} bytes, the manifest records {size}"
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


# -- symbol back ends ----------------------------------------------------------------------

# LZMA2 tuned for bin-difference streams (measured by benchmarks/delta.py's back-end
# comparison): the gain comes from LZMA's context-modelling range coder, not from long matches,
# so a cheap match finder (hash chains, short nice_len) is ~3 % larger than preset 6 at ~1/6
# the time. pb=lp=0: symbols are single bytes with no alignment. A 1 MiB window bounds decode
# memory. The decoder needs the same dict_size/lc/lp/pb, so they are part of the format.
_LZMA_FILTERS: list[dict[str, Any]] = [
    {
        "id": lzma.FILTER_LZMA2,
        "dict_size": 1 << 20,
        "lc": 3,
        "lp": 0,
        "pb": 0,
        "mode": lzma.MODE_NORMAL,
        "mf": lzma.MF_HC4,
        "nice_len": 16,
        "depth": 2,
    }
]


def _lzma_compress(data: bytes, level: int) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)


def _lzma_decompress(data: bytes, size: int) -> bytes:
    dec = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    try:
        out = dec.decompress(data, max_length=size + 1)
    except lzma.LZMAError as exc:
        raise CorruptCheckpointError(f"payload is not valid lzma data: {exc}") from exc
    return _sized(out, size, "lzma payload (at most one byte past the recorded size)")


@dataclass(frozen=True)
class _Method:
    """One symbol back end: symbols -> (chunks, meta) and back, bounded by ``n``.

    ``segments`` (sizes of contiguous parts of the stream, summing to ``n``, or ``None``) is
    context the caller knows on both sides; back ends without a context model ignore it.
    """

    encode: Callable[[np.ndarray, int, Sequence[int] | None], tuple[list[bytes], dict[str, Any]]]
    decode: Callable[[Sequence[bytes], dict[str, Any], int, Sequence[int] | None], np.ndarray]


def _bounded(meta: dict[str, Any], key: str, limit: int) -> int:
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise CorruptCheckpointError(f"stage metadata {key}={value!r} is out of range [0, {limit}]")
    return value


def _one_chunk(chunks: Sequence[bytes]) -> bytes:
    if len(chunks) != 1:
        raise CorruptCheckpointError(f"symbol payload has {len(chunks)} chunks, expected 1")
    return bytes(chunks[0])


_Coder = Callable[[bytes, int], bytes]


_Segments = Sequence[int] | None


def _raw_method(pack: _Coder, unpack: _Coder) -> _Method:
    def enc(symbols: np.ndarray, level: int, _: _Segments) -> tuple[list[bytes], dict[str, Any]]:
        return [pack(symbols.tobytes(), level)], {}

    def dec(chunks: Sequence[bytes], meta: dict[str, Any], n: int, _: _Segments) -> np.ndarray:
        return np.frombuffer(unpack(_one_chunk(chunks), n), dtype=np.uint8).copy()

    return _Method(enc, dec)


def _rle_method(pack: _Coder, unpack: _Coder) -> _Method:
    def enc(symbols: np.ndarray, level: int, _: _Segments) -> tuple[list[bytes], dict[str, Any]]:
        # run-length form: zero-run lengths (255-escaped bytes) then the nonzero symbols
        data, nonzero = kernels.zero_runs_encode(symbols)
        return [pack(data.data, level)], {"rle_bytes": int(data.size), "nonzero": nonzero}

    def dec(chunks: Sequence[bytes], meta: dict[str, Any], n: int, _: _Segments) -> np.ndarray:
        nonzero = _bounded(meta, "nonzero", n)
        # n symbols need at most n // 255 + n escape/run bytes plus the nonzero values.
        size = _bounded(meta, "rle_bytes", 2 * n + n // 255 + 1)
        raw = np.frombuffer(unpack(_one_chunk(chunks), size), dtype=np.uint8)
        return kernels.zero_runs_decode(raw, n, nonzero)

    return _Method(enc, dec)


def _bitmap_method() -> _Method:
    def enc(symbols: np.ndarray, level: int, _: _Segments) -> tuple[list[bytes], dict[str, Any]]:
        mask = symbols != 0
        data = np.packbits(mask).tobytes() + symbols[mask].tobytes()
        return [compress(data, level)], {"nonzero": int(mask.sum())}

    def dec(chunks: Sequence[bytes], meta: dict[str, Any], n: int, _: _Segments) -> np.ndarray:
        nonzero = _bounded(meta, "nonzero", n)
        nbits = (n + 7) // 8
        raw = np.frombuffer(decompress(_one_chunk(chunks), nbits + nonzero), np.uint8)
        mask = np.unpackbits(raw[:nbits], count=n).astype(bool)
        values = raw[nbits:]
        if int(mask.sum()) != nonzero or (values == 0).any():
            raise CorruptCheckpointError("bitmap payload is inconsistent with its metadata")
        out = np.zeros(n, dtype=np.uint8)
        out[mask] = values
        return out

    return _Method(enc, dec)


def _bounds(segments: _Segments, n: int) -> np.ndarray:
    """Start offsets of the contexts plus ``n``: one context when ``segments`` is None."""
    # called for every stream a chain restore decodes: few NumPy calls (0.3-3 us, not 4)
    if segments is None and n >= 0:
        return np.array([0, n], dtype=np.int64)
    sizes = np.array([n] if segments is None else segments, dtype=np.int64).reshape(-1)
    if not 0 < sizes.size <= 1 << 16:
        raise ConfigError(f"segments must be 1..65536 sizes >= 0 summing to {n}")
    bounds = np.empty(sizes.size + 1, dtype=np.int64)
    bounds[0] = 0
    np.cumsum(sizes, out=bounds[1:])
    if bounds[-1] != n or sizes.min() < 0:
        raise ConfigError(f"segments must be 1..65536 sizes >= 0 summing to {n}")
    return bounds


_TABLE_LEVEL = 9
"""zstd level of the count tables. Measured on the ``throughput.py --quick`` state's manager
chain (a keyframe and four deltas, 1 287 tables, 2 MB of counts): level 19 spent 0.27 s of
CPU on them, level 9 0.14 s (3 % of those delta saves) for 2 277 more bytes of 9.75 MB
(+0.02 %); level 3 was no faster than 9 and lost twice the bytes."""


def _ans_table(counts: np.ndarray) -> tuple[bytes, int]:
    """The count table's zstd frame and its width: the narrowest little-endian unsigned that
    holds every count (the table of a small tensor's many contexts is otherwise a visible share
    of its payload)."""
    width = next(w for w in (1, 2, 4) if int(counts.max(initial=0)) < 1 << (8 * w))
    return compress(counts.astype(f"<u{width}").tobytes(), _TABLE_LEVEL), width


def ans_size(symbols: np.ndarray, segments: Sequence[int] | None = None) -> float:
    """The bytes :func:`encode_symbols` writes for ``symbols`` with ``"ans"``, from the counts
    alone: the table exactly, the coder's words as the counts' entropy (the coder lands within
    a fraction of a percent of it, plus its final state) — a pass of counting instead of
    coding.

    Examples
    --------
    >>> s = np.random.default_rng(0).integers(0, 4, 100_000).astype(np.uint8)
    >>> coded = len(encode_symbols(s, "ans", segments=[50_000, 50_000])[0][0])
    >>> abs(ans_size(s, [50_000, 50_000]) - coded) < 0.002 * coded
    True
    """
    flat = np.ascontiguousarray(symbols, dtype=np.uint8).reshape(-1)
    bounds = _bounds(segments, flat.size)
    counts = kernels.ans_counts(flat, bounds, 256)  # every segment in one call
    used = np.flatnonzero(counts.any(axis=0))
    counts = counts[:, : int(used[-1]) + 1 if used.size else 1]  # the alphabet coded
    table, _ = _ans_table(counts)
    c = counts.astype(np.float64)
    total = c.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        bits = -np.where(c > 0, c * np.log2(c / total), 0.0).sum()
    return len(table) + float(bits) / 8 + 8


def _ans_encode(
    symbols: np.ndarray, level: int, segments: _Segments
) -> tuple[list[bytes], dict[str, Any]]:
    bounds = _bounds(segments, symbols.size)
    alphabet = int(symbols.max()) + 1 if symbols.size else 1
    counts, words = kernels.ans_encode(symbols, bounds, alphabet)
    table, width = _ans_table(counts)
    meta = {"alphabet": alphabet, "table_bytes": len(table), "table_width": width}
    return [table + words.astype("<u4", copy=False).tobytes()], meta


def _ans_counts(data: bytes, meta: dict[str, Any], bounds: np.ndarray) -> tuple[np.ndarray, int]:
    """The count table of an ``ans`` / ``ans-lanes`` chunk, checked against the segments, and
    where the table ends."""
    table_bytes = _bounded(meta, "table_bytes", len(data))
    if (len(data) - table_bytes) % 4:
        raise CorruptCheckpointError("ans payload: misaligned coder words")
    return _table_counts(data[:table_bytes], meta, bounds), table_bytes


def _table_counts(frame: bytes, meta: dict[str, Any], bounds: np.ndarray) -> np.ndarray:
    """The counts of a count table's zstd ``frame``, checked against the segments."""
    contexts = bounds.size - 1
    alphabet = _bounded(meta, "alphabet", 256)
    width = meta.get("table_width")
    if alphabet < 1 or width not in (1, 2, 4):
        raise CorruptCheckpointError(
            f"ans payload: alphabet={alphabet} or table_width={width!r} out of range"
        )
    raw = decompress(frame, width * contexts * alphabet)
    counts = np.frombuffer(raw, dtype=f"<u{width}").reshape(contexts, alphabet)
    if (counts.sum(axis=1, dtype=np.int64) != np.diff(bounds)).any():
        raise CorruptCheckpointError("ans count table does not match the stream's segments")
    return counts


def _ans_stream(
    data: bytes, meta: dict[str, Any], n: int, segments: _Segments
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """An ``"ans"`` payload's words, context bounds and counts, checked: what
    :func:`kernels.ans_decode` takes."""
    bounds = _bounds(segments, n)
    counts, table_bytes = _ans_counts(data, meta, bounds)
    words = np.frombuffer(data[table_bytes:], dtype="<u4").astype(np.uint32)
    return words, bounds, counts, n


def _ans_decode(
    chunks: Sequence[bytes], meta: dict[str, Any], n: int, segments: _Segments
) -> np.ndarray:
    return kernels.ans_decode(*_ans_stream(_one_chunk(chunks), meta, n, segments))


ANS_BLOCK = 1 << 18
"""Symbols per block of the ``"ans-lanes"`` layout this version writes: the unit of parallel
coding and decoding (a 64M-element tensor has 256 of them)."""

ANS_LANES = 4
"""Interleaved coders per block in the ``"ans-lanes"`` layout this version writes."""

ANS_LANES_MIN = 1 << 16
"""Streams shorter than this are worth no lanes: a lane costs up to 12 bytes (its final
state and its length), 0.15 % of 2^16 three-bit symbols; callers choose ``"ans"`` below it.
The quant codec takes ``"ans-wide"`` from here on too, whose block costs 132 bytes (0.5 % of
2^16 three-bit symbols, 0.13 % of a full block): the threshold was not tuned for it, and the
ratios it was measured on moved by 0.05 % (README, "The ans-wide layout, built")."""

_MAX_LANES = 64


def _ans_lanes_encode(
    symbols: np.ndarray,
    level: int,
    segments: _Segments,
    *,
    threads: int = 1,
    bins: np.ndarray | None = None,
) -> tuple[list[bytes], dict[str, Any]]:
    bounds = _bounds(segments, symbols.size)
    if bins is not None and segments is None:  # one context, counted by the caller
        used = np.flatnonzero(bins)
        alphabet = int(used[-1]) + 1 if used.size else 1
        counts = bins[:alphabet].astype(np.uint32).reshape(1, alphabet)
    else:
        alphabet = int(symbols.max()) + 1 if symbols.size else 1
        counts = kernels.ans_counts(symbols, bounds, alphabet)
    lengths, words = kernels.ans_lanes_encode(
        symbols, bounds, counts, ANS_BLOCK, ANS_LANES, threads=threads
    )
    table, width = _ans_table(counts)
    meta = {
        "alphabet": alphabet,
        "table_bytes": len(table),
        "table_width": width,
        "block": ANS_BLOCK,
        "lanes": ANS_LANES,
    }
    # one copy of the words into the chunk (each + of bytes would copy the payload again)
    body = b"".join((table, lengths.astype("<u4").tobytes(), words.astype("<u4", copy=False)))
    return [body], meta


@dataclass(frozen=True)
class _Lanes:
    """An ``ans-lanes`` chunk, parsed and checked: everything its decoder needs."""

    bounds: np.ndarray
    counts: np.ndarray
    lengths: np.ndarray
    words: np.ndarray
    block: int
    lanes: int


def _ans_lanes_parse(data: bytes, meta: dict[str, Any], n: int, segments: _Segments) -> _Lanes:
    bounds = _bounds(segments, n)
    counts, table_bytes = _ans_counts(data, meta, bounds)
    block = _bounded(meta, "block", 1 << 30)
    lanes = _bounded(meta, "lanes", _MAX_LANES)
    if block < 1 or lanes < 1:
        raise CorruptCheckpointError(f"ans-lanes payload: block={block}, lanes={lanes}")
    streams = -(-n // block) * lanes
    body = np.frombuffer(data, dtype="<u4", offset=table_bytes)  # aligned: checked above
    if streams > body.size:  # before anything is allocated: the lengths are in the payload
        raise CorruptCheckpointError(
            f"ans-lanes payload holds {body.size} words, fewer than its {streams} lane lengths"
        )
    lengths = body[:streams].astype(np.int64)
    words = body[streams:]
    if int(lengths.sum()) != words.size:
        raise CorruptCheckpointError(
            f"ans-lanes lane lengths sum to {int(lengths.sum())} words, the payload holds "
            f"{words.size}"
        )
    return _Lanes(bounds, counts, lengths, words, block, lanes)


def _ans_lanes_decode(
    chunks: Sequence[bytes], meta: dict[str, Any], n: int, segments: _Segments
) -> np.ndarray:
    p = _ans_lanes_parse(_one_chunk(chunks), meta, n, segments)
    out = kernels.ans_lanes_decode(p.words, p.lengths, p.bounds, p.counts, n, p.block, p.lanes)
    assert out is not None
    return out


ANS_WIDE_BLOCK = 1 << 18
"""Symbols per block of the ``"ans-wide"`` layout this version writes (a multiple of 32):
the unit of parallel coding and decoding, as :data:`ANS_BLOCK` is for ``"ans-lanes"``."""

_WIDE_LANES = 32
_WIDE_BLOCK_BYTES = 4 * _WIDE_LANES + 4
"""What a block of ``"ans-wide"`` costs beyond its coded words: 32 final states of 4 bytes and
its word count."""


def _one_context(segments: _Segments, what: type[Exception]) -> None:
    if segments is not None and len(segments) != 1:
        raise what("the ans-wide back end codes one context: segments must be None")


def _ans_wide_encode(
    symbols: np.ndarray,
    level: int,
    segments: _Segments,
    *,
    threads: int = 1,
    bins: np.ndarray | None = None,
) -> tuple[list[bytes], dict[str, Any]]:
    _one_context(segments, ConfigError)
    counted = kernels.bin_counts(symbols) if bins is None else bins
    used = np.flatnonzero(counted)
    alphabet = int(used[-1]) + 1 if used.size else 1
    counts = np.asarray(counted[:alphabet], dtype=np.uint32)
    lengths, words = kernels.ans_wide_encode(symbols, counts, ANS_WIDE_BLOCK, threads=threads)
    return _wide_chunk(lengths, words, counts.reshape(1, alphabet))


def _wide_chunk(
    lengths: np.ndarray, words: np.ndarray, counts: np.ndarray
) -> tuple[list[bytes], dict[str, Any]]:
    """A wide-lane chunk and its meta: the blocks' word counts, their words (4-byte aligned
    after the counts), the count table (``counts``: one row per context) last."""
    table, width = _ans_table(counts)
    meta = {
        "alphabet": int(counts.shape[1]),
        "table_bytes": len(table),
        "table_width": width,
        "block": ANS_WIDE_BLOCK,
    }
    words16 = np.ascontiguousarray(words, dtype="<u2").data  # joined without a copy
    body = b"".join((lengths.astype("<u4").tobytes(), words16, table))
    return [body], meta


@dataclass(frozen=True)
class _Wide:
    """An ``ans-wide`` chunk, parsed and checked: everything its decoder needs."""

    counts: np.ndarray
    lengths: np.ndarray
    words: np.ndarray
    block: int


def _wide_layout(
    data: bytes, meta: dict[str, Any], bounds: np.ndarray, what: str
) -> tuple[np.ndarray, _Wide]:
    """The parts of a wide-lane chunk (``"ans-wide"``, ``"ans-wide-ctx"``: word counts, words,
    then the count table), checked against the stream's contexts ``bounds`` before anything
    is allocated: the count table (one row per context) and the parts the decoder takes."""
    n = int(bounds[-1])
    table_bytes = _bounded(meta, "table_bytes", len(data))
    block = _bounded(meta, "block", 1 << 30)
    if block < _WIDE_LANES or block % _WIDE_LANES:
        raise CorruptCheckpointError(f"{what} payload: block={block}")
    blocks = -(-n // block)
    body = len(data) - table_bytes
    if 4 * blocks > body or (body - 4 * blocks) % 2:
        raise CorruptCheckpointError(
            f"{what} payload: {body} bytes before its count table do not hold {blocks} "
            "word counts and whole words"
        )
    counts = _table_counts(data[body:], meta, bounds)
    lengths = np.frombuffer(data, dtype="<u4", count=blocks).astype(np.int64)
    words = np.frombuffer(data, dtype="<u2", offset=4 * blocks, count=(body - 4 * blocks) // 2)
    if int(lengths.sum()) != words.size:
        raise CorruptCheckpointError(
            f"{what} block lengths sum to {int(lengths.sum())} words, the payload holds "
            f"{words.size}"
        )
    return counts, _Wide(counts[0], lengths, words, block)


def _ans_wide_parse(data: bytes, meta: dict[str, Any], n: int, segments: _Segments) -> _Wide:
    _one_context(segments, CorruptCheckpointError)
    return _wide_layout(data, meta, _bounds(None, n), "ans-wide")[1]


def _ans_wide_decode(
    chunks: Sequence[bytes], meta: dict[str, Any], n: int, segments: _Segments
) -> np.ndarray:
    p = _ans_wide_parse(_one_chunk(chunks), meta, n, segments)
    out = kernels.ans_wide_decode(p.words, p.lengths, p.counts, n, p.block)
    assert out is not None
    return out


def _ans_wide_ctx_encode(
    symbols: np.ndarray, level: int, segments: _Segments, *, threads: int = 1
) -> tuple[list[bytes], dict[str, Any]]:
    bounds = _bounds(segments, symbols.size)
    alphabet = int(symbols.max()) + 1 if symbols.size else 1
    counts = kernels.ans_counts(symbols, bounds, alphabet)
    lengths, words = kernels.ans_wide_ctx_encode(
        symbols, bounds, counts, ANS_WIDE_BLOCK, threads=threads
    )
    return _wide_chunk(lengths, words, counts)


def _ans_wide_ctx_decode(
    chunks: Sequence[bytes], meta: dict[str, Any], n: int, segments: _Segments
) -> np.ndarray:
    bounds = _bounds(segments, n)
    counts, w = _wide_layout(_one_chunk(chunks), meta, bounds, "ans-wide-ctx")
    return kernels.ans_wide_ctx_decode(w.words, w.lengths, bounds, counts, n, w.block)


def ans_wide_ctx_size(symbols: np.ndarray, segments: Sequence[int] | None = None) -> float:
    """The bytes :func:`encode_symbols` writes for ``symbols`` with ``"ans-wide-ctx"``,
    estimated as :func:`ans_size` does (the counts' entropy and table), plus every block's
    final states and word count; the 12-bit model's loss, a fraction of a percent on the
    streams it is chosen for, is not counted."""
    return ans_size(symbols, segments) + ans_wide_overhead(int(np.asarray(symbols).size))


def ans_wide_overhead(n: int) -> int:
    """Bytes an ``"ans-wide"`` stream of ``n`` symbols spends beyond its coded words: every
    block's final states and word count (what a caller weighs against ``"ans"``)."""
    return _WIDE_BLOCK_BYTES * -(-n // ANS_WIDE_BLOCK)


def decode_ans_into(
    chunk: bytes,
    meta: dict[str, Any],
    table: Any,
    out: Any,
    *,
    method: str = "ans-lanes",
    threads: int = 1,
    base: Any = None,
) -> None:
    """Decode an ``"ans-lanes"`` or ``"ans-wide"`` (``method``) stream of ``out.numel()``
    symbols (one context) straight into ``out``: element ``i`` becomes ``table[symbol i]``
    (with ``base``, a tensor like ``out``, which may be ``out`` itself:
    ``base[i] + table[symbol i]``), with no symbol array between.

    ``table`` (a 1-D CPU tensor of ``out``'s dtype, the level values) must hold at least
    ``meta["alphabet"]`` entries, which the caller checks against its level count: the coder
    writes no symbol outside its alphabet. ``threads`` decode the blocks in parallel.

    Examples
    --------
    >>> import torch
    >>> s = (np.arange(1 << 16) % 3).astype(np.uint8)
    >>> chunks, meta = encode_symbols(s, "ans-lanes")
    >>> out = torch.empty(s.size)
    >>> decode_ans_into(chunks[0], meta, torch.tensor([0.5, 1.5, 2.5]), out)
    >>> out[:4].tolist()
    [0.5, 1.5, 2.5, 0.5]
    >>> chunks, meta = encode_symbols(s, "ans-wide")
    >>> decode_ans_into(chunks[0], meta, torch.tensor([0.5, 1.5, 2.5]), out, method="ans-wide")
    >>> out[-2:].tolist()
    [2.5, 0.5]
    """
    n = out.numel()
    if method == "ans-wide":
        w = _ans_wide_parse(bytes(chunk), meta, n, None)
        kernels.ans_wide_decode(
            w.words, w.lengths, w.counts, n, w.block,
            table=table, out=out, threads=threads, base=base,
        )  # fmt: skip
        return
    if method != "ans-lanes":
        raise ConfigError(f"method={method!r}: decode_ans_into takes 'ans-lanes' or 'ans-wide'")
    p = _ans_lanes_parse(bytes(chunk), meta, n, None)
    kernels.ans_lanes_decode(
        p.words, p.lengths, p.bounds, p.counts, n, p.block, p.lanes,
        table=table, out=out, threads=threads, base=base,
    )  # fmt: skip


# -- run lengths coded by ANS (the delta codec's back end for sparse differences) ----------


def _rle_ans_parts(others: Sequence[int], sizes: np.ndarray) -> tuple[list[int], list[int]]:
    """The ANS segments of the run tokens (``others + 1`` per non-empty context) and of the
    symbols other than the base (``others``), context by context."""
    runs = [k + 1 if size else 0 for k, size in zip(others, sizes.tolist(), strict=True)]
    return runs, list(others)


RLE_WIDE_MIN = 1 << 16
"""``"rle+ans-wide"`` codes an inner stream (its run tokens, its other symbols) in the wide
lanes from this many symbols on, with ``"ans"`` below (:data:`ANS_LANES_MIN`'s reasoning:
a block's 132 bytes are 0.5 % of 2^16 three-bit symbols)."""


def _rle_inner(n: int, wide: bool) -> str:
    """The back end of an inner stream of ``n`` symbols: ``"ans"``, or with ``wide`` from
    :data:`RLE_WIDE_MIN` symbols on ``"ans-wide-ctx"``."""
    return "ans-wide-ctx" if wide and n >= RLE_WIDE_MIN else "ans"


def _rle_ans_encode(
    symbols: np.ndarray, level: int, segments: _Segments, *, wide: bool = False
) -> tuple[list[bytes], dict[str, Any]]:
    bounds = _bounds(segments, symbols.size)
    tokens, values, others, base, extra, extra_bits = kernels.rle_split(symbols, bounds)
    runs_seg, values_seg = _rle_ans_parts(others.tolist(), np.diff(bounds))
    runs_method, values_method = _rle_inner(tokens.size, wide), _rle_inner(values.size, wide)
    (runs,), runs_meta = SYMBOL_METHODS[runs_method].encode(tokens, level, runs_seg)
    (vals,), values_meta = SYMBOL_METHODS[values_method].encode(values, level, values_seg)
    meta = {
        "base": base.tolist(),
        "others": others.tolist(),
        "runs": runs_meta,
        "runs_bytes": len(runs),
        "values": values_meta,
        "values_bytes": len(vals),
        "extra_bits": extra_bits,
    }
    if wide:
        meta.update(runs_method=runs_method, values_method=values_method)
    return [runs + vals + extra.tobytes()], meta


def rle_ans_size(symbols: np.ndarray, segments: Sequence[int] | None = None) -> float:
    """The bytes :func:`encode_symbols` writes for ``symbols`` with ``"rle+ans"``, as
    :func:`ans_size` estimates its two streams (the run split is done; no coding).

    Examples
    --------
    >>> s = np.zeros(100_000, np.uint8); s[::50] = 3
    >>> coded = len(encode_symbols(s, "rle+ans", segments=[50_000, 50_000])[0][0])
    >>> abs(rle_ans_size(s, [50_000, 50_000]) - coded) < 0.01 * coded
    True
    """
    return rle_ans_size_and_probe(symbols, segments, probe_below=0.0)[0]


LZ_PROBE_LEVEL = 1
"""zstd level of :func:`rle_ans_size_and_probe`'s probe."""


def rle_ans_size_and_probe(
    symbols: np.ndarray,
    segments: Sequence[int] | None = None,
    *,
    probe_below: float | None = None,
    wide: bool = False,
) -> tuple[float, float | None]:
    """:func:`rle_ans_size`, and (where that size is below ``probe_below``, or always without
    it; else ``None``) the bytes zstd at :data:`LZ_PROBE_LEVEL` takes
    for the same run split (its run tokens and its other symbols, each one frame, plus the
    raw bits): what a dictionary coder makes of the runs where ANS codes them one by one.
    Where runs come in patterns (rows of a matrix changing together) the probe is below the
    ANS size, and ``"rle+zstd"`` (level 9) came within 0.86-0.97 of the probe on the deltas
    of ``benchmarks/dcp.py`` and ``throughput.py --quick``; the probe costs about a quarter
    of coding ``"rle+ans"``. With ``wide``, the size is ``"rle+ans-wide"``'s (the blocks of
    its inner streams in the wide lanes counted; their 12-bit models' loss is not).

    Examples
    --------
    >>> s = np.zeros(100_000, np.uint8); s[np.arange(0, 100_000, 1000)[:, None] + np.arange(8)] = 1
    >>> size, lz = rle_ans_size_and_probe(s, [100_000])
    >>> lz < size
    True
    """
    flat = np.ascontiguousarray(symbols, dtype=np.uint8).reshape(-1)
    bounds = _bounds(segments, flat.size)
    tokens, values, others, _, extra, _ = kernels.rle_split(flat, bounds)
    runs_seg, values_seg = _rle_ans_parts(others.tolist(), np.diff(bounds))
    size = ans_size(tokens, runs_seg) + ans_size(values, values_seg) + extra.size
    for part in (tokens, values):  # with ``wide`` (``"rle+ans-wide"``), the long ones' blocks
        if _rle_inner(part.size, wide) != "ans":
            size += ans_wide_overhead(part.size)
    if probe_below is not None and size >= probe_below:
        return size, None
    lz = sum(len(compress(part.data, LZ_PROBE_LEVEL)) for part in (tokens, values))
    return size, float(lz + extra.size)


def _rle_ans_decode(
    chunks: Sequence[bytes],
    meta: dict[str, Any],
    n: int,
    segments: _Segments,
    *,
    wide: bool = False,
) -> np.ndarray:
    data = _one_chunk(chunks)
    bounds = _bounds(segments, n)
    sizes = np.diff(bounds)
    others = meta.get("others")
    if (
        not isinstance(others, list)
        or len(others) != sizes.size
        or not all(
            type(k) is int and 0 <= k <= size
            for k, size in zip(others, sizes.tolist(), strict=True)
        )
    ):
        raise CorruptCheckpointError("rle+ans payload: symbol counts do not fit the stream")
    base = meta.get("base")
    if (
        not isinstance(base, list)
        or len(base) != sizes.size
        or not all(type(b) is int and 0 <= b < 256 for b in base)
    ):
        raise CorruptCheckpointError("rle+ans payload: base symbols do not fit the stream")
    runs_bytes = _bounded(meta, "runs_bytes", len(data))
    values_bytes = _bounded(meta, "values_bytes", len(data) - runs_bytes)
    extra_bits = _bounded(meta, "extra_bits", 8 * (len(data) - runs_bytes - values_bytes))
    runs_meta, values_meta = meta.get("runs"), meta.get("values")
    if not isinstance(runs_meta, dict) or not isinstance(values_meta, dict):
        raise CorruptCheckpointError("rle+ans payload lacks its runs or values metadata")
    extra = np.frombuffer(data, np.uint8, offset=runs_bytes + values_bytes)
    if extra.size != (extra_bits + 7) // 8:
        raise CorruptCheckpointError(
            f"rle+ans payload holds {extra.size} bytes of run bits, not {(extra_bits + 7) // 8}"
        )
    runs_seg, values_seg = _rle_ans_parts(others, sizes)
    end = runs_bytes + values_bytes
    parts = [data[:runs_bytes], data[runs_bytes:end]]
    named = [meta.get("runs_method"), meta.get("values_method")] if wide else ["ans", "ans"]
    inner = [m for m in named if m in ("ans", "ans-wide-ctx") and isinstance(m, str)]
    if len(inner) != 2:
        raise CorruptCheckpointError(f"rle+ans-wide payload: inner back ends {named!r}")
    if inner == ["ans", "ans"]:
        # two independent streams of about the same length: decoded side by side in one loop
        tokens, values = kernels.ans_decode_pair(
            _ans_stream(parts[0], runs_meta, sum(runs_seg), runs_seg),
            _ans_stream(parts[1], values_meta, sum(values_seg), values_seg),
        )
    else:
        tokens, values = (
            SYMBOL_METHODS[m].decode([part], inner_meta, sum(seg), seg)
            for m, part, inner_meta, seg in zip(
                inner, parts, (runs_meta, values_meta), (runs_seg, values_seg), strict=True
            )
        )
    return kernels.rle_join(
        tokens, values, extra, extra_bits, bounds, np.asarray(others), np.asarray(base, np.uint8)
    )


SYMBOL_METHODS: dict[str, _Method] = {
    "zstd": _raw_method(compress, decompress),
    "rle+zstd": _rle_method(compress, decompress),
    "bitmap+zstd": _bitmap_method(),
    "lzma": _raw_method(_lzma_compress, _lzma_decompress),
    "rle+lzma": _rle_method(_lzma_compress, _lzma_decompress),
    "ans": _Method(_ans_encode, _ans_decode),
    "ans-lanes": _Method(_ans_lanes_encode, _ans_lanes_decode),
    "ans-wide": _Method(_ans_wide_encode, _ans_wide_decode),
    "ans-wide-ctx": _Method(_ans_wide_ctx_encode, _ans_wide_ctx_decode),
    "rle+ans": _Method(_rle_ans_encode, _rle_ans_decode),
    "rle+ans-wide": _Method(
        functools.partial(_rle_ans_encode, wide=True), functools.partial(_rle_ans_decode, wide=True)
    ),
}
"""Symbol back ends by id; a payload records the id it was written with."""

ONE_CONTEXT = frozenset({"ans-wide"})
"""Back ends that code a stream as one context: they take no ``segments`` (the delta codec's
groups by parent bin need the others)."""


def encode_symbols(
    symbols: np.ndarray,
    method: str,
    level: int = 3,
    *,
    segments: Sequence[int] | None = None,
    bins: np.ndarray | None = None,
) -> tuple[list[bytes], dict[str, Any]]:
    """Code a uint8 symbol stream with back end ``method``: its chunks and meta.

    ``segments``: sizes of contiguous parts of the stream that are separate contexts (the
    ``"ans"`` back end models each on its own); the decoder must pass the same sizes.
    ``bins``: the stream's :func:`ckptzip.kernels.bin_counts`, where the caller has them
    (``"ans-lanes"`` and ``"ans-wide"`` without ``segments`` then count no symbol again); the
    same output.

    Examples
    --------
    >>> s = np.zeros(1000, np.uint8); s[::100] = 3
    >>> chunks, meta = encode_symbols(s, "rle+lzma")
    >>> meta["nonzero"], bool((decode_symbols(chunks, meta, 1000, "rle+lzma") == s).all())
    (10, True)
    >>> chunks, meta = encode_symbols(s, "ans", segments=[500, 500])
    >>> bool((decode_symbols(chunks, meta, 1000, "ans", segments=[500, 500]) == s).all())
    True
    """
    if method not in SYMBOL_METHODS:
        raise ConfigError(f"method={method!r} is unknown; choose one of {sorted(SYMBOL_METHODS)}")
    flat = np.ascontiguousarray(np.asarray(symbols, dtype=np.uint8).reshape(-1))
    if bins is not None and method in ("ans-lanes", "ans-wide") and segments is None:
        encoder = _ans_lanes_encode if method == "ans-lanes" else _ans_wide_encode
        return encoder(flat, level, None, bins=bins)
    return SYMBOL_METHODS[method].encode(flat, level, segments)


_ESTIMATE_SLICES = 8
_ESTIMATE_SLICE = 1 << 14
_ESTIMATE_MIN = 8 * _ESTIMATE_SLICES * _ESTIMATE_SLICE  # below this, a full pass is cheap
# A sample coded smaller than this says the stream is very compressible: a full pass is then
# cheap, and fixed costs (headers, the first literals) would inflate the scaled estimate.
_ESTIMATE_MIN_BYTES = 1 << 12


def estimate_symbols(symbols: np.ndarray, method: str, level: int = 3) -> float | None:
    """Bytes :func:`encode_symbols` would write for ``symbols`` with ``method``, estimated
    from evenly spaced slices of the stream (an eighth of it or less), or ``None`` where a full
    pass is cheap anyway (a short or very compressible stream) or the back end models whole
    contexts (``"ans"``).

    The estimates of ``"rle+lzma"`` run high, by 1-8 % on dense 2M-symbol streams (Adam
    moments' deltas, random symbols): a slice offers LZMA fewer earlier matches than the
    whole stream.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> s = rng.integers(0, 3, 1 << 21).astype(np.uint8)
    >>> est = estimate_symbols(s, "rle+lzma")
    >>> full = sum(map(len, encode_symbols(s, "rle+lzma")[0]))
    >>> full <= est < 1.1 * full
    True
    >>> estimate_symbols(np.zeros(1 << 21, np.uint8), "rle+lzma") is None
    True
    """
    flat = np.asarray(symbols, dtype=np.uint8).reshape(-1)
    if method in ("ans", "ans-lanes", "ans-wide", "rle+ans") or flat.size < _ESTIMATE_MIN:
        return None
    step = flat.size // _ESTIMATE_SLICES
    sample = np.concatenate(
        [flat[i * step : i * step + _ESTIMATE_SLICE] for i in range(_ESTIMATE_SLICES)]
    )
    coded = sum(map(len, encode_symbols(sample, method, level)[0]))
    if coded < _ESTIMATE_MIN_BYTES:
        return None
    return coded * flat.size / sample.size


def decode_symbols(
    chunks: Sequence[bytes],
    meta: dict[str, Any],
    n: int,
    method: str,
    *,
    segments: Sequence[int] | None = None,
) -> np.ndarray:
    """Invert :func:`encode_symbols` for a stream of ``n`` symbols (bounded by ``n``)."""
    found = SYMBOL_METHODS.get(method)
    if found is None:
        raise CorruptCheckpointError(
            f"symbol back end {method!r} is unknown; known: {sorted(SYMBOL_METHODS)}"
        )
    if not isinstance(meta, dict):
        raise CorruptCheckpointError(f"symbol stage metadata {meta!r} must be a JSON object")
    return found.decode(chunks, meta, n, segments)


def order0_entropy_bits(symbols: np.ndarray, *, bins: np.ndarray | None = None) -> float:
    """Total order-0 (memoryless) entropy of a symbol stream, in bits.

    ``n · H`` with ``H = -Σ p log2 p`` over the empirical symbol frequencies: the size an ideal
    coder that sees each symbol alone could reach. Coders that exploit runs or context (zstd,
    lzma) can go below it; a plain Huffman coder cannot.

    Examples
    --------
    >>> order0_entropy_bits(np.array([0, 0, 1, 1], np.uint8))
    4.0
    >>> order0_entropy_bits(np.zeros(10, np.uint8))
    0.0
    """
    s = np.asarray(symbols).reshape(-1)
    if s.size == 0:
        return 0.0
    if bins is not None:  # the caller's kernels.bin_counts(symbols)
        counts = bins
    elif s.dtype == np.uint8:
        counts = kernels.bin_counts(s)
    else:
        counts = np.bincount(s.astype(np.int64))
    counts = counts[counts > 0].astype(np.float64)
    p = counts / s.size
    return float(-(counts * np.log2(p)).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0
