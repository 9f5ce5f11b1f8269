"""Codec ``"step"``: an Adam first moment stored as the step it makes, over its second moment.

Adam moves each weight by ``m / (sqrt(v) + eps)``. Levels of ``m`` itself are shared by
entries whose step sizes differ by orders of magnitude, so the small ones over a small ``v``
come back many times their size (or, fitted to the step, the levels crowd near zero and the
large entries cost bits). This codec quantizes the step ``u = m / (sqrt(v̂) + eps)`` with the
entry's config, ``v̂`` being the second moment *as this same file stores it* (a sibling entry,
:class:`~ckptzip.codecs.base.SiblingView`), and rebuilds ``m̂ = û · (sqrt(v̂) + eps)``: each
entry's levels scale with its own step size. Measured offline on ``llm``, ``gru`` and
``chargru`` (README, "Adam's first moment as its step"): 4 levels of the step cost 0.95-1.15
bits per entry where 4 levels of ``m`` fitted to the step cost 1.3-1.8, at a smaller or
similar error of the step. The entry never refers to the parent checkpoint.

Format: meta ``{"second": <path of the second moment in the same file>, "eps": <float>,
"step": <quant meta>}`` and the four chunks of the ``quant`` codec (``FORMAT.md``): levels,
indices, protected positions, protected values, decoded with the entry's ``config``, shape and
dtype into ``û`` (the ``quant`` decoding), with one difference: the protected values are the
*moment's* exact values at those positions, not the step's. With ``v̂`` the decoded tensor at
``second`` (same shape, a floating-point dtype, and an entry that does not itself read
siblings; else :class:`~ckptzip.errors.CorruptCheckpointError`), the tensor is
``m̂[i] = û[i] · (sqrt(max(v̂[i], 0)) + eps)`` computed in float32 (float64 for a float64
tensor) and rounded to the dtype, then every protected position gets its stored value. The
writer protects every position whose step is not finite (a non-finite ``m`` or ``v̂``), so
those come back exactly. The entry's ``config`` is the step's (``fit="step"``); its
``rel_error`` is the moment's, ``‖m̂ − m‖ / ‖m‖``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from ckptzip._types import QuantizedTensor
from ckptzip.codecs.base import (
    Codec,
    DecodeContext,
    Decoded,
    Description,
    EncodeContext,
    Encoded,
    SiblingView,
    get_codec,
    meta_get,
    register_codec,
)
from ckptzip.codecs.quantized import (
    decode_quantized,
    describe_quantized,
    encode_quantized,
    wide_dtype,
)
from ckptzip.errors import ConfigError, CorruptCheckpointError

__all__ = ["StepCodec", "step_scale"]

_INNER = "quant"


def step_scale(v: torch.Tensor, eps: float, dtype: torch.dtype) -> torch.Tensor:
    """``sqrt(max(v, 0)) + eps``, flat, on the CPU, in the arithmetic of ``dtype``'s moment:
    the one definition for the writer and the reader.

    Examples
    --------
    >>> step_scale(torch.tensor([4.0, -1.0]), 0.5, torch.float32).tolist()
    [2.5, 0.5]
    """
    wide = wide_dtype(dtype)
    return v.reshape(-1).to(device="cpu", dtype=wide).clamp_min(0.0).sqrt() + eps


def rebuild(q: QuantizedTensor, scale: torch.Tensor) -> torch.Tensor:
    """``m̂ = û · scale`` with the protected positions put back (writer and reader alike)."""
    from ckptzip.quantize import dequantize  # the quantizer pulls in the sketch machinery

    step = dequantize(q).reshape(-1).to(scale.dtype)
    out = (step * scale).to(q.dtype)
    if q.protected_positions.size:
        pos = torch.from_numpy(q.protected_positions)
        out.index_copy_(0, pos, q.protected_values.to(q.dtype))
    return out.reshape(q.shape)


def _second(siblings: SiblingView | None, path: str, shape: tuple[int, ...]) -> torch.Tensor | None:
    if siblings is None:
        return None
    v = siblings.value(path)
    if v is None or tuple(v.shape) != shape or not v.is_floating_point():
        return None
    return v


def _relative_error(x: torch.Tensor, y: torch.Tensor) -> float:
    from ckptzip.codecs.residual import _relative_error as rel

    return rel(x, y)


@register_codec
class StepCodec(Codec):
    """Adam's first moment as its step over the stored second moment; see the module
    docstring.

    Examples
    --------
    >>> from ckptzip.codecs.base import get_codec
    >>> get_codec("step").reads_siblings
    True
    """

    id = "step"
    lossy = True
    reads_siblings = True

    def encode(self, x: torch.Tensor, ctx: EncodeContext) -> Encoded:
        from ckptzip.plan import ADAM_EPS, second_moment_path
        from ckptzip.quantize import quantize

        if ctx.quant is None:
            raise ConfigError(f"{ctx.path!r}: a lossy codec needs a QuantConfig")
        if not x.is_floating_point():
            raise ConfigError(f"{ctx.path!r}: a quantized tensor cannot be {x.dtype}")
        found = [
            (p, v)
            for p in second_moment_path(ctx.path)
            if (v := _second(ctx.siblings, p, tuple(x.shape))) is not None
        ]
        if not found:
            raise ConfigError(
                f"{ctx.path!r}: the codec 'step' needs the file's second moment of the same "
                "shape beside it (plan.second_moment_path); the planner gives it no other"
            )
        second, v = found[0]
        eps = ADAM_EPS
        xs = x.detach().to("cpu")
        scale = step_scale(v, eps, x.dtype)
        step = xs.reshape(-1).to(scale.dtype) / scale
        # a step that is not finite (m or v̂ not finite) is protected: exact after decoding
        step = torch.where(torch.isfinite(scale), step, torch.full_like(step, math.nan))
        q = quantize(step.to(x.dtype).reshape(x.shape), ctx.quant, scores=ctx.scores)
        values = xs.reshape(-1)[torch.from_numpy(q.protected_positions)].clone()
        q = replace(q, protected_values=values)
        recon = rebuild(q, scale)
        q = replace(q, rel_error=_relative_error(xs, recon))
        meta, chunks = encode_quantized(q, ctx.config.zstd_level)
        return Encoded({"second": second, "eps": eps, "step": meta}, chunks, q, recon)

    def decode(self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext) -> Decoded:
        second = meta_get(meta, "second", str)
        eps = meta_get(meta, "eps", (int, float))
        if not math.isfinite(eps) or eps < 0:
            raise CorruptCheckpointError(f"{ctx.path!r}: step entry with eps={eps!r}")
        q = decode_quantized(meta_get(meta, "step", dict), chunks, ctx)
        v = _second(ctx.siblings, second, ctx.shape)
        if v is None:
            raise CorruptCheckpointError(
                f"{ctx.path!r} is stored as Adam's step over {second!r}, which the file does "
                f"not hold as a floating-point tensor of shape {list(ctx.shape)}"
            )
        return Decoded(tensor=rebuild(q, step_scale(v, float(eps), ctx.dtype)))

    def max_numel(
        self, meta: dict[str, Any], chunk_lengths: Sequence[int], itemsize: int
    ) -> int | None:
        inner = meta.get("step") if isinstance(meta, dict) else None
        if not isinstance(inner, dict):
            return None
        return get_codec(_INNER).max_numel(inner, chunk_lengths, itemsize)

    def describe(self, meta: dict[str, Any]) -> Description:
        if not isinstance(meta, dict):
            return Description()
        second = meta.get("second")
        protected = describe_quantized(meta.get("step")).protected
        note = f"Adam's step over {second}" if isinstance(second, str) else ""
        return Description(protected, note)
