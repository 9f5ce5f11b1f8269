"""Codec ``"quant"``: the non-uniform quantizer's output, stored in four chunks.

======  ==========================================================================
chunk   content
======  ==========================================================================
0       levels: ``n_levels`` float64, little-endian, raw (a few hundred bytes at most)
1       indices, laid out as ``meta["index_layout"]``: ``"packed"``
        (``bits_for(n_levels)`` bits each, :mod:`ckptzip.packing`) or ``"bytes"`` (one
        uint8 each) through the lossless stage, or ``"ans"`` (the ``"ans"`` symbol back
        end of :mod:`ckptzip.entropy`, one context; ``index_stage`` is its meta; added
        after the first files, which never hold it: a reader without it rejects the
        entry as an unknown layout); the smallest is kept:
        ANS reaches the order-0 entropy, zstd sometimes models runs better (heavily pruned
        tensors)
2       protected positions: first position then gaps, int64 little-endian, lossless stage
3       protected values: raw bytes of the original dtype, lossless stage
======  ==========================================================================

Meta: ``{"n_levels", "bits", "index_layout", "index_stage", "n_protected",
"positions_stage", "values_stage"}``; the stages are :mod:`ckptzip.entropy` records, so every
decoded size is known before decoding. Codecs that store a :class:`QuantizedTensor`'s indices
in another way (``"delta"``) reuse the rest through :class:`SideParts`
(:func:`encode_side` / :func:`decode_side`): named parts, so no codec depends on another's
chunk order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ckptzip import _pages, entropy, kernels
from ckptzip._types import IndicesOnly, QuantizedTensor
from ckptzip.codecs.base import (
    Codec,
    DecodeContext,
    Decoded,
    Description,
    EncodeContext,
    Encoded,
    meta_get,
    register_codec,
)
from ckptzip.codecs.exact import tensor_from_bytes, tensor_to_bytes
from ckptzip.config import QuantConfig
from ckptzip.errors import ConfigError, CorruptCheckpointError
from ckptzip.packing import bits_for, pack_indices, packed_size, unpack_indices

__all__ = [
    "QuantCodec",
    "SideParts",
    "decode_indices",
    "decode_quantized",
    "decode_side",
    "decode_values",
    "encode_indices",
    "encode_packed",
    "encode_full",
    "encode_quantized",
    "encode_side",
    "describe_quantized",
    "full_note",
    "n_levels_of",
    "quantized_for",
    "values_decodable",
    "wide_dtype",
]

_F64 = np.dtype("<f8")
_I64 = np.dtype("<i8")


# Trying the one-byte layout costs a zstd pass over numel bytes (measured 5-8x the packed
# pass, which it beat by under 1 % when it won at all); on large tensors it is first tried on
# a sample spread over the tensor and kept only if the sample suggests a real gain.
_SAMPLE_SLICES = 8
_SAMPLE_SLICE = 1 << 15
_SAMPLE_GAIN = 0.97
_SAMPLE_MIN = 1 << 16


def wide_dtype(dtype: torch.dtype) -> torch.dtype:
    """The arithmetic of a tensor rebuilt from a stored one (a residual's change and
    reconstruction, a step's scale): float32, float64 for float64."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def _sample(indices: np.ndarray) -> np.ndarray:
    """At most a quarter of the stream, in slices spread over it."""
    n = indices.size
    width = min(_SAMPLE_SLICE, n // (4 * _SAMPLE_SLICES))
    starts = np.linspace(0, n - width, _SAMPLE_SLICES).astype(np.int64)
    return np.concatenate([indices[s : s + width] for s in starts])


def encode_indices(
    indices: np.ndarray,
    n_levels: int,
    level: int,
    *,
    packed: tuple[bytes, dict[str, Any]] | None = None,
) -> tuple[bytes, dict[str, Any]]:
    """The smallest of packed+zstd, bytes+zstd and ANS for an index stream, with its meta.

    ``packed``: the first candidate when the caller already coded it (:func:`encode_packed`
    of the same indices at the same level), so it is not coded twice.

    Each candidate costs a pass, so two are skipped where they cannot win or never did:
    ANS when the packed stream is already below the order-0 entropy (no ANS coding can come
    under it), and the one-byte layout when ANS beat the packed stream and either ``bits``
    divides 8 (then every run of equal indices is a run of equal packed bytes too, and zstd
    found no such structure worth more than ANS's order-0 coding) or zstd found nothing at
    all to take out of the packed stream (stored raw). The one-byte layout can only beat ANS
    through repeats (its literals cost at least the order-0 entropy): an index stream with
    runs or repeats long enough to matter repeats in its packed bytes too, and one without
    them is where the trial cost most (a weight's 32 levels: zstd's Huffman coding of the
    bytes is real work). Over the benchmark workloads' saves (805 index streams, eight
    models, keyframes and deltas) this skip changed one choice, by 5 bytes.

    Examples
    --------
    >>> payload, meta = encode_indices(np.arange(1000, dtype=np.uint8) % 4, 4, 3)
    >>> meta["bits"], meta["index_layout"], len(payload) < 250
    (2, 'packed', True)
    """
    flat = np.ascontiguousarray(indices, dtype=np.uint8).reshape(-1)
    bits = bits_for(n_levels)
    first = encode_packed(flat, n_levels, level) if packed is None else packed
    stream, packed_info = first
    best = (stream, {"bits": bits, "index_layout": "packed", "index_stage": packed_info})
    # ANS reaches the indices' order-0 entropy (k-means levels are far from equally used, and
    # Adam moments' much less); zstd can beat it on runs (heavily pruned tensors), so both
    # are tried, unless zstd is already under what ANS could reach.
    ans_won = False
    # counted once, for the entropy floor and the ANS model both
    bins = kernels.bin_counts(flat) if flat.size else None
    if bins is not None and len(stream) >= _ans_floor(flat, bins):
        # long streams in independent lanes and blocks (decoded several symbols at a time,
        # on as many threads as there are), short ones as one stream (no per-lane cost)
        method = "ans-wide" if flat.size >= entropy.ANS_LANES_MIN else "ans"
        (coded,), ans_info = entropy.encode_symbols(flat, method, bins=bins)
        if len(coded) < len(stream):
            best = (coded, {"bits": bits, "index_layout": method, "index_stage": ans_info})
            ans_won = True
    if bits == 8 or (ans_won and (8 % bits == 0 or packed_info["enc"] == "raw")):
        return best
    if flat.size >= _SAMPLE_MIN:
        sample = _sample(flat)
        as_bytes = len(entropy.compress(sample.data, level))
        as_packed = len(entropy.compress(pack_indices(sample, bits), level))
        if as_bytes >= _SAMPLE_GAIN * as_packed:
            return best
    whole, whole_info = entropy.encode(flat.data, level)
    if len(whole) < len(best[0]):
        best = (whole, {"bits": bits, "index_layout": "bytes", "index_stage": whole_info})
    return best


def encode_packed(indices: np.ndarray, n_levels: int, level: int) -> tuple[bytes, dict[str, Any]]:
    """:func:`encode_indices`' first candidate: the indices packed to their bit width, zstd."""
    flat = np.ascontiguousarray(indices, dtype=np.uint8).reshape(-1)
    return entropy.encode(pack_indices(flat, bits_for(n_levels)), level)


def _ans_floor(flat: np.ndarray, bins: np.ndarray) -> float:
    """Bytes under which no ANS coding of ``flat`` (one context) comes: its order-0 entropy,
    less what the final states of its blocks' lanes may hold against it (their bytes:
    :func:`~ckptzip.entropy.ans_wide_overhead`), and 1 % for the float sums. A model's
    cross-entropy is never below the entropy, and each coder step adds at least its symbol's
    information to the state, so a stream coded smaller by zstd than this is one ANS cannot
    beat."""
    return 0.99 * entropy.order0_entropy_bits(flat, bins=bins) / 8 - entropy.ans_wide_overhead(
        flat.size
    )


def decode_indices(meta: dict[str, Any], payload: bytes, n: int, n_levels: int) -> np.ndarray:
    """Invert :func:`encode_indices`; every index is checked to address a level."""
    bits = meta_get(meta, "bits", int)
    if n_levels and bits != bits_for(n_levels):
        raise CorruptCheckpointError(f"bits={bits} does not match {n_levels} levels")
    layout = meta_get(meta, "index_layout", str)
    stage = meta_get(meta, "index_stage", dict)
    if layout in ("ans", "ans-lanes", "ans-wide"):  # bounded by n, which comes from the shape
        return entropy.decode_symbols([payload], stage, n, layout)
    expected = {"packed": packed_size(n, bits), "bytes": n}.get(layout)
    if expected is None:
        raise CorruptCheckpointError(
            f"unknown index layout {layout!r} (known: 'packed', 'bytes', 'ans', 'ans-lanes', "
            "'ans-wide'); "
            "the file may need a newer ckptzip"
        )
    if stage.get("size") != expected:  # before decompressing: sizes come from the shape
        raise CorruptCheckpointError(
            f"index stream size {stage.get('size')!r} does not fit {n} indices ({layout})"
        )
    data = entropy.decode(payload, stage)
    if layout == "packed":
        idx = unpack_indices(data, bits, n)
    elif layout == "bytes":
        if len(data) != n:
            raise CorruptCheckpointError(f"{len(data)} index bytes for {n} elements")
        idx = np.frombuffer(data, dtype=np.uint8).copy()
    else:
        raise CorruptCheckpointError(f"unknown index layout {layout!r}")
    return idx


@dataclass(frozen=True)
class SideParts:
    """A :class:`QuantizedTensor`'s stored parts besides its indices.

    ``meta`` holds ``n_levels``, ``n_protected``, ``positions_stage`` and ``values_stage``;
    ``levels`` is raw little-endian float64, ``positions`` (first position, then gaps, int64)
    and ``values`` (raw bytes of the tensor's dtype) are lossless-stage payloads.
    """

    meta: dict[str, Any]
    levels: bytes
    positions: bytes
    values: bytes


def encode_side(q: QuantizedTensor, level: int) -> SideParts:
    """The levels, protected positions and protected values of ``q``, encoded."""
    levels = np.ascontiguousarray(q.levels, dtype=_F64)
    pos = np.ascontiguousarray(q.protected_positions, dtype=np.int64)
    gaps = np.diff(pos, prepend=np.int64(0)).astype(_I64)  # small numbers compress well
    pos_payload, pos_info = entropy.encode(gaps.tobytes(), level)
    values = q.protected_values.to(q.dtype)
    val_payload, val_info = entropy.encode(
        tensor_to_bytes(values), level, itemsize=values.element_size()
    )
    meta = {
        "n_levels": int(levels.size),
        "n_protected": int(pos.size),
        "positions_stage": pos_info,
        "values_stage": val_info,
    }
    return SideParts(meta, levels.tobytes(), pos_payload, val_payload)


def _sized(meta: dict[str, Any], key: str, expected: int, ctx: DecodeContext) -> dict[str, Any]:
    stage: dict[str, Any] = meta_get(meta, key, dict)
    if stage.get("size") != expected:
        raise CorruptCheckpointError(
            f"{ctx.path!r}: {key} size {stage.get('size')!r} should be {expected}"
        )
    return stage


def n_levels_of(meta: dict[str, Any], ctx: DecodeContext) -> int:
    """The entry's level count, checked against its config (before anything is decoded)."""
    config = _config(ctx)
    n_levels = meta_get(meta, "n_levels", int)
    n: int = math.prod(ctx.shape)
    if not 0 <= n_levels <= min(config.bins, 256) or (n > 0 and n_levels == 0):
        raise CorruptCheckpointError(f"{ctx.path!r}: n_levels={n_levels} is out of range")
    return n_levels


def _config(ctx: DecodeContext) -> QuantConfig:
    if ctx.config is None:
        raise CorruptCheckpointError(f"{ctx.path!r}: a quantized entry needs a config")
    if not ctx.dtype.is_floating_point:
        raise CorruptCheckpointError(f"{ctx.path!r}: a quantized tensor cannot be {ctx.dtype}")
    return ctx.config


@dataclass(frozen=True)
class _Side:
    """A quantized entry's checked side parts: levels, protected positions and values."""

    levels: np.ndarray
    positions: np.ndarray
    values: torch.Tensor


def _decode_side_parts(side: SideParts, ctx: DecodeContext, *, protected: bool = True) -> _Side:
    """Every check of a quantized entry's parts besides its indices, and the parts decoded
    (without ``protected``, the protected positions and values are neither decoded nor
    checked: both empty)."""
    meta = side.meta
    n = math.prod(ctx.shape)
    n_levels = n_levels_of(meta, ctx)
    if len(side.levels) != 8 * n_levels:
        raise CorruptCheckpointError(f"{ctx.path!r}: levels chunk has the wrong size")
    levels = np.frombuffer(side.levels, dtype=_F64).astype(np.float64)
    if not np.isfinite(levels).all() or (np.diff(levels) < 0).any():
        raise CorruptCheckpointError(f"{ctx.path!r}: levels are not finite and sorted")
    k = meta_get(meta, "n_protected", int)
    if not 0 <= k <= n:
        raise CorruptCheckpointError(f"{ctx.path!r}: n_protected={k} is out of range")
    if not protected:
        return _Side(levels, np.empty(0, dtype=np.int64), torch.empty(0, dtype=ctx.dtype))
    gaps = entropy.decode(side.positions, _sized(meta, "positions_stage", 8 * k, ctx))
    if len(gaps) != 8 * k:
        raise CorruptCheckpointError(f"{ctx.path!r}: protected positions have the wrong size")
    g = np.frombuffer(gaps, dtype=_I64)
    # the first entry is a position, the rest gaps >= 1; the bound is summed in float64 so a
    # hostile stream cannot wrap int64 around before it is checked
    if k and (g[0] < 0 or (g[1:] < 1).any() or float(g.astype(np.float64).sum()) >= n):
        raise CorruptCheckpointError(
            f"{ctx.path!r}: protected positions are not increasing positions inside the tensor"
        )
    positions = np.cumsum(g, dtype=np.int64)
    raw_values = entropy.decode(
        side.values, _sized(meta, "values_stage", k * ctx.dtype.itemsize, ctx)
    )
    return _Side(levels, positions, tensor_from_bytes(raw_values, ctx.dtype, (k,)))


def decode_side(
    side: SideParts, indices: np.ndarray, ctx: DecodeContext, *, below: int | None = None
) -> QuantizedTensor:
    """Rebuild the :class:`QuantizedTensor` from its side parts and decoded ``indices``.

    Every check of a quantized entry is here: the level count and codebook, that each index
    addresses a level, the protected positions and values against the shape. ``below``: a
    bound the caller's decoder already held every index to (a bin-index delta's ``bins``);
    where it is within the level count, the indices are not scanned again. With
    ``ctx.indices_only`` the protected parts are left out: an
    :class:`~ckptzip._types.IndicesOnly` (a chain's intermediate link, which its child's
    bin-index delta reads the indices of). Both spared this stage about half its time on a
    ten-file chain-end restore: 18-21 ms of thread CPU -> 9-12 ms
    (``benchmarks/restore_kernels.py --stages``; README, "less Python per link").
    """
    config = _config(ctx)
    parts = _decode_side_parts(side, ctx, protected=not ctx.indices_only)
    n = math.prod(ctx.shape)
    n_levels = parts.levels.size
    if indices.size != n:
        raise CorruptCheckpointError(f"{ctx.path!r}: {indices.size} indices for {n} elements")
    scan = below is None or below > n_levels
    if n and (n_levels == 0 or (scan and int(indices.max()) >= n_levels)):
        raise CorruptCheckpointError(
            f"{ctx.path!r}: an index addresses a level beyond the {n_levels} levels"
        )
    rel = ctx.rel_error
    return (IndicesOnly if ctx.indices_only else QuantizedTensor)(
        shape=ctx.shape,
        dtype=ctx.dtype,
        config=config,
        levels=parts.levels,
        indices=indices,
        protected_positions=parts.positions,
        protected_values=parts.values,
        rel_error=float(rel) if isinstance(rel, (int, float)) else float("nan"),
    )


_VALUE_LAYOUTS = ("ans-lanes", "ans-wide", "packed", "bytes")
"""Index layouts :func:`decode_values` decodes straight into the output tensor."""


def values_decodable(meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext) -> bool:
    """Whether :func:`decode_values` takes this ``"quant"`` entry (meta and chunks)."""
    return (
        meta.get("index_layout") in _VALUE_LAYOUTS
        and ctx.dtype.itemsize in (2, 4, 8)
        and len(chunks) == 4
        and math.prod(ctx.shape) > 0
    )


def decode_values(
    meta: dict[str, Any],
    chunks: Sequence[bytes],
    ctx: DecodeContext,
    *,
    base: torch.Tensor | None = None,
    into_base: bool = False,
) -> torch.Tensor:
    """The dequantized tensor, its indices decoded straight into it (each becomes its level's
    value as it leaves the coder or the bit stream), then the protected values: the values
    :func:`decode_quantized` and :func:`~ckptzip.quantize.dequantize` give, with the same
    checks, and no index array (the entry must be :func:`values_decodable`).

    With ``base`` (a contiguous float32 or float64 CPU tensor of the entry's dtype and size)
    every element is ``base[i] + level``, one addition in the dtype, before the protected
    values replace theirs: a ``"residual"`` entry's reconstruction in one pass, the values
    :func:`ckptzip.codecs.residual.reconstruct` gives. ``into_base``: the result is written
    over ``base`` (the caller's to overwrite) instead of into a new tensor.
    """
    from ckptzip.quantize import level_table  # the one definition of a level's value

    config = _config(ctx)
    parts = _decode_side_parts(SideParts(meta, chunks[0], chunks[2], chunks[3]), ctx)
    n_levels = parts.levels.size
    bits = meta_get(meta, "bits", int)
    if bits != bits_for(n_levels):
        raise CorruptCheckpointError(f"bits={bits} does not match {n_levels} levels")
    layout = meta_get(meta, "index_layout", str)
    stage = meta_get(meta, "index_stage", dict)
    n = math.prod(ctx.shape)
    table = level_table(parts.levels, config.log_domain, ctx.dtype)
    flat = None if base is None else base.reshape(-1)
    out = flat if flat is not None and into_base else _pages.empty(n, ctx.dtype)
    beyond = CorruptCheckpointError(
        f"{ctx.path!r}: an index addresses a level beyond the {n_levels} levels"
    )
    if layout in ("ans-lanes", "ans-wide"):
        alphabet = stage.get("alphabet")
        # the coder writes no symbol outside its alphabet: within the levels, every index is
        if not isinstance(alphabet, int) or not 1 <= alphabet <= n_levels:
            raise beyond
        entropy.decode_ans_into(
            chunks[1], stage, table, out, method=layout, threads=ctx.threads, base=flat
        )
    else:
        width = bits if layout == "packed" else 8
        expected = packed_size(n, width)
        if stage.get("size") != expected:  # before decompressing: sizes come from the shape
            raise CorruptCheckpointError(
                f"index stream size {stage.get('size')!r} does not fit {n} indices ({layout})"
            )
        data = entropy.decode(chunks[1], stage)
        if len(data) != expected:
            raise CorruptCheckpointError(f"{len(data)} index bytes for {n} elements")
        raw = np.frombuffer(data, np.uint8)
        if kernels.unpack_gather(raw, width, table, out, flat) >= n_levels:
            raise beyond
    if parts.positions.size:
        out.index_copy_(0, torch.from_numpy(parts.positions), parts.values)
    return out.reshape(ctx.shape)


def encode_quantized(
    q: QuantizedTensor,
    level: int,
    *,
    side: SideParts | None = None,
    packed: tuple[bytes, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], list[bytes]]:
    """The ``"quant"`` codec's meta and four chunks (levels, indices, positions, values).

    ``side`` (:func:`encode_side` of ``q``) and ``packed`` (:func:`encode_packed` of its
    indices): parts a caller already coded at ``level``, reused as they are.

    Examples
    --------
    >>> from ckptzip.quantize import quantize
    >>> q = quantize(torch.linspace(-1, 1, 1000), QuantConfig(bins=4, protect=0.01))
    >>> meta, chunks = encode_quantized(q, 3)
    >>> meta["n_levels"], meta["bits"], len(chunks)
    (4, 2, 4)
    """
    side = encode_side(q, level) if side is None else side
    idx_payload, idx_meta = encode_indices(q.indices, side.meta["n_levels"], level, packed=packed)
    meta = {**side.meta, **idx_meta}
    return meta, [side.levels, idx_payload, side.positions, side.values]


def encode_full(
    q: QuantizedTensor,
    level: int,
    why: str,
    *,
    side: SideParts | None = None,
    packed: tuple[bytes, dict[str, Any]] | None = None,
) -> Encoded:
    """``q`` as the ``"full"`` entry of a codec coded against a parent (``"delta"``,
    ``"residual"``), for a tensor stored without it: meta ``{"mode": "full", "inner_codec":
    "quant", "inner": <the quant meta>, "why": why}`` and the ``"quant"`` codec's chunks
    (``side``, ``packed``: as :func:`encode_quantized` takes them)."""
    meta, chunks = encode_quantized(q, level, side=side, packed=packed)
    wrapped = {"mode": "full", "inner_codec": QuantCodec.id, "inner": meta, "why": why}
    return Encoded(wrapped, chunks, q)


def full_note(why: Any) -> str:
    """``inspect``'s note of a ``"full"`` entry (``why`` as :func:`encode_full` stored it)."""
    return f"stored in full ({why})" if isinstance(why, str) else "stored in full"


def decode_quantized(
    meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext
) -> QuantizedTensor:
    """Invert :func:`encode_quantized`."""
    if len(chunks) != 4:
        raise CorruptCheckpointError(f"{ctx.path!r}: {len(chunks)} chunks, expected 4")
    n_levels = n_levels_of(meta, ctx)
    indices = decode_indices(meta, chunks[1], math.prod(ctx.shape), n_levels)
    return decode_side(SideParts(meta, chunks[0], chunks[2], chunks[3]), indices, ctx)


def quantized_for(x: torch.Tensor, ctx: EncodeContext) -> QuantizedTensor:
    """``x`` quantized as the plan says: the search's result when given, else quantized now."""
    if ctx.quant is None:
        raise ConfigError(f"{ctx.path!r}: a lossy codec needs a QuantConfig")
    q = ctx.quantized
    if q is not None:
        if q.config != ctx.quant or tuple(q.shape) != tuple(x.shape) or q.dtype != x.dtype:
            raise ConfigError(
                f"{ctx.path!r}: the given quantized tensor ({q.config}, {list(q.shape)}) is not "
                f"{ctx.quant} of shape {list(x.shape)}"
            )
        return q
    from ckptzip.quantize import quantize  # the quantizer pulls in the sketch machinery

    return quantize(x, ctx.quant, scores=ctx.scores, fit_weights=ctx.fit_weights)


def describe_quantized(meta: Any) -> Description:
    """The ``inspect`` description of an entry with ``n_protected`` in its meta (any other
    value, a hostile file's included, describes nothing)."""
    k = meta.get("n_protected") if isinstance(meta, dict) else None
    ok = isinstance(k, int) and not isinstance(k, bool)
    return Description(protected=k if ok else None)


@register_codec
class QuantCodec(Codec):
    """Quantize with :func:`ckptzip.quantize.quantize` and store the result compactly.

    Examples
    --------
    >>> from ckptzip.config import CompressionConfig
    >>> x = torch.randn(5000)
    >>> ctx = EncodeContext("w", CompressionConfig(), quant=QuantConfig(bins=16))
    >>> enc = QuantCodec().encode(x, ctx)
    >>> sum(map(len, enc.chunks)) < x.numel()  # under 8 bits per weight
    True
    """

    id = "quant"
    lossy = True

    def encode(self, x: torch.Tensor, ctx: EncodeContext) -> Encoded:
        q = quantized_for(x, ctx)
        meta, chunks = encode_quantized(q, ctx.config.zstd_level)
        return Encoded(meta=meta, chunks=chunks, quantized=q)

    def decode(self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext) -> Decoded:
        if ctx.values and values_decodable(meta, chunks, ctx):
            return Decoded(tensor=decode_values(meta, chunks, ctx))
        return Decoded(quantized=decode_quantized(meta, chunks, ctx))

    def max_numel(
        self, meta: dict[str, Any], chunk_lengths: Sequence[int], itemsize: int
    ) -> int | None:
        # packed or one byte per index: at least one bit per index before zstd (chunk 1),
        # which expands at most 32768x. ANS codes a one-symbol stream in no bits at all (a
        # constant tensor of any size), so it has no bound but the read limit.
        if len(chunk_lengths) != 4 or meta.get("index_layout") not in ("packed", "bytes"):
            return None
        return 8 * entropy.max_decoded_size(chunk_lengths[1])

    def describe(self, meta: dict[str, Any]) -> Description:
        return describe_quantized(meta)
