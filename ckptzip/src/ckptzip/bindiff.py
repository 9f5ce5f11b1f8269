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

**Entropy stage.** The symbols go through one of the lossless back ends of
:mod:`ckptzip.entropy` (:data:`ckptzip.entropy.SYMBOL_METHODS`): zstd on the symbols,
run-length (zero runs + the changed symbols) then zstd or LZMA, a changed-position bitmap then
zstd, LZMA alone, and ANS with one static model per group. ``benchmarks/delta.py`` compares
them on real training runs against the order-0 entropy of the symbol stream and the entropy
given the previous bin (the bound rearrangement opens up).
ANS with the groups as its contexts (:data:`DEFAULT_METHOD`; the decoder knows each group's
size from the parent's indices) codes within 0.1 % of the entropy given the previous bin, plus
a count table per tensor (about 150-210 bytes for 16 bins). Where most weights keep their bin,
the zero runs are better coded as runs: ``"rle+ans"`` codes, per group, the runs of its most
frequent symbol and the other symbols with ANS, at a cost per run instead of per symbol.
Where the runs come in patterns (rows that change together) a dictionary coder on the run
lengths beats both: ``"rle+zstd"`` (:data:`LZ_METHOD`), offered where a cheap probe says so.
The delta codec keeps the smallest per tensor (:func:`encode_smallest` over
:data:`DELTA_METHODS`). Earlier versions tried run-length + LZMA instead of ``"rle+ans"``;
``benchmarks/delta_backends.py`` codes the deltas a ``CheckpointManager`` writes (``gru``,
``lm``: 5 checkpoints 20 steps apart; ``throughput.py --quick``'s transformer: 4 consecutive
steps) both ways: the codec's choice is 0.13 % larger on ``gru``, 0.13 % smaller on ``lm``
and 1.2 % larger on the transformer (whose token embedding changes by rows,
which LZMA's matches model) than the smaller of ANS and LZMA, and ``"rle+ans"`` encodes
5-10x faster than run-length + LZMA (a full LZMA pass cost about ten times ANS's). Without
a dictionary coder the deltas of ``benchmarks/dcp.py`` (an MLP's Adam moments, whose rows
change together) came 3.6 % larger than with LZMA, which ``"rle+zstd"`` brings back to within
about 1.3 % at a fifth of LZMA's time. zstd's
long-distance matching gained nothing (no long matches in these streams), so it is not
offered. The method used is recorded in the payload's metadata, so any of them decodes.

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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from ckptzip import entropy, kernels
from ckptzip.errors import ConfigError, CorruptCheckpointError

__all__ = [
    "DEFAULT_METHOD",
    "DELTA_METHODS",
    "delta_methods",
    "ANS_MARGIN",
    "LZ_METHOD",
    "LZ_PROBE_RATIO",
    "LZ_REACH",
    "ESTIMATE_MARGIN",
    "DeltaPayload",
    "apply_difference",
    "cyclic_difference",
    "decode_delta",
    "encode_delta",
    "encode_smallest",
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
    return kernels.delta_encode(p, n, bins, False)[0]


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
    return kernels.delta_decode(p, d, bins, False)


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


DEFAULT_METHOD = "ans"
"""The default symbol back end of :func:`encode_delta` (see the module docstring)."""

DELTA_METHODS = ("ans", "ans-wide-ctx", "rle+ans", "rle+ans-wide", "rle+zstd")
"""The back ends the delta codec tries (:func:`delta_methods` picks per stream), keeping the
smallest payload: ``"rle+ans"`` wins on long runs of unchanged bins, ANS on dense changes,
``"rle+zstd"`` where the runs come in patterns (:data:`LZ_METHOD`); the ANS ones are sized
from their counts first and coded only where that puts them within :data:`ANS_MARGIN` of the
smallest, ``"rle+zstd"`` by a probe. (``"ans-lanes"``, which earlier versions wrote in place
of ``"ans-wide-ctx"``, still decodes.)"""


LZ_METHOD = "rle+zstd"
"""The dictionary-coded back end :func:`encode_smallest` offers beside the ANS ones: where a
tensor's rows change together (an Adam moment of an MLP layer in ``benchmarks/dcp.py``, the
token embedding of ``throughput.py --quick``'s transformer) the runs of unchanged bins come
in patterns that ANS, coding each run on its own, does not see. It is sized by
:func:`ckptzip.entropy.rle_ans_size_and_probe`'s probe and coded only where that puts it
below the other back ends."""

LZ_PROBE_RATIO = 0.95
""":data:`LZ_METHOD`'s size estimate as a fraction of the probe (level 9 against the probe's
level 1: 0.86-0.97 of it on the deltas of ``benchmarks/dcp.py`` and ``throughput.py --quick``;
a probe estimate within ANS's own is coded, one above it never won)."""

LZ_REACH = 0.55
"""The probe is made only where ``"rle+ans"`` is below the other ANS back ends (where ANS
won, the runs had no patterns worth coding: on ``throughput.py --quick``'s deltas that leaves
a third of the probe's time) and :data:`LZ_METHOD` at this fraction of ``"rle+ans"``'s size
would beat the limit: it never came below 0.6 of it on those deltas (so a tensor whose full
encoding is far smaller is not probed)."""


_RLE = ("rle+ans", "rle+ans-wide")
"""The run-length back ends coded by ANS: sized from their run split's counts, one of them
probed for :data:`LZ_METHOD`."""


def delta_methods(n: int) -> tuple[str, ...]:
    """The back ends :func:`encode_smallest` tries for a stream of ``n`` differences: from
    :data:`ckptzip.entropy.ANS_LANES_MIN` symbols on, ANS in 32 wide lanes with the groups as
    contexts (``"ans-wide-ctx"``: decoded 32 symbols at a time, a large tensor on several
    threads) and the run-length form whose long inner streams are coded in those lanes too
    (``"rle+ans-wide"``); below, plain ``"ans"`` and ``"rle+ans"``; and ``"rle+zstd"``.
    Coded alone, the wide lanes cost 0.35-0.8 % more bytes than the four 24-bit lanes of
    ``"ans-lanes"`` (their 12-bit models) and decoded 1.3x faster on the deltas of
    ``benchmarks/delta_backends.py``, 1.6x on a chain-end restore's streams
    (``benchmarks/restore_kernels.py``); at the codec's choice the deltas took 0.23 % more
    bytes (README, "Wide lanes with contexts").

    Examples
    --------
    >>> delta_methods(100), delta_methods(1 << 20)
    (('ans', 'rle+ans', 'rle+zstd'), ('ans-wide-ctx', 'rle+ans-wide', 'rle+zstd'))
    """
    if n >= entropy.ANS_LANES_MIN:
        return ("ans-wide-ctx", "rle+ans-wide", LZ_METHOD)
    return ("ans", "rle+ans", LZ_METHOD)


_DEFAULT_LEVEL = 9

ESTIMATE_MARGIN = 0.08
""":func:`encode_smallest` runs a back end in full unless its sampled estimate exceeds the best
payload so far by more than this fraction (only the sampled back ends: LZMA, zstd and their
run-length forms; the ANS ones always run). LZMA's estimates run 1-8 % high, so a back end left
out could have won by a few percent at most; on dense Adam-moment deltas LZMA's estimates were
11-16 % above ANS's payload (and the full payloads 10-12 % above)."""


ANS_MARGIN = 0.001
""":func:`encode_smallest` codes ``"ans"`` or ``"rle+ans"`` in full unless its size from the
symbol counts exceeds the best payload so far by more than this fraction. The counts' size
came above what the coder wrote on every delta of ``throughput.py --quick``'s chains (by
0.002-0.6 % for ``"rle+ans"``, 0.02-1.2 % for ``"ans-lanes"``, 0.04-3.3 % for ``"ans"``), so a
back end sized above the best payload so far seldom codes smaller. At 0.01 the two ANS back
ends, 0.2-0.5 % apart, were both coded on most of those tensors: over the 114 calls of three
delta saves with error feedback this function took 0.60 CPU s at 0.01, 0.46 s at 0.001 and
0.45 s at 0, for the same bytes (and the files of two 5-delta chains, with error feedback and
without, byte-identical to those written at 0.01)."""


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


def _symbols(
    prev: np.ndarray, now: np.ndarray, bins: int, rearrange: bool
) -> tuple[np.ndarray, list[int] | None]:
    """The symbol stream (differences, grouped by the previous bin) and the group sizes, in
    one pass of :func:`ckptzip.kernels.delta_encode`."""
    _check_bins(bins)
    p = _check_indices("prev", prev, bins)
    n = _check_indices("now", now, bins)
    if p.shape != n.shape:
        raise ConfigError(
            f"prev has {p.size} indices but now has {n.size}: a delta needs the same tensor size"
        )
    symbols, groups = kernels.delta_encode(p, n, bins, rearrange)
    return symbols, (groups if rearrange else None)


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
        Entropy back end, a key of :data:`ckptzip.entropy.SYMBOL_METHODS`.
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
    symbols, groups = _symbols(prev, now, bins, rearrange)
    return _payload(symbols, groups, bins, rearrange, method, level)


def _payload(
    symbols: np.ndarray,
    groups: list[int] | None,
    bins: int,
    rearrange: bool,
    method: str,
    level: int,
) -> DeltaPayload:
    chunks, extra = entropy.encode_symbols(symbols, method, level, segments=groups)
    meta = {"method": method, "bins": int(bins), "n": int(symbols.size), "rearrange": rearrange}
    meta.update(extra)
    return DeltaPayload(meta, chunks)


def _estimate(
    symbols: np.ndarray, groups: list[int] | None, method: str, level: int
) -> tuple[float | None, float]:
    """A back end's payload size before coding, and the margin that estimate needs."""
    if method == "ans":
        return entropy.ans_size(symbols, groups), ANS_MARGIN
    if method == "ans-lanes":  # a lane's final state and length cost up to 12 bytes
        lanes = entropy.ANS_LANES * -(-symbols.size // entropy.ANS_BLOCK)
        return entropy.ans_size(symbols, groups) + 12 * lanes, ANS_MARGIN
    if method == "ans-wide-ctx":
        return entropy.ans_wide_ctx_size(symbols, groups), ANS_MARGIN
    if method in _RLE:
        return entropy.rle_ans_size_and_probe(
            symbols, groups, probe_below=0.0, wide=method != "rle+ans"
        )[0], ANS_MARGIN
    return entropy.estimate_symbols(symbols, method, level), ESTIMATE_MARGIN


@overload
def encode_smallest(
    prev: np.ndarray,
    now: np.ndarray,
    bins: int,
    *,
    methods: Sequence[str] | None = ...,
    level: int = ...,
    limit: None = ...,
) -> DeltaPayload: ...


@overload
def encode_smallest(
    prev: np.ndarray,
    now: np.ndarray,
    bins: int,
    *,
    methods: Sequence[str] | None = ...,
    level: int = ...,
    limit: float | None = ...,
) -> DeltaPayload | None: ...


def encode_smallest(
    prev: np.ndarray,
    now: np.ndarray,
    bins: int,
    *,
    methods: Sequence[str] | None = None,
    level: int = _DEFAULT_LEVEL,
    limit: float | None = None,
) -> DeltaPayload | None:
    """The smallest :func:`encode_delta` payload over ``methods`` (default
    :func:`delta_methods`), with the symbols computed once. The ANS back ends are sized from
    their symbol counts first (:func:`ckptzip.entropy.ans_size`,
    :func:`~ckptzip.entropy.rle_ans_size`) and coded smallest first, the other back ends after
    them in the given order (the first of equal payloads is kept); a back end after the first
    is coded only where its estimate (:func:`ckptzip.entropy.estimate_symbols` for the sampled
    ones) is within :data:`ANS_MARGIN` (:data:`ESTIMATE_MARGIN`) of the best payload so far.

    ``limit``: bytes another encoding of the tensor takes (the delta codec's full encoding);
    a back end whose estimate exceeds it by more than its margin is not coded either, and
    where none is left to code the result is ``None``.

    Examples
    --------
    >>> import numpy as np
    >>> prev = np.arange(10_000, dtype=np.uint8) % 16
    >>> encode_smallest(prev, prev.copy(), 16).meta["method"] in DELTA_METHODS
    True
    """
    if methods is None:
        methods = delta_methods(np.asarray(prev).size)
    if not methods:
        raise ConfigError("methods must name at least one symbol back end")
    symbols, groups = _symbols(prev, now, bins, True)
    rle = next((m for m in methods if m in _RLE), None)
    probed = LZ_METHOD in methods and rle is not None
    estimates = {
        m: _estimate(symbols, groups, m, level)
        for m in methods
        if not probed or m not in (LZ_METHOD, rle)
    }
    if probed:
        assert rle is not None
        # rle+zstd is sized by the probe, which is made only where rle+ans is below the
        # other back ends (the runs matter: it never won elsewhere) and rle+zstd at LZ_REACH
        # of rle+ans could beat the limit
        caps = [e for e, _ in estimates.values() if e is not None]
        caps += [] if limit is None else [limit / LZ_REACH]
        size, probe = entropy.rle_ans_size_and_probe(
            symbols, groups, probe_below=min(caps) if caps else None, wide=rle != "rle+ans"
        )
        estimates[rle] = (size, ANS_MARGIN)
        if probe is not None:
            estimates[LZ_METHOD] = (LZ_PROBE_RATIO * probe, 0.0)
        methods = [m for m in methods if m in estimates]
    # the back ends sized from their counts in the order of their sizes, the others after
    order = sorted(methods, key=lambda m: (estimates[m][0] is None, estimates[m][0] or 0.0))
    best: DeltaPayload | None = None
    for method in order:
        estimate, margin = estimates[method]
        bound = limit if best is None else best.nbytes if limit is None else min(limit, best.nbytes)
        if bound is not None and estimate is not None and estimate > bound * (1 + margin):
            continue
        payload = _payload(symbols, groups, bins, True, method, level)
        if best is None or payload.nbytes < best.nbytes:
            best = payload
    assert best is not None or limit is not None
    return best


def decode_delta(
    meta: dict[str, Any],
    chunks: Sequence[bytes],
    prev: np.ndarray,
    *,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Rebuild the current indices from a :class:`DeltaPayload`'s parts and the parent's indices.

    ``out``: where to write them when it can take them (a flat, writable uint8 array of the
    parent's size; it may be ``prev`` itself, which is then overwritten), else into a new
    array.

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
    if not isinstance(method, str) or method not in entropy.SYMBOL_METHODS:
        raise CorruptCheckpointError(
            f"delta method {method!r} is unknown to this version; known: "
            f"{sorted(entropy.SYMBOL_METHODS)}"
        )
    bins = meta.get("bins")
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= 256:
        raise CorruptCheckpointError(f"delta metadata bins={bins!r} is out of range [1, 256]")
    p = np.asarray(prev).reshape(-1)
    # one counting pass gives the groups (the contexts) and checks every parent index
    counts = kernels.bin_counts(p) if p.dtype == np.uint8 else None
    if counts is None or counts[bins:].any():
        raise CorruptCheckpointError(
            f"the parent's indices do not fit this delta (bins={bins}): wrong parent?"
        )
    n = p.size
    if meta.get("n") != n:
        raise CorruptCheckpointError(
            f"delta was encoded for {meta.get('n')!r} indices, the parent has {n}: wrong parent?"
        )
    rearrange = meta.get("rearrange", False)
    groups = counts[:bins].tolist() if rearrange else None
    symbols = entropy.decode_symbols(chunks, meta, n, method, segments=groups)
    if symbols.size != n:
        raise CorruptCheckpointError(f"delta payload decoded to {symbols.size} symbols, not {n}")
    # a difference >= bins is refused by the decoder, in the pass that applies it
    return kernels.delta_decode(p, symbols, bins, bool(rearrange), counts, out)
