"""Codec ``"delta"``: a quantized tensor stored as bin-index differences against its parent.

The tensor is quantized in full (as the plan configured it), so the error of every checkpoint
is its own and never accumulates along a chain. The entry stores the quantized tensor's side
parts (levels, protected positions and values, :class:`~ckptzip.codecs.quantized.SideParts`)
and, instead of its indices, a :mod:`ckptzip.bindiff` payload against the parent's indices at
the same path. When the parent stored this path exactly or with another shape, or the delta is
not smaller than the full encoding (the bin layout moved too much), the entry holds the
``"quant"`` encoding unchanged, so a reader needs no parent for that tensor (the full
encoding is coded to compare only where the delta is not far below the indices' entropy:
:data:`FULL_TRIAL`). A child keeps
its parent's levels (requantized against them) when that gives no larger error than its own
fresh levels, so indices stay comparable along the chain, except a tensor the search gave
(``EncodeContext.quantized``): that one is stored exactly as the search evaluated it. The
format is the same either way.

Format (the ``quant`` codec's is in ``FORMAT.md``; ``parent`` is the file's top-level field)

Mode ``"full"``: meta ``{"mode": "full", "inner_codec": id, "inner": <that codec's meta>,
"why": <reason, informative>}``; the chunks are that codec's. This version writes
``"quant"`` as the inner codec (files of 0.1 may also hold ``"exact"``).

Mode ``"delta"``: meta ``{"mode": "delta", "delta": D, "delta_chunks": k, "n_levels",
"n_protected", "positions_stage", "values_stage"}`` (the last four as in ``quant``); chunks:
``0`` levels, ``1 .. k`` the index payload, ``k+1`` protected positions, ``k+2`` protected
values (levels, positions and values exactly as ``quant``'s chunks 0, 2, 3). ``D`` holds
``method``, ``bins`` (B, 1..256), ``n`` (= numel), ``rearrange`` (bool) and the method's
sizes. With ``p`` the parent entry's indices and ``x`` this entry's, the symbols are
``d[i] = (p[i] - x[i]) mod B``, listed in position order, or with ``rearrange`` in the order
of a stable ascending sort of ``p`` (all positions whose parent index is 0, in position order,
then 1, ...); a reader recomputes that order from ``p`` and inverts ``x[i] = (p[i] - d[i])
mod B``. The methods (k = 1 in each; this version writes the smallest of
``"ans-wide-ctx"`` and ``"rle+ans-wide"`` (or ``"ans"`` and ``"rle+ans"`` under 2^16
symbols), each with one context per parent bin, and ``"rle+zstd"``; earlier ones
``"ans-lanes"``, ``"ans"``, ``"rle+ans"`` or ``"rle+lzma"``) are the symbol back ends of
:mod:`ckptzip.entropy`.

Every decoded size is bounded by ``n`` and ``D`` before decompressing; the decoded indices and
the side parts go through :func:`ckptzip.codecs.quantized.decode_side`'s checks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ckptzip import kernels
from ckptzip._types import QuantizedTensor
from ckptzip.bindiff import decode_delta, encode_smallest
from ckptzip.codecs.base import (
    Codec,
    DecodeContext,
    Decoded,
    Description,
    EncodeContext,
    Encoded,
    get_codec,
    meta_get,
    register_codec,
)
from ckptzip.codecs.quantized import (
    SideParts,
    decode_side,
    describe_quantized,
    encode_full,
    encode_packed,
    encode_side,
    full_note,
    n_levels_of,
    quantized_for,
)
from ckptzip.errors import CorruptCheckpointError, MissingParentError, UnsupportedFormatError

__all__ = ["DeltaCodec"]

_SIDE_FIELDS = ("n_levels", "n_protected", "positions_stage", "values_stage")


REUSE_SLACK = 0.0
"""How much larger a tensor's relative error may grow to keep its parent's codebook: at most
``(1 + REUSE_SLACK)`` times the error of its own fresh levels. None: the search judged the
quality of the fresh levels' error (on the --quick fault-tolerant benchmark 0, 0.1 and 0.3
gave the same ratios within run-to-run spread)."""


def _keep_parent_levels(
    x: torch.Tensor, q: QuantizedTensor, prev: QuantizedTensor
) -> QuantizedTensor:
    """``q`` requantized against the parent's levels when that costs no more error.

    Fresh k-means levels move a little at every checkpoint, so an index changes whenever a
    cut-off passes its value even though the value hardly moved; on the parent's levels only
    the values that crossed a cut-off change index, and the delta is mostly zeros. The chain
    keeps one codebook until the tensor's distribution has drifted so far that the parent's
    levels cost more error than fresh ones (beyond ``REUSE_SLACK``), then starts again from
    fresh levels.
    """
    if (
        prev.config.log_domain != q.config.log_domain
        or np.array_equal(prev.levels, q.levels)
        or tuple(prev.shape) != tuple(q.shape)
    ):
        return q
    from ckptzip.quantize import requantize  # the quantizer pulls in the sketch machinery

    r = requantize(x, q, prev.levels)
    if r is None or r.rel_error > q.rel_error * (1.0 + REUSE_SLACK):
        return q
    return r


FULL_TRIAL = 0.4
"""A delta payload below this fraction of the full index encoding's floor (the smaller of the
indices' order-0 entropy, which ANS cannot beat, and their packed stream's zstd, the full
encoding's first candidate) is kept without coding the tensor in full to compare. The
packed stream's zstd is the part of the floor that sees the tensor's layout: Adam moments of
an MLP's layers (``benchmarks/dcp.py``) have rows of equal bins, and their full encoding came
to 0.13-0.2 of the order-0 entropy, under deltas kept at below 0.4 of it by the entropy
alone."""


def _order0_bytes(indices: np.ndarray) -> float:
    counts = kernels.bin_counts(np.ascontiguousarray(indices, dtype=np.uint8).reshape(-1))
    c = counts[counts > 0].astype(np.float64)
    return float(-(c * np.log2(c / c.sum())).sum()) / 8


@register_codec
class DeltaCodec(Codec):
    """Bin-index delta against the parent checkpoint; see the module docstring.

    Examples
    --------
    >>> from ckptzip.codecs.base import get_codec
    >>> get_codec("delta").id
    'delta'
    """

    id = "delta"
    lossy = True

    def encode(self, x: torch.Tensor, ctx: EncodeContext) -> Encoded:
        q = quantized_for(x, ctx)
        level = ctx.config.zstd_level

        def full(why: str) -> Encoded:
            return encode_full(q, level, why)

        prev = None if ctx.parent is None else ctx.parent.quantized(ctx.path)
        if prev is None:
            why = "no parent" if ctx.parent is None else "parent lacks a quantized tensor here"
            return full(why)
        if tuple(prev.shape) != tuple(q.shape):
            return full(f"parent shape {list(prev.shape)}")
        if q.numel == 0:
            return full("empty tensor")
        if ctx.quantized is None:
            # The search's tensor is stored as it evaluated it: the parent's levels can cost
            # far more eval_fn than the same L2 error suggests (lm, step 50 of a chain: +7.2 %
            # restored against +2.9 % evaluated).
            q = _keep_parent_levels(x, q, prev)
        bins = max(len(prev.levels), len(q.levels))
        # zstd of the packed indices: the full encoding's first candidate, so its indices
        # take at most this (under a millisecond for a million indices); coded once, kept for
        # the full encoding
        packed = encode_packed(q.indices, len(q.levels), level)
        # a back end sized above the packed stream cannot beat the full encoding: not coded
        payload = encode_smallest(prev.indices, q.indices, bins, limit=len(packed[0]))
        if payload is None:
            return encode_full(q, level, "delta not smaller", packed=packed)
        side = encode_side(q, level)
        chunks = [side.levels, *payload.chunks, side.positions, side.values]
        if payload.nbytes >= FULL_TRIAL * min(_order0_bytes(q.indices), len(packed[0])):
            whole = encode_full(q, level, "delta not smaller", side=side, packed=packed)
            if sum(map(len, chunks)) >= sum(map(len, whole.chunks)):
                return whole
        meta = {**side.meta, "mode": "delta", "delta": payload.meta}
        meta["delta_chunks"] = len(payload.chunks)
        return Encoded(meta, chunks, q)

    def decode(self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext) -> Decoded:
        mode = meta_get(meta, "mode", str)
        if mode == "full":
            inner_id = meta_get(meta, "inner_codec", str)
            if inner_id == self.id:
                raise CorruptCheckpointError(f"{ctx.path!r}: a delta entry cannot wrap itself")
            return get_codec(inner_id).decode(meta_get(meta, "inner", dict), chunks, ctx)
        if mode != "delta":
            raise CorruptCheckpointError(f"{ctx.path!r}: unknown delta entry mode {mode!r}")
        k = meta_get(meta, "delta_chunks", int)
        if k < 0 or len(chunks) != k + 3:
            raise CorruptCheckpointError(
                f"{ctx.path!r}: delta entry has {len(chunks)} chunks, expected delta_chunks+3"
            )
        n_levels_of(meta, ctx)  # checked before the parent is looked at
        if ctx.parent is None:
            raise MissingParentError(
                f"{ctx.path!r} is delta-coded but no parent checkpoint was given; load it from "
                "the directory that holds its parent (or through CheckpointManager)"
            )
        prev = ctx.parent.quantized(ctx.path)
        if prev is None or tuple(prev.shape) != ctx.shape:
            raise MissingParentError(
                f"{ctx.path!r}: the parent checkpoint {ctx.parent.content_hash[:12]}... has no "
                f"quantized tensor of shape {list(ctx.shape)} at this path: it is not this "
                "delta's parent"
            )
        # the parent's indices are this walk's own intermediate: overwritten in place (each
        # position is read before it is written), no new array per link of a chain
        into = prev.indices if ctx.reuse_parent else None
        delta = meta_get(meta, "delta", dict)
        indices = decode_delta(delta, chunks[1 : 1 + k], prev.indices, out=into)
        side_meta = {f: meta.get(f) for f in _SIDE_FIELDS}
        side = SideParts(side_meta, chunks[0], chunks[1 + k], chunks[2 + k])
        # the delta decoder gave every index below its bins (it refuses a parent index or a
        # difference beyond them): no scan of the indices where that is the level count
        return Decoded(quantized=decode_side(side, indices, ctx, below=delta["bins"]))

    def max_numel(
        self, meta: dict[str, Any], chunk_lengths: Sequence[int], itemsize: int
    ) -> int | None:
        # a delta-coded entry is as large as its parent's (checked when decoding); one stored
        # in full is bounded by its inner codec
        inner_id, inner = meta.get("inner_codec"), meta.get("inner")
        if meta.get("mode") != "full" or inner_id == self.id or not isinstance(inner, dict):
            return None
        try:
            return get_codec(str(inner_id)).max_numel(inner, chunk_lengths, itemsize)
        except UnsupportedFormatError:
            return None

    def describe(self, meta: dict[str, Any]) -> Description:
        if not isinstance(meta, dict):
            return Description()
        if meta.get("mode") == "full":
            inner_id, inner = meta.get("inner_codec"), meta.get("inner")
            why = meta.get("why")
            inner_desc = None
            if isinstance(inner_id, str) and inner_id != self.id and isinstance(inner, dict):
                # a codec that is not installed: describe what is known
                with contextlib.suppress(UnsupportedFormatError):
                    inner_desc = get_codec(inner_id).describe(inner)
            return Description(None if inner_desc is None else inner_desc.protected, full_note(why))
        return Description(describe_quantized(meta).protected, "delta against the parent")
