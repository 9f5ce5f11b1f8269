"""Codec ``"delta"``: a quantized tensor stored as bin-index differences against its parent.

The tensor is quantized in full by the ``"quant"`` codec, so the error of every checkpoint is
its own and never accumulates along a chain. The entry keeps that codec's chunks except the
index chunk, which becomes a :mod:`ckptzip.delta` payload against the parent's indices at the
same path. When there is no parent, the parent stored this path exactly or with another
shape, or the delta is not smaller than the full encoding (the bin layout moved too much), the
entry holds the ``"quant"`` encoding unchanged, so a reader needs no parent for that tensor.

Format (the ``quant`` codec's is in ``FORMAT.md``; ``parent`` is the file's top-level field)

Mode ``"full"``: meta ``{"mode": "full", "inner_codec": id, "inner": <that codec's meta>,
"why": <reason, informative>}``; the chunks are that codec's.

Mode ``"delta"``: meta ``{"mode": "delta", "delta": D, "delta_chunks": k, "n_levels",
"n_protected", "positions_stage", "values_stage"}`` (the last four as in ``quant``); chunks:
``0`` levels, ``1 .. k`` the index payload, ``k+1`` protected positions, ``k+2`` protected
values (levels, positions and values exactly as ``quant``'s chunks 0, 2, 3). ``D`` holds
``method``, ``bins`` (B, 1..256), ``n`` (= numel), ``rearrange`` (bool) and the method's
sizes. With ``p`` the parent entry's indices and ``x`` this entry's, the symbols are
``d[i] = (p[i] - x[i]) mod B``, listed in position order, or with ``rearrange`` in the order
of a stable ascending sort of ``p`` (all positions whose parent index is 0, in position order,
then 1, ...); a reader recomputes that order from ``p`` and inverts ``x[i] = (p[i] - d[i])
mod B``. Methods (k = 1 in each):

* ``"rle+lzma"`` (written by this version): a raw LZMA2 stream (no container; filter options
  ``dict_size`` 2^20, ``lc`` 3, ``lp`` 0, ``pb`` 0) of ``R || V`` where ``V`` holds the
  ``D["nonzero"]`` nonzero symbols in order and ``R``, for each of them, the length ``g`` of
  the zero run before it as ``g // 255`` bytes 255 and one byte ``g % 255``; zeros after the
  last nonzero symbol are implied by ``n``. ``D["rle_bytes"]`` = len(R || V).
* ``"rle+zstd"``: the same ``R || V`` as one zstd frame with its content size.
* ``"bitmap+zstd"``: one zstd frame of the MSB-first bitmap of ``d != 0`` (ceil(n/8) bytes)
  then the nonzero symbols; ``D["nonzero"]`` counts them.
* ``"zstd"`` / ``"lzma"``: the n symbols as one zstd frame / raw LZMA2 stream as above.

Every decoded size is bounded by ``n`` and ``D`` before decompressing; the decoded indices and
the rest go through :func:`ckptzip.codecs.quantized.decode_quantized`'s checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ckptzip._types import QuantizedTensor
from ckptzip.codecs.base import (
    Codec,
    DecodeContext,
    EncodeContext,
    Encoded,
    get_codec,
    meta_get,
    register_codec,
)
from ckptzip.codecs.quantized import decode_quantized
from ckptzip.delta import DEFAULT_METHOD, decode_delta, encode_delta
from ckptzip.errors import CorruptCheckpointError, MissingParentError
from ckptzip.packing import bits_for

__all__ = ["DeltaCodec"]

_FULL_CODEC = "quant"
# The quant codec's fields that describe its index chunk, which a delta entry replaces.
_INDEX_FIELDS = ("bits", "index_layout", "index_stage")


def _nbytes(chunks: Sequence[bytes]) -> int:
    return sum(len(c) for c in chunks)


def _wrap_full(enc: Encoded, codec_id: str, reason: str) -> Encoded:
    meta = {"mode": "full", "inner_codec": codec_id, "inner": enc.meta, "why": reason}
    return Encoded(meta, list(enc.chunks), enc.quantized)


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
        if ctx.quant is None:
            return _wrap_full(get_codec("exact").encode(x, ctx), "exact", "exact tensor")
        full = get_codec(_FULL_CODEC).encode(x, ctx)
        q = full.quantized
        if q is None:
            return _wrap_full(full, _FULL_CODEC, "not quantized")
        prev = None if ctx.parent is None else ctx.parent.quantized(ctx.path)
        if prev is None:
            why = "no parent" if ctx.parent is None else "parent lacks a quantized tensor here"
            return _wrap_full(full, _FULL_CODEC, why)
        if tuple(prev.shape) != tuple(q.shape):
            return _wrap_full(full, _FULL_CODEC, f"parent shape {list(prev.shape)}")
        if q.numel == 0:
            return _wrap_full(full, _FULL_CODEC, "empty tensor")
        bins = max(len(prev.levels), len(q.levels))
        payload = encode_delta(prev.indices, q.indices, bins, method=DEFAULT_METHOD)
        # The quant codec's chunks are [levels, indices, positions, values] (its docstring):
        # keep all but the index chunk.
        meta = dict(full.meta)
        delta_chunks = [full.chunks[0], *payload.chunks, *full.chunks[2:]]
        if _nbytes(delta_chunks) >= _nbytes(full.chunks):
            return _wrap_full(full, _FULL_CODEC, "delta not smaller")
        for key in _INDEX_FIELDS:
            meta.pop(key, None)
        meta.update(mode="delta", delta=payload.meta, delta_chunks=len(payload.chunks))
        return Encoded(meta, delta_chunks, q)

    def decode(
        self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext
    ) -> torch.Tensor | QuantizedTensor:
        mode = meta_get(meta, "mode", str)
        if mode == "full":
            inner_id = meta_get(meta, "inner_codec", str)
            if inner_id == self.id:
                raise CorruptCheckpointError(f"{ctx.path!r}: a delta entry cannot wrap itself")
            inner = dict(meta_get(meta, "inner", dict))
            # The pipeline's validated keys (shape, dtype, config, rel_error) belong to the
            # entry, so the inner codec sees them exactly as if it had written the entry.
            for key in ("shape", "dtype", "config", "rel_error"):
                if key in meta:
                    inner[key] = meta[key]
            return get_codec(inner_id).decode(inner, chunks, ctx)
        if mode != "delta":
            raise CorruptCheckpointError(f"{ctx.path!r}: unknown delta entry mode {mode!r}")
        return self._decode_delta(meta, chunks, ctx)

    def _decode_delta(
        self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext
    ) -> QuantizedTensor:
        k = meta_get(meta, "delta_chunks", int)
        if k < 0 or len(chunks) != k + 3:
            raise CorruptCheckpointError(
                f"{ctx.path!r}: delta entry has {len(chunks)} chunks, expected delta_chunks+3"
            )
        n_levels = meta_get(meta, "n_levels", int)
        if not 1 <= n_levels <= 256:
            raise CorruptCheckpointError(f"{ctx.path!r}: n_levels={n_levels} is out of range")
        shape = tuple(meta_get(meta, "shape", list))
        if ctx.parent is None:
            raise MissingParentError(
                f"{ctx.path!r} is delta-coded but no parent checkpoint was given; load it from "
                "the directory that holds its parent (or through CheckpointManager)"
            )
        prev = ctx.parent.quantized(ctx.path)
        if prev is None or tuple(prev.shape) != shape:
            raise MissingParentError(
                f"{ctx.path!r}: the parent checkpoint {ctx.parent.content_hash[:12]}... has no "
                f"quantized tensor of shape {list(shape)} at this path: it is not this delta's "
                "parent"
            )
        indices = decode_delta(meta_get(meta, "delta", dict), chunks[1 : 1 + k], prev.indices)
        # Hand the rebuilt indices to the quant codec's decoder as a raw byte layout, so the
        # levels, protected positions and values are checked by that one implementation.
        full_meta = {key: v for key, v in meta.items() if key not in ("mode", "delta")}
        full_meta.update(
            bits=bits_for(n_levels),
            index_layout="bytes",
            index_stage={"enc": "raw", "size": int(indices.size)},
        )
        full_chunks = [chunks[0], indices.tobytes(), chunks[1 + k], chunks[2 + k]]
        return decode_quantized(full_meta, full_chunks, ctx)
