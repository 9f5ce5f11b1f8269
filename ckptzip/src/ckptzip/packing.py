"""Tight bit packing of quantization indices (1 to 8 bits per index).

The layout is an LSB-first bit stream: index ``i`` occupies stream bits
``[i * bits, (i + 1) * bits)``, and stream bit ``b`` is bit ``b % 8`` of byte ``b // 8``. The
last byte is zero-padded. ``n`` indices take exactly ``ceil(n * bits / 8)`` bytes.

The passes over the indices are :func:`ckptzip.kernels.pack` / :func:`~ckptzip.kernels.unpack`
(compiled, or NumPy lane by lane in the reference); this module checks the arguments.

>>> import numpy as np
>>> idx = np.array([3, 0, 2, 1, 3], dtype=np.uint8)
>>> data = pack_indices(idx, 2)
>>> len(data)
2
>>> unpack_indices(data, 2, 5).tolist()
[3, 0, 2, 1, 3]
"""

from __future__ import annotations

import numpy as np

from ckptzip import kernels
from ckptzip.errors import ConfigError, CorruptCheckpointError

__all__ = ["bits_for", "pack_indices", "packed_size", "unpack_indices"]


def bits_for(n_levels: int) -> int:
    """Bits per index needed to address ``n_levels`` levels (at least 1, at most 8).

    Examples
    --------
    >>> [bits_for(n) for n in (1, 2, 3, 16, 17, 256)]
    [1, 1, 2, 4, 5, 8]
    """
    if not isinstance(n_levels, (int, np.integer)) or not 0 <= n_levels <= 256:
        raise ConfigError(f"n_levels={n_levels!r} must be an integer in [0, 256]")
    return max(1, int(n_levels - 1).bit_length())


def packed_size(n: int, bits: int) -> int:
    """Number of bytes :func:`pack_indices` produces for ``n`` indices of ``bits`` bits.

    Examples
    --------
    >>> packed_size(5, 3)
    2
    """
    _check_bits(bits)
    if n < 0:
        raise ConfigError(f"n={n!r} must be >= 0")
    return (n * bits + 7) // 8


def pack_indices(indices: np.ndarray, bits: int) -> bytes:
    """Pack ``uint8`` indices, each below ``2**bits``, into an LSB-first bit stream.

    Parameters
    ----------
    indices:
        Array of ``uint8`` (any shape; read in C order).
    bits:
        Bits per index, 1 to 8.

    Returns
    -------
    bytes
        ``ceil(indices.size * bits / 8)`` bytes.

    Examples
    --------
    >>> import numpy as np
    >>> pack_indices(np.array([1, 2, 3], dtype=np.uint8), 4).hex()
    '2103'
    """
    _check_bits(bits)
    idx = np.ascontiguousarray(indices)
    if idx.dtype != np.uint8:
        raise ConfigError(f"indices must be uint8, got dtype={idx.dtype}; convert with .astype")
    flat = idx.reshape(-1)
    n = flat.size
    if n == 0:
        return b""
    if bits == 8:
        return flat.tobytes()
    top = int(flat.max())
    if top >= 1 << bits:
        raise ConfigError(
            f"index {top} does not fit in bits={bits}; use bits={bits_for(top + 1)} (see bits_for)"
        )
    return kernels.pack(flat, bits, packed_size(n, bits))


def unpack_indices(data: bytes, bits: int, n: int) -> np.ndarray:
    """Inverse of :func:`pack_indices`: ``n`` ``uint8`` indices from ``data``.

    ``data`` must hold exactly ``ceil(n * bits / 8)`` bytes; anything else is a
    :class:`~ckptzip.errors.CorruptCheckpointError` (the length comes from a manifest, so a
    mismatch means the file is damaged).

    Examples
    --------
    >>> unpack_indices(bytes([0x21, 0x03]), 4, 3).tolist()
    [1, 2, 3]
    """
    _check_bits(bits)
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise ConfigError(f"n={n!r} must be a non-negative integer")
    expected = packed_size(int(n), bits)
    if len(data) != expected:
        raise CorruptCheckpointError(
            f"packed index stream has {len(data)} bytes, expected {expected} "
            f"for n={n} indices of {bits} bits"
        )
    raw = np.frombuffer(data, dtype=np.uint8)
    if bits == 8:
        return raw.copy()
    if n == 0:
        return np.zeros(0, dtype=np.uint8)
    return kernels.unpack(raw, bits, int(n))


def _check_bits(bits: int) -> None:
    if not isinstance(bits, (int, np.integer)) or isinstance(bits, bool) or not 1 <= bits <= 8:
        raise ConfigError(f"bits={bits!r} must be an integer in [1, 8]")
