"""Codec ``"residual"``: error feedback along a delta chain.

The entry stores the tensor's change against the parent's *reconstruction* (what a restore of
the parent gives at the same path, :meth:`~ckptzip.codecs.base.ParentView.reconstruction`),
quantized: ``x̂_k = x̂_{k−1} + Q(x_k − x̂_{k−1})``. The change holds one interval's training plus
what the parent's quantization left, so it is much smaller than the tensor, the same number of
levels leaves a much smaller error, and what one checkpoint's quantization left is corrected by
the next: the error of ``x̂_k`` is only the change's quantization error, along a chain of any
length. Decoding returns the reconstructed tensor (not a :class:`QuantizedTensor`); a child's
residual is coded against it in turn. The residual's config is ``EncodeContext.config.residual``
(``EncodeContext.quant`` when that is ``None``); the entry records it as its ``config`` and, as
its ``rel_error``, the error of the reconstruction against the tensor, ``‖x̂ − x‖ / ‖x‖``.

Format (``parent`` is the file's top-level field)

Mode ``"full"``: meta ``{"mode": "full", "inner_codec": "quant", "inner": <its meta>, "why":
<reason, informative>}``, the chunks the ``quant`` codec's: the parent has no lossy tensor of
this shape and dtype at the path (or the file has no parent), so the tensor is quantized in
full with ``EncodeContext.quant`` and a reader needs no parent for it.

Mode ``"residual"``: meta ``{"mode": "residual", "residual": <quant meta>}`` and the four chunks
of the ``quant`` codec (``FORMAT.md``): levels, indices, protected positions, protected values,
decoded with the entry's ``config``, shape and dtype into ``r̂`` (the ``quant`` decoding), with
one difference: the protected values are the *tensor's* exact values at those positions, not
the change's. With ``p`` the parent's reconstruction at the path (same shape and dtype, else the
parent is not this entry's: :class:`~ckptzip.errors.MissingParentError`), the tensor is
``x̂[i] = p[i] + r̂[i]`` computed in float32 (float64 for a float64 tensor) and rounded to the
dtype, then every protected position gets its stored value. Every non-finite value of the
change is protected, so NaN and ±inf of the tensor come back exactly, and so does every value
where the parent's reconstruction is not finite.

The writer computes the change as ``x − p`` in that same arithmetic, rounded to the dtype.
Every check of the ``quant`` codec applies to the four chunks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ckptzip import _pages, kernels
from ckptzip._types import QuantizedTensor
from ckptzip.codecs.base import (
    Codec,
    DecodeContext,
    Decoded,
    Description,
    EncodeContext,
    Encoded,
    ParentView,
    get_codec,
    meta_get,
    register_codec,
)
from ckptzip.codecs.quantized import (
    decode_quantized,
    decode_values,
    describe_quantized,
    encode_full,
    encode_quantized,
    full_note,
    quantized_for,
    values_decodable,
    wide_dtype,
)
from ckptzip.errors import ConfigError, CorruptCheckpointError, MissingParentError

__all__ = ["ResidualCodec", "reconstruct"]

_FULL_CODEC = "quant"


def _parent_tensor(parent: ParentView | None, path: str) -> torch.Tensor | None:
    """The parent's reconstruction at ``path`` (``None``: no view, no method, no tensor)."""
    if parent is None:
        return None
    get = getattr(parent, "reconstruction", None)  # a view written before the method
    return None if get is None else get(path)


def reconstruct(parent: torch.Tensor, q: QuantizedTensor) -> torch.Tensor:
    """``x̂ = p + r̂`` with the protected positions put back: the one definition, for the writer
    (whose cache holds it for the next residual) and the reader alike.

    Examples
    --------
    >>> from ckptzip.config import QuantConfig
    >>> from ckptzip.quantize import quantize
    >>> p, x = torch.zeros(1000), torch.linspace(-1, 1, 1000)
    >>> q = quantize(x - p, QuantConfig(bins=256))
    >>> float((reconstruct(p, q) - x).abs().max()) < 0.01
    True
    """
    # the quantizer pulls in the sketch machinery; _level_values is a level's one value
    from ckptzip.quantize import _level_values, dequantize

    flat = parent.reshape(-1)
    if (
        q.dtype in (torch.float32, torch.float64)
        and flat.dtype == q.dtype
        and flat.device.type == "cpu"
        and q.levels.size
        and q.indices.size == flat.numel()
    ):
        # one pass as the reader's (codecs.quantized.decode_values with a base): each
        # element p[i] + its level, one addition in the dtype, with no change tensor between
        # (a writer's delta save rebuilt every weight through two tensor-sized temporaries)
        table = _level_values(q.levels, q.config.log_domain, q.dtype, torch.device("cpu"))
        out = _pages.empty(flat.numel(), q.dtype)
        indices = np.ascontiguousarray(q.indices, dtype=np.uint8).reshape(-1)
        if kernels.unpack_gather(indices, 8, table, out, flat.contiguous()) >= q.levels.size:
            raise ValueError(f"an index addresses a level beyond the {q.levels.size} levels")
    else:
        wide = wide_dtype(q.dtype)
        change = dequantize(q).reshape(-1).to(wide)
        out = (flat.to(device="cpu", dtype=wide) + change).to(q.dtype)
    if q.protected_positions.size:
        pos = torch.from_numpy(q.protected_positions)
        out.index_copy_(0, pos, q.protected_values.to(q.dtype))
    return out.reshape(q.shape)


def _fused(
    inner: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext
) -> torch.Tensor | None:
    """:func:`reconstruct` of the stored change in one pass, or ``None`` where that does not
    apply (the caller then decodes the change first, then adds it).

    Where the parent's reconstruction is present and fits, and the tensor is float32 or
    float64 (its own arithmetic, so each element is one addition either way), every index
    becomes ``p[i] + level`` as it leaves the coder or the bit stream: no index array, no
    change tensor, and over the parent itself when ``ctx.reuse_parent``. The same checks as
    :func:`decode_quantized`, the same bits as :func:`reconstruct` (``tests/test_residual.py``).
    """
    if ctx.dtype not in (torch.float32, torch.float64) or ctx.parent is None:
        return None
    if not values_decodable(inner, chunks, ctx):
        return None
    p = _parent_tensor(ctx.parent, ctx.path)
    if p is None or tuple(p.shape) != ctx.shape or p.dtype != ctx.dtype or p.device.type != "cpu":
        return None
    if not p.is_contiguous():
        p = p.contiguous()
    decoded = decode_values(inner, chunks, ctx, base=p, into_base=ctx.reuse_parent)
    return decoded.reshape(ctx.shape)


# A change quantized with a relative error above this (against the tensor) may be worse
# than the tensor quantized alone: a large jump between two saves (a re-initialised head,
# LoRA's merge and reset, a loss spike) quantized with the change's few levels. Ordinary
# changes between checkpoints stay well below it (0.01-0.10 on an MLP with AdamW, 20 steps
# apart), so the tensor is quantized a second time only after such a jump.
_FULL_CHECK = 0.1


def _may_lose_to_full(rel_error: float, x: torch.Tensor, recon: torch.Tensor) -> bool:
    """Whether the stored change's reconstruction ``recon`` of ``x`` may be worse than
    ``x`` quantized alone: its relative error is above :data:`_FULL_CHECK`, or ``x`` is
    zero (no relative error to measure) and ``recon`` is not."""
    if rel_error > _FULL_CHECK:
        return True
    return rel_error == 0.0 and not torch.equal(recon, x)


def _full_is_better(alone: QuantizedTensor, rel_error: float) -> bool:
    """Whether ``alone`` (the tensor quantized by itself) errs by less than half the
    change's ``rel_error`` (not at all, where the tensor is zero and ``rel_error`` could
    not measure the change's)."""
    if rel_error == 0.0:
        return alone.rel_error == 0.0
    return alone.rel_error < rel_error / 2


def _error_text(rel_error: float) -> str:
    return f"{rel_error:.3g}" if rel_error > 0 else "unbounded (the tensor is zero, its copy not)"


def _relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    """``‖y − x‖ / ‖x‖`` over the finite entries of ``x``, in float64 (0 when ``‖x‖ = 0``),
    rounded as the quantizer rounds its own (8 significant digits)."""
    from ckptzip.quantize import _relative_error as rounded

    return rounded(*kernels.residual_error(x.reshape(-1), y.reshape(-1)))


@register_codec
class ResidualCodec(Codec):
    """The change against the parent's reconstruction, quantized; see the module docstring.

    Examples
    --------
    >>> from ckptzip.codecs.base import get_codec
    >>> get_codec("residual").id
    'residual'
    """

    id = "residual"
    lossy = True

    def encode(self, x: torch.Tensor, ctx: EncodeContext) -> Encoded:
        level = ctx.config.zstd_level

        def full(why: str) -> Encoded:
            return encode_full(quantized_for(x, ctx), level, why)

        if ctx.quant is None:
            raise ConfigError(f"{ctx.path!r}: a lossy codec needs a QuantConfig")
        if not x.is_floating_point():
            raise ConfigError(f"{ctx.path!r}: a quantized tensor cannot be {x.dtype}")
        p = _parent_tensor(ctx.parent, ctx.path)
        if p is None:
            return full("no parent" if ctx.parent is None else "parent lacks a lossy tensor here")
        if tuple(p.shape) != tuple(x.shape) or p.dtype != x.dtype:
            return full(f"parent {list(p.shape)} {str(p.dtype).removeprefix('torch.')}")
        if x.numel() == 0:
            return full("empty tensor")
        from ckptzip.quantize import quantize  # the quantizer pulls in the sketch machinery

        config = ctx.config.residual or ctx.quant
        xs = x.detach().to("cpu")
        wide = wide_dtype(x.dtype)
        change = (xs.to(wide) - p.to(device="cpu", dtype=wide)).to(x.dtype)
        q = quantize(change, config)
        # the protected entries are stored as the tensor's own values: exact after decoding
        values = xs.reshape(-1)[torch.from_numpy(q.protected_positions)].clone()
        q = replace(q, protected_values=values)
        recon = reconstruct(p, q)
        q = replace(q, rel_error=_relative_error(xs, recon))
        if _may_lose_to_full(q.rel_error, xs, recon):
            alone = quantized_for(x, ctx)
            if _full_is_better(alone, q.rel_error):
                why = (
                    f"its change against the parent quantized with relative error "
                    f"{_error_text(q.rel_error)}, the tensor itself {alone.rel_error:.3g}"
                )
                return encode_full(alone, level, why)
        meta, chunks = encode_quantized(q, level)
        return Encoded({"mode": "residual", "residual": meta}, chunks, q, recon)

    def decode(self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext) -> Decoded:
        mode = meta_get(meta, "mode", str)
        if mode == "full":
            inner_id = meta_get(meta, "inner_codec", str)
            if inner_id != _FULL_CODEC:
                raise CorruptCheckpointError(
                    f"{ctx.path!r}: a residual entry stored in full wraps {_FULL_CODEC!r}, not "
                    f"{inner_id!r}"
                )
            return get_codec(inner_id).decode(meta_get(meta, "inner", dict), chunks, ctx)
        if mode != "residual":
            raise CorruptCheckpointError(f"{ctx.path!r}: unknown residual entry mode {mode!r}")
        inner = meta_get(meta, "residual", dict)
        fused = _fused(inner, chunks, ctx)
        if fused is not None:
            return Decoded(tensor=fused)
        # every check of the stored change first: a damaged entry is damage, whatever the parent
        q = decode_quantized(inner, chunks, ctx)
        if ctx.parent is None:
            raise MissingParentError(
                f"{ctx.path!r} is a residual against its parent checkpoint but no parent was "
                "given; load it from the directory that holds its parent (or through "
                "CheckpointManager)"
            )
        p = _parent_tensor(ctx.parent, ctx.path)
        if p is None or tuple(p.shape) != ctx.shape or p.dtype != ctx.dtype:
            raise MissingParentError(
                f"{ctx.path!r}: the parent checkpoint {ctx.parent.content_hash[:12]}... has no "
                f"lossy {str(ctx.dtype).removeprefix('torch.')} tensor of shape "
                f"{list(ctx.shape)} at this path: it is not this residual's parent"
            )
        return Decoded(tensor=reconstruct(p, q))

    def max_numel(
        self, meta: dict[str, Any], chunk_lengths: Sequence[int], itemsize: int
    ) -> int | None:
        if not isinstance(meta, dict):
            return None
        mode = meta.get("mode")
        inner = meta.get("inner") if mode == "full" else meta.get("residual")
        if mode not in ("full", "residual") or not isinstance(inner, dict):
            return None
        return get_codec(_FULL_CODEC).max_numel(inner, chunk_lengths, itemsize)

    def describe(self, meta: dict[str, Any]) -> Description:
        if not isinstance(meta, dict):
            return Description()
        mode = meta.get("mode")
        if mode == "full":
            protected = describe_quantized(meta.get("inner")).protected
            return Description(protected, full_note(meta.get("why")))
        if mode == "residual":
            protected = describe_quantized(meta.get("residual")).protected
            return Description(protected, "residual against the parent's reconstruction")
        return Description()
