"""A conformance check for codec implementers: run a codec the way the pipeline does.

:func:`check_round_trip` encodes a tensor, passes the metadata through strict JSON as the
container does, builds the :class:`~ckptzip.codecs.base.DecodeContext` the pipeline would,
decodes, and checks the contract of :mod:`ckptzip.codecs.base`: ``decode`` returns a
:class:`~ckptzip.codecs.base.Decoded` of the right shape and dtype, ``describe`` accepts the
meta, non-lossy codecs are bit-exact, lossy ones keep NaN/±inf and protected entries exact and
stay within the error they recorded. Every codec in this package runs it in
``tests/test_codecs.py``; a new codec should too.

Examples
--------
>>> import torch
>>> from ckptzip.config import QuantConfig
>>> out = check_round_trip("quant", torch.randn(5000), quant=QuantConfig(bins=16))
>>> out.shape
torch.Size([5000])
"""

from __future__ import annotations

import json
import math

import torch

from ckptzip.codecs.base import (
    DecodeContext,
    Decoded,
    Description,
    EncodeContext,
    ParentView,
    SiblingView,
    get_codec,
)
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.config import CompressionConfig, QuantConfig

__all__ = ["check_round_trip"]


def check_round_trip(
    codec_id: str,
    x: torch.Tensor,
    *,
    quant: QuantConfig | None = None,
    parent: ParentView | None = None,
    config: CompressionConfig | None = None,
    path: str = "t",
    siblings: SiblingView | None = None,
) -> torch.Tensor:
    """Encode and decode ``x`` with codec ``codec_id``, assert the contract, return the result.

    ``path`` is the tensor's path; ``siblings`` the file's other entries, for a codec that
    reads them (``"step"``: an ``exp_avg`` path and its ``exp_avg_sq``). Raises
    ``AssertionError`` (with the reason) where the codec breaks the contract; returns the
    decoded tensor, materialized.
    """
    codec = get_codec(codec_id)
    config = config or CompressionConfig()
    ctx = EncodeContext(path, config, quant=quant, parent=parent, siblings=siblings)
    enc = codec.encode(x, ctx)
    assert all(isinstance(c, bytes) for c in enc.chunks), "chunks must be bytes"
    meta = json.loads(json.dumps(enc.meta, allow_nan=False))  # what the manifest holds
    bound = codec.max_numel(meta, [len(c) for c in enc.chunks], x.element_size())
    assert bound is None or x.numel() <= bound, f"max_numel {bound} < numel {x.numel()}"
    q = enc.quantized
    out = codec.decode(
        meta, list(enc.chunks), DecodeContext.of_encoded(path, x, enc, parent, siblings)
    )
    assert isinstance(out, Decoded), f"decode returned {type(out).__name__}, not Decoded"
    assert isinstance(codec.describe(meta), Description), "describe must return a Description"
    y = out.materialize()
    assert tuple(y.shape) == tuple(x.shape), f"shape {tuple(y.shape)} != {tuple(x.shape)}"
    assert y.dtype == x.dtype, f"dtype {y.dtype} != {x.dtype}"
    xs, ys = x.detach().cpu(), y.cpu()
    if not codec.lossy or q is None:
        assert tensor_to_bytes(xs) == tensor_to_bytes(ys), "a lossless codec changed bits"
        return y
    xf, yf = xs.reshape(-1), ys.reshape(-1)
    finite = torch.isfinite(xf)
    assert tensor_to_bytes(xf[~finite]) == tensor_to_bytes(yf[~finite]), "NaN/inf not exact"
    pos = torch.from_numpy(q.protected_positions)
    assert tensor_to_bytes(xf[pos]) == tensor_to_bytes(yf[pos]), "protected entries not exact"
    a, b = xf[finite].double(), yf[finite].double()
    norm = float(a.norm())
    if norm > 0 and math.isfinite(norm) and math.isfinite(q.rel_error):
        err = float((a - b).norm()) / norm
        # the recorded error is measured in float32: allow its rounding, nothing more
        assert err <= q.rel_error * (1 + 1e-4) + 1e-7, f"error {err} > recorded {q.rel_error}"
    return y
