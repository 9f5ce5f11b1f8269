"""Entropy measurements the benchmarks compare the lossless stages against (not the library's).

``order0_entropy_bits`` itself lives in :mod:`ckptzip.entropy`, because the search's size
estimate uses it too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ckptzip.entropy import SYMBOL_METHODS, encode_symbols, order0_entropy_bits

__all__ = ["conditional_entropy_bits", "measure_methods"]

_LEVEL = 9


def conditional_entropy_bits(symbols: np.ndarray, context: np.ndarray) -> float:
    """Total entropy of ``symbols`` given ``context`` (same length), in bits: ``Σ_c n_c H(s | c)``.

    With ``context`` the previous bin, this is what rearrangement makes reachable: an ideal
    coder run separately on each group.

    Examples
    --------
    >>> s = np.array([1, 1, 0, 0], np.uint8)
    >>> conditional_entropy_bits(s, np.array([0, 0, 1, 1], np.uint8))
    0.0
    """
    s = np.asarray(symbols).reshape(-1)
    c = np.asarray(context).reshape(-1)
    if s.shape != c.shape:
        raise ValueError(f"symbols ({s.size}) and context ({c.size}) differ in length")
    return sum((order0_entropy_bits(s[c == value]) for value in np.unique(c)), 0.0)


def measure_methods(
    symbols: np.ndarray, *, methods: Sequence[str] | None = None, level: int = _LEVEL
) -> dict[str, int]:
    """Bytes each symbol back end of :mod:`ckptzip.entropy` needs for ``symbols``.

    Examples
    --------
    >>> sizes = measure_methods(np.zeros(1000, np.uint8), methods=["zstd", "rle+zstd"])
    >>> sorted(sizes)
    ['rle+zstd', 'zstd']
    """
    names = list(SYMBOL_METHODS) if methods is None else list(methods)
    return {name: sum(len(c) for c in encode_symbols(symbols, name, level)[0]) for name in names}
