"""Quantization-aware delta coding of bin indices against the parent checkpoint.

Every checkpoint is quantized in full, so quantization error never accumulates along a chain.
What a delta stores, per tensor, is the *cyclic difference of bin indices*

    d = (idx_prev - idx_now) mod B,        B = the larger of the two bin counts,

which is ``0`` wherever a weight stayed in its bin. Decoding knows ``idx_prev`` and replays
``idx_now = (idx_prev - d) mod B`` exactly.

**Rearrangement.** Before the entropy stage the differences are grouped, stably, by the
weight's bin in the *previous* checkpoint (one group after another). Within one group the
distribution of ``d`` is much narrower (a weight in the lowest bin can only move up, …) and
unchanged weights form long zero runs. The decoder recomputes the same permutation from
``idx_prev``, so the order costs nothing to store.

**Entropy stage.** Several lossless back ends are implemented (:data:`METHODS`): zstd on the
symbols, run-length (zero runs + the changed symbols) then zstd or LZMA, a changed-position
bitmap then zstd, and LZMA alone. ``benchmarks/delta.py`` compares them on real training runs
against the order-0 entropy of the symbol stream (:func:`order0_entropy_bits`) and the entropy
given the previous bin (:func:`conditional_entropy_bits`, the bound rearrangement opens up).
Run-length + LZMA (whose adaptive range coder is the "well-kept entropy coder", from the
standard library) was the smallest on every workload measured, a few percent above or below
the order-0 bound, so it is :data:`DEFAULT_METHOD`; zstd's long-distance matching was measured
too and gained nothing (long matches do not exist in these streams), so it is not offered.
The groups go through the coder as one stream: an LZMA stream per group was measured ~10 %
larger (each restarts its adaptive model). The method used is recorded in the payload's
metadata, so any of them decodes.

Every decoder is bounded: the number of symbols comes from the caller (the tensor's shape in
the manifest), never from the compressed stream, and each decompression stops one byte past
the size the metadata announces.

>>> import numpy as np
>>> prev = np.array([0, 1, 2, 3, 3, 2], dtype=np.uint8)
>>> now = np.array([0, 1, 3, 3, 2, 2], dtype=np.uint8)
>>> payload = encode_delta(prev, now, 4)
>>> bool((decode_delta(payload.meta, payload.chunks, prev) == now).all())
True
"""

from __future__ import annotations

import lzma
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ckptzip import entropy
from ckptzip.errors import ConfigError, CorruptCheckpointError

__all__ = [
    "DEFAULT_METHOD",
    "METHODS",
    "DeltaPayload",
    "apply_difference",
    "conditional_entropy_bits",
    "cyclic_difference",
    "decode_delta",
    "encode_delta",
    "measure_methods",
    "order0_entropy_bits",
    "rearrangement",
]

# -- the index transform ------------------------------------------------------------------


def _check_bins(bins: int) -> None:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or not 1 <= bins <= 256:
        raise ConfigError(f"bins={bins!r} must be an integer in [1, 256] (indices are uint8)")


def _check_indices(name: str, idx: np.ndarray, bins: int) -> np.ndarray:
    arr = np.asarray(idx)
    if arr.dtype != np.uint8:
        raise ConfigError(f"{name} must be a uint8 index array, got dtype {arr.dtype}")
    arr = arr.reshape(-1)
    if arr.size and int(arr.max()) >= bins:
        raise ConfigError(
            f"{name} holds index {int(arr.max())} but bins={bins}: pass the larger bin count "
            "of the two checkpoints"
        )
    return arr


def cyclic_difference(prev: np.ndarray, now: np.ndarray, bins: int) -> np.ndarray:
    """``(prev - now) mod bins`` as uint8, elementwise over two flat index arrays.

    Parameters
    ----------
    prev, now:
        uint8 bin indices of one tensor in the previous and the current checkpoint.
    bins:
        The larger of the two checkpoints' bin counts; every index must be below it.

    Examples
    --------
    >>> import numpy as np
    >>> cyclic_difference(np.array([0, 3], np.uint8), np.array([1, 3], np.uint8), 4).tolist()
    [3, 0]
    """
    _check_bins(bins)
    p = _check_indices("prev", prev, bins)
    n = _check_indices("now", now, bins)
    if p.shape != n.shape:
        raise ConfigError(
            f"prev has {p.size} indices but now has {n.size}: a delta needs the same tensor size"
        )
    return ((p.astype(np.int16) - n.astype(np.int16)) % bins).astype(np.uint8)


def apply_difference(prev: np.ndarray, diff: np.ndarray, bins: int) -> np.ndarray:
    """Invert :func:`cyclic_difference`: ``(prev - diff) mod bins`` as uint8.

    Examples
    --------
    >>> import numpy as np
    >>> prev, now = np.array([0, 3], np.uint8), np.array([1, 3], np.uint8)
    >>> apply_difference(prev, cyclic_difference(prev, now, 4), 4).tolist()
    [1, 3]
    """
    _check_bins(bins)
    p = _check_indices("prev", prev, bins)
    d = _check_indices("diff", diff, bins)
    if p.shape != d.shape:
        raise ConfigError(f"prev has {p.size} indices but diff has {d.size}")
    return ((p.astype(np.int16) - d.astype(np.int16)) % bins).astype(np.uint8)


def rearrangement(prev: np.ndarray) -> np.ndarray:
    """The permutation grouping positions by their previous bin, stably (int64 positions).

    ``symbols[rearrangement(prev)]`` lists the differences of every weight that was in bin 0,
    in position order, then those in bin 1, and so on.

    Examples
    --------
    >>> import numpy as np
    >>> rearrangement(np.array([2, 0, 2, 1], np.uint8)).tolist()
    [1, 3, 0, 2]
    """
    # NumPy's stable sort of 8-bit keys is a radix sort: O(n) on the hot path of every save
    # and load, where a comparison sort would be O(n log n).
    p = np.asarray(prev).reshape(-1)
    return np.argsort(p, kind="stable").astype(np.int64, copy=False)


# -- entropy measurements ------------------------------------------------------------------


def order0_entropy_bits(symbols: np.ndarray) -> float:
    """Total order-0 (memoryless) entropy of a symbol stream, in bits.

    ``n · H`` with ``H = -Σ p log2 p`` over the empirical symbol frequencies: the size an ideal
    coder that sees each symbol alone could reach. Coders that exploit runs or context (zstd,
    lzma) can go below it; a plain Huffman coder cannot.

    Examples
    --------
    >>> import numpy as np
    >>> order0_entropy_bits(np.array([0, 0, 1, 1], np.uint8))
    4.0
    >>> order0_entropy_bits(np.zeros(10, np.uint8))
    0.0
    """
    s = np.asarray(symbols).reshape(-1)
    if s.size == 0:
        return 0.0
    counts = np.bincount(s.astype(np.int64))
    counts = counts[counts > 0].astype(np.float64)
    p = counts / s.size
    return float(-(counts * np.log2(p)).sum()) + 0.0  # + 0.0 turns -0.0 into 0.0


def conditional_entropy_bits(symbols: np.ndarray, context: np.ndarray) -> float:
    """Total entropy of ``symbols`` given ``context`` (same length), in bits: ``Σ_c n_c H(s | c)``.

    With ``context`` the previous bin, this is what rearrangement makes reachable: an ideal
    coder run separately on each group.

    Examples
    --------
    >>> import numpy as np
    >>> s = np.array([1, 1, 0, 0], np.uint8)
    >>> conditional_entropy_bits(s, np.array([0, 0, 1, 1], np.uint8))
    0.0
    """
    s = np.asarray(symbols).reshape(-1)
    c = np.asarray(context).reshape(-1)
    if s.shape != c.shape:
        raise ConfigError(f"symbols ({s.size}) and context ({c.size}) differ in length")
    total = 0.0
    for value in np.unique(c):
        total += order0_entropy_bits(s[c == value])
    return total


# -- entropy back ends ---------------------------------------------------------------------


def _zstd_compress(data: bytes, level: int) -> bytes:
    return entropy.compress(data, level)


def _zstd_decompress(data: bytes, size: int) -> bytes:
    return entropy.decompress(data, size)


# LZMA2 tuned for these streams (measured by benchmarks/delta.py's back-end comparison): the
# gain comes from LZMA's context-modelling range coder, not from long matches, so a cheap
# match finder (hash chains, short nice_len) is ~3 % larger than preset 6 at ~1/6 the time.
# pb=lp=0: symbols are single bytes with no alignment. A 1 MiB window bounds decode memory.
# The decoder needs the same dict_size/lc/lp/pb, so they are part of the method's format.
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


def _lzma_compress(data: bytes) -> bytes:
    return lzma.compress(data, format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)


def _lzma_decompress(data: bytes, size: int) -> bytes:
    dec = lzma.LZMADecompressor(format=lzma.FORMAT_RAW, filters=_LZMA_FILTERS)
    try:
        out = dec.decompress(data, max_length=size + 1)
    except lzma.LZMAError as exc:
        raise CorruptCheckpointError(f"delta payload is not valid lzma data: {exc}") from exc
    if len(out) != size:
        raise CorruptCheckpointError(
            f"delta payload decompressed to {len(out)}+ bytes, the metadata says {size}"
        )
    return out


def _zero_runs(symbols: np.ndarray) -> bytes:
    """Run-length form: zero-run lengths (255-escaped bytes) then the nonzero symbols.

    Each nonzero symbol is preceded by the length ``g`` of the zero run before it, written as
    ``g // 255`` bytes of 255 and one byte ``g % 255`` (the LZ4 length code); the trailing
    zero run is implied by the symbol count.
    """
    nz = np.flatnonzero(symbols)
    gaps = np.diff(nz, prepend=-1) - 1
    quot, rem = np.divmod(gaps, 255)
    ends = np.cumsum(quot + 1) - 1
    runs = np.full(int(ends[-1]) + 1 if ends.size else 0, 255, dtype=np.uint8)
    runs[ends] = rem.astype(np.uint8)
    return runs.tobytes() + symbols[nz].tobytes()


def _from_zero_runs(data: bytes, n: int, nonzero: int) -> np.ndarray:
    raw = np.frombuffer(data, dtype=np.uint8)
    if nonzero > raw.size or nonzero > n:
        raise CorruptCheckpointError(f"run-length payload announces {nonzero} nonzero symbols")
    runs, values = raw[: raw.size - nonzero], raw[raw.size - nonzero :]
    ends = np.flatnonzero(runs != 255)
    if ends.size != nonzero or (ends.size and ends[-1] != runs.size - 1) or (values == 0).any():
        raise CorruptCheckpointError("run-length payload is inconsistent with its metadata")
    escapes = np.diff(ends, prepend=-1) - 1
    gaps = escapes.astype(np.int64) * 255 + runs[ends]
    positions = np.cumsum(gaps + 1) - 1
    if positions.size and positions[-1] >= n:
        raise CorruptCheckpointError(
            f"run-length payload places a symbol at {int(positions[-1])} past the end ({n})"
        )
    out = np.zeros(n, dtype=np.uint8)
    out[positions] = values
    return out


@dataclass(frozen=True)
class _Method:
    """One entropy back end: symbols -> (chunks, meta) and back, bounded by ``n``."""

    encode: Callable[[np.ndarray, int], tuple[list[bytes], dict[str, Any]]]
    decode: Callable[[Sequence[bytes], dict[str, Any], int], np.ndarray]
    doc: str = field(default="")


def _sized(meta: dict[str, Any], key: str, limit: int) -> int:
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise CorruptCheckpointError(f"delta metadata {key}={value!r} is out of range [0, {limit}]")
    return value


def _one_chunk(chunks: Sequence[bytes]) -> bytes:
    if len(chunks) != 1:
        raise CorruptCheckpointError(f"delta payload has {len(chunks)} chunks, expected 1")
    return bytes(chunks[0])


def _raw_method(
    compress: Callable[[bytes, int], bytes], decompress: Callable[[bytes, int], bytes]
) -> _Method:
    def enc(symbols: np.ndarray, level: int) -> tuple[list[bytes], dict[str, Any]]:
        return [compress(symbols.tobytes(), level)], {}

    def dec(chunks: Sequence[bytes], meta: dict[str, Any], n: int) -> np.ndarray:
        return np.frombuffer(decompress(_one_chunk(chunks), n), dtype=np.uint8).copy()

    return _Method(enc, dec)


def _rle_method(
    compress: Callable[[bytes, int], bytes], decompress: Callable[[bytes, int], bytes]
) -> _Method:
    def enc(symbols: np.ndarray, level: int) -> tuple[list[bytes], dict[str, Any]]:
        data = _zero_runs(symbols)
        return [compress(data, level)], {
            "rle_bytes": len(data),
            "nonzero": int(np.count_nonzero(symbols)),
        }

    def dec(chunks: Sequence[bytes], meta: dict[str, Any], n: int) -> np.ndarray:
        nonzero = _sized(meta, "nonzero", n)
        # n symbols need at most n // 255 + n escape/run bytes plus the nonzero values.
        size = _sized(meta, "rle_bytes", 2 * n + n // 255 + 1)
        return _from_zero_runs(decompress(_one_chunk(chunks), size), n, nonzero)

    return _Method(enc, dec)


def _bitmap_method() -> _Method:
    # A packed bitmap of the changed positions plus the changed symbols, one zstd frame.
    def enc(symbols: np.ndarray, level: int) -> tuple[list[bytes], dict[str, Any]]:
        mask = symbols != 0
        data = np.packbits(mask).tobytes() + symbols[mask].tobytes()
        return [_zstd_compress(data, level)], {"nonzero": int(mask.sum())}

    def dec(chunks: Sequence[bytes], meta: dict[str, Any], n: int) -> np.ndarray:
        nonzero = _sized(meta, "nonzero", n)
        nbits = (n + 7) // 8
        raw = np.frombuffer(_zstd_decompress(_one_chunk(chunks), nbits + nonzero), np.uint8)
        mask = np.unpackbits(raw[:nbits], count=n).astype(bool)
        values = raw[nbits:]
        if int(mask.sum()) != nonzero or (values == 0).any():
            raise CorruptCheckpointError("bitmap delta payload is inconsistent with its metadata")
        out = np.zeros(n, dtype=np.uint8)
        out[mask] = values
        return out

    return _Method(enc, dec)


def _lzma(data: bytes, level: int) -> bytes:
    return _lzma_compress(data)


METHODS: dict[str, _Method] = {
    "zstd": _raw_method(_zstd_compress, _zstd_decompress),
    "rle+zstd": _rle_method(_zstd_compress, _zstd_decompress),
    "bitmap+zstd": _bitmap_method(),
    "lzma": _raw_method(_lzma, _lzma_decompress),
    "rle+lzma": _rle_method(_lzma, _lzma_decompress),
}
"""Entropy back ends by id; each payload records the id it was written with."""

DEFAULT_METHOD = "rle+lzma"
"""The back end the delta codec uses; chosen by ``benchmarks/delta.py`` (see the README)."""

_DEFAULT_LEVEL = 9


# -- the payload ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DeltaPayload:
    """A delta-coded index array: JSON-able ``meta`` and raw ``chunks``.

    ``meta`` holds ``method``, ``bins``, ``n`` (the symbol count, for validation only: the
    decoder takes ``n`` from the parent's indices), ``rearrange`` and whatever the back end
    needs to bound its decompression.
    """

    meta: dict[str, Any]
    chunks: list[bytes]

    @property
    def nbytes(self) -> int:
        """Total payload bytes (the chunks; the metadata is not counted)."""
        return sum(len(c) for c in self.chunks)


def _symbols(prev: np.ndarray, now: np.ndarray, bins: int, rearrange: bool) -> np.ndarray:
    diff = cyclic_difference(prev, now, bins)
    if rearrange:
        diff = diff[rearrangement(prev)]
    return diff


def encode_delta(
    prev: np.ndarray,
    now: np.ndarray,
    bins: int,
    *,
    rearrange: bool = True,
    method: str = DEFAULT_METHOD,
    level: int = _DEFAULT_LEVEL,
) -> DeltaPayload:
    """Delta-code ``now`` against ``prev`` (flat uint8 bin indices of one tensor).

    Parameters
    ----------
    prev, now:
        The tensor's bin indices in the parent and the current checkpoint (same length).
    bins:
        The larger of the two bin counts (``max(len(prev_levels), len(now_levels))``).
    rearrange:
        Group the differences by the previous bin before the entropy stage (free to decode).
    method:
        Entropy back end, a key of :data:`METHODS`.
    level:
        zstd level for the zstd-based back ends.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> prev = rng.integers(0, 16, 10_000).astype(np.uint8)
    >>> now = prev.copy(); now[::100] = (now[::100] + 1) % 16
    >>> encode_delta(prev, now, 16).nbytes < 1_000
    True
    """
    if method not in METHODS:
        raise ConfigError(f"method={method!r} is unknown; choose one of {sorted(METHODS)}")
    symbols = _symbols(prev, now, bins, rearrange)
    chunks, extra = METHODS[method].encode(symbols, level)
    meta = {"method": method, "bins": int(bins), "n": int(symbols.size), "rearrange": rearrange}
    meta.update(extra)
    return DeltaPayload(meta, chunks)


def decode_delta(meta: dict[str, Any], chunks: Sequence[bytes], prev: np.ndarray) -> np.ndarray:
    """Rebuild the current indices from a :class:`DeltaPayload`'s parts and the parent's indices.

    Raises
    ------
    CorruptCheckpointError
        When the metadata or the chunks are damaged or do not fit ``prev``.

    Examples
    --------
    >>> import numpy as np
    >>> prev = np.array([1, 2, 3], np.uint8); now = np.array([1, 0, 3], np.uint8)
    >>> p = encode_delta(prev, now, 4, method="zstd")
    >>> decode_delta(p.meta, p.chunks, prev).tolist()
    [1, 0, 3]
    """
    if not isinstance(meta, dict):
        raise CorruptCheckpointError(f"delta metadata must be an object, got {type(meta).__name__}")
    method = meta.get("method")
    if not isinstance(method, str) or method not in METHODS:
        raise CorruptCheckpointError(
            f"delta method {method!r} is unknown to this version; known: {sorted(METHODS)}"
        )
    bins = meta.get("bins")
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 256:
        raise CorruptCheckpointError(f"delta metadata bins={bins!r} is out of range [1, 256]")
    p = np.asarray(prev).reshape(-1)
    if p.dtype != np.uint8 or (p.size and int(p.max()) >= bins):
        raise CorruptCheckpointError(
            f"the parent's indices do not fit this delta (bins={bins}): wrong parent?"
        )
    n = p.size
    if meta.get("n") != n:
        raise CorruptCheckpointError(
            f"delta was encoded for {meta.get('n')!r} indices, the parent has {n}: wrong parent?"
        )
    symbols = METHODS[method].decode(chunks, meta, n)
    if symbols.size != n:
        raise CorruptCheckpointError(f"delta payload decoded to {symbols.size} symbols, not {n}")
    if n and int(symbols.max()) >= bins:
        raise CorruptCheckpointError(f"delta payload holds a difference >= bins={bins}")
    if meta.get("rearrange", False):
        diff = np.empty_like(symbols)
        diff[rearrangement(p)] = symbols
    else:
        diff = symbols
    return apply_difference(p, diff, bins)


def measure_methods(
    symbols: np.ndarray, *, methods: Sequence[str] | None = None, level: int = _DEFAULT_LEVEL
) -> dict[str, int]:
    """Bytes each entropy back end needs for ``symbols`` (for benchmarks and method choice).

    Examples
    --------
    >>> import numpy as np
    >>> sizes = measure_methods(np.zeros(1000, np.uint8), methods=["zstd", "rle+zstd"])
    >>> sorted(sizes)
    ['rle+zstd', 'zstd']
    """
    s = np.ascontiguousarray(np.asarray(symbols, dtype=np.uint8).reshape(-1))
    names = list(METHODS) if methods is None else list(methods)
    out: dict[str, int] = {}
    for name in names:
        if name not in METHODS:
            raise ConfigError(f"method={name!r} is unknown; choose one of {sorted(METHODS)}")
        chunks, _ = METHODS[name].encode(s, level)
        out[name] = sum(len(c) for c in chunks)
    return out
