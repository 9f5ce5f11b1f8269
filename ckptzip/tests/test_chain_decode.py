"""A chain's restore through the one-pass decoding gives the bits of the plain path.

The plain path decodes every link of a chain in full and then applies it: a residual's change
to a :class:`QuantizedTensor`, dequantized, then added to a new tensor; a bin-index delta's
group sizes counted twice; every intermediate a fresh object. The decoding the reader runs
adds a residual's change as its indices leave the coder, over the walk's own intermediate,
decodes a tensor a residual is added to straight into values and one a bin-index delta is
taken against as its indices alone (no protected values), and hands the delta decoder
the group sizes it counted already and, for an intermediate, the parent's indices to decode
over. Every step of every layout, with and without error
feedback, restores the same bits either way, in a fresh manager and in the saving one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from ckptzip import CheckpointManager, CompressionConfig, QuantConfig, api, kernels
from ckptzip._types import IndicesOnly
from ckptzip.api import read_manifest
from ckptzip.codecs import residual

CONFIG = CompressionConfig(quant=QuantConfig(bins=16, protect=0.005), min_numel=256)


def _plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the reader decode as before the one-pass decoding."""
    delta_decode = kernels.delta_decode

    def counting(
        prev: np.ndarray,
        symbols: np.ndarray,
        bins: int,
        rearrange: bool,
        groups: Any = None,
        out: Any = None,
    ) -> np.ndarray:
        # counts the groups itself, and decodes into a new array, never over the parent's
        return delta_decode(prev, symbols, bins, rearrange)

    monkeypatch.setattr(residual, "_fused", lambda *args: None)
    monkeypatch.setattr(api, "_residual_child", lambda entry: False)
    monkeypatch.setattr(api, "_index_delta_child", lambda entry: False)
    monkeypatch.setattr(kernels, "delta_decode", counting)


def _flat(x: Any, out: dict[str, Any], at: str = "") -> dict[str, Any]:
    if isinstance(x, dict):
        for k, v in x.items():
            _flat(v, out, f"{at}/{k}")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            _flat(v, out, f"{at}/{i}")
    else:
        out[at] = x
    return out


def _same_bits(a: Any, b: Any) -> None:
    fa, fb = _flat(a, {}), _flat(b, {})
    assert fa.keys() == fb.keys()
    for k, x in fa.items():
        y = fb[k]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape, k
            bx, by = (t.reshape(-1).contiguous().view(torch.uint8) for t in (x, y))
            assert torch.equal(bx, by), k
        else:
            assert x == y, k


def _train(directory: Path, *, error_feedback: bool, layout: str, steps: int) -> None:
    torch.manual_seed(0)
    # one weight over the lanes' 65 536 symbols, the others under: both index layouts
    model = nn.Sequential(nn.Linear(256, 320), nn.Tanh(), nn.Linear(320, 40))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    mgr = CheckpointManager(
        directory,
        model=model,
        optimizer=opt,
        config=CONFIG,
        keyframe_every=6,
        layout=layout,  # type: ignore[arg-type]
        error_feedback=error_feedback,
    )
    for step in range(steps):
        for _ in range(3):
            x = torch.randn(32, 256, generator=g)
            loss = model(x).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        mgr.save(step)
    mgr.close()


@pytest.mark.parametrize("layout", ["chain", "skip"])
@pytest.mark.parametrize("error_feedback", [True, False])
def test_every_step_restores_the_plain_paths_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str, error_feedback: bool
) -> None:
    steps = 8  # a keyframe, five deltas, a keyframe, a delta
    _train(tmp_path, error_feedback=error_feedback, layout=layout, steps=steps)
    codecs = {
        (e.codec, str(e.meta.get("mode")))
        for s in range(steps)
        for e in read_manifest(tmp_path / f"step-{s:08d}.ckz").tensors
    }
    assert ("delta", "delta") in codecs
    assert (("residual", "residual") in codecs) == error_feedback
    fused = residual._fused
    one_pass: list[bool] = []  # reuse_parent of each residual added in one pass

    def counted(inner: Any, chunks: Any, ctx: Any) -> torch.Tensor | None:
        out = fused(inner, chunks, ctx)
        if out is not None:
            one_pass.append(ctx.reuse_parent)
        return out

    decode_entry = api._decode_entry
    partial: list[str] = []  # paths of the intermediates decoded for their indices alone

    def recorded(*args: Any, **kwargs: Any) -> Any:
        out = decode_entry(*args, **kwargs)
        if isinstance(out.value(), IndicesOnly):
            assert kwargs.get("indices_only")
            partial.append(args[1].path)
        return out

    with monkeypatch.context() as m:
        m.setattr(residual, "_fused", counted)
        m.setattr(api, "_decode_entry", recorded)
        fresh = [CheckpointManager(tmp_path).load(s) for s in range(steps)]
        walking = CheckpointManager(tmp_path)  # its cache holds the previous step's tensors
        along = [walking.load(s) for s in range(steps)]
    # under error feedback the large weight's residuals were added in one pass, some over the
    # walk's own intermediate (a chain's inner links), some into a new tensor (the last link)
    assert set(one_pass) == ({True, False} if error_feedback else set())
    # the moments (and without error feedback the weights) went through the inner links as
    # indices only
    assert any("exp_avg" in p for p in partial)
    assert any("weight" in p for p in partial) == (not error_feedback)
    with monkeypatch.context() as m:
        _plain_path(m)
        plain = [CheckpointManager(tmp_path).load(s) for s in range(steps)]
    for s in range(steps):
        _same_bits(fresh[s], plain[s])
        _same_bits(along[s], plain[s])


def test_an_indices_only_link_cannot_be_dequantized() -> None:
    """What the walk decodes for a bin-index delta's sake lacks its protected values: it must
    never pass for the tensor."""
    from ckptzip.quantize import dequantize, quantize

    q = quantize(torch.randn(1000), QuantConfig(bins=8, protect=0.01))
    assert q.protected_positions.size
    fields = {f: getattr(q, f) for f in q.__dataclass_fields__}
    partial = IndicesOnly(**fields)
    with pytest.raises(ValueError, match="IndicesOnly"):
        dequantize(partial)
