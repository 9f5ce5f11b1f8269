"""Codec ``"exact"``: the tensor's raw bytes (little-endian, its own dtype) through zstd.

Multi-byte elements go through the lossless stage as byte planes (see :mod:`ckptzip.entropy`),
which is where float tensors compress at all.

Bit-exact for every dtype in :data:`ckptzip.structure.DTYPES`, including bf16 and NaN
payloads, because the bytes are copied, never converted. Meta: ``{"stage": <entropy record>}``
and, since 0.2, ``"why"``: the plan's reason for storing the tensor exactly (informative,
shown by ``ckptzip inspect``); one chunk.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ckptzip import entropy
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
from ckptzip.errors import CorruptCheckpointError
from ckptzip.structure import dtype_name

__all__ = ["ExactCodec", "tensor_from_bytes", "tensor_to_bytes"]


def tensor_to_bytes(x: torch.Tensor) -> bytes:
    """The elements of ``x`` in C order as little-endian bytes of its own dtype.

    Examples
    --------
    >>> tensor_to_bytes(torch.tensor([1, 2], dtype=torch.int16))
    b'\\x01\\x00\\x02\\x00'
    """
    flat = x.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    raw = flat.view(torch.uint8).numpy()  # a view of every dtype's bytes, bf16 included
    if sys.byteorder == "big" and flat.element_size() > 1:
        raw = raw.reshape(-1, flat.element_size())[:, ::-1]
    return raw.tobytes()


def tensor_from_bytes(data: bytes, dtype: torch.dtype, shape: Sequence[int]) -> torch.Tensor:
    """Invert :func:`tensor_to_bytes`; the length must match ``shape`` and ``dtype`` exactly.

    Examples
    --------
    >>> tensor_from_bytes(b"\\x01\\x00\\x02\\x00", torch.int16, (2,)).tolist()
    [1, 2]
    """
    size = dtype.itemsize
    numel = math.prod(shape)
    if len(data) != numel * size:
        raise CorruptCheckpointError(
            f"{len(data)} bytes cannot hold a {dtype} tensor of shape {list(shape)} "
            f"({numel * size} bytes expected)"
        )
    if numel == 0:
        return torch.empty(tuple(shape), dtype=dtype)
    if sys.byteorder == "big" and size > 1:
        raw = np.frombuffer(data, dtype=np.uint8).reshape(-1, size)[:, ::-1]
        return torch.from_numpy(raw.copy()).view(dtype).reshape(tuple(shape))
    # a writable copy the tensor owns (bytes are immutable): one copy, no NumPy in between
    # (a load's many small exact tensors: 12 -> 5 us each)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(tuple(shape))


@register_codec
class ExactCodec(Codec):
    """Lossless storage of any tensor: raw bytes, zstd when it helps.

    Examples
    --------
    >>> from ckptzip.config import CompressionConfig
    >>> x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    >>> enc = ExactCodec().encode(x, EncodeContext("x", CompressionConfig()))
    >>> out = ExactCodec().decode(enc.meta, enc.chunks, DecodeContext("x", (2, 3), torch.int32))
    >>> torch.equal(out.materialize(), x)
    True
    """

    id = "exact"
    lossy = False

    def encode(self, x: torch.Tensor, ctx: EncodeContext) -> Encoded:
        payload, info = entropy.encode(
            tensor_to_bytes(x), ctx.config.zstd_level, itemsize=x.element_size()
        )
        meta: dict[str, Any] = {"stage": info}
        if ctx.reason is not None:
            meta["why"] = ctx.reason
        return Encoded(meta=meta, chunks=[payload])

    def decode(self, meta: dict[str, Any], chunks: Sequence[bytes], ctx: DecodeContext) -> Decoded:
        if len(chunks) != 1:
            raise CorruptCheckpointError(
                f"exact tensor {ctx.path!r} has {len(chunks)} chunks, expected 1"
            )
        stage = meta_get(meta, "stage", dict)
        expected = math.prod(ctx.shape) * ctx.dtype.itemsize
        if stage.get("size") != expected:  # checked before decompressing anything
            raise CorruptCheckpointError(
                f"exact tensor {ctx.path!r}: stage size {stage.get('size')!r} disagrees with "
                f"its {dtype_name(ctx.dtype)} shape {list(ctx.shape)} ({expected} bytes)"
            )
        data = entropy.decode(chunks[0], stage)
        return Decoded(tensor=tensor_from_bytes(data, ctx.dtype, ctx.shape))

    def max_numel(
        self, meta: dict[str, Any], chunk_lengths: Sequence[int], itemsize: int
    ) -> int | None:
        if len(chunk_lengths) != 1 or itemsize < 1:
            return None
        return entropy.max_decoded_size(chunk_lengths[0]) // itemsize

    def describe(self, meta: dict[str, Any]) -> Description:
        why = meta.get("why") if isinstance(meta, dict) else None
        return Description(note=why if isinstance(why, str) else "")
