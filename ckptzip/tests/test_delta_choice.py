"""Which encoding the delta codec keeps where a tensor's layout has structure.

Adam moments of an MLP's layers (``benchmarks/dcp.py``) have rows that repeat and rows that
change together. Two things made their deltas 8 % larger than before: the full encoding was
skipped whenever the delta was below 0.4 of the indices' order-0 entropy, though zstd on the
packed rows came far below that entropy, and no back end saw patterns in the runs of
unchanged bins (run-length + LZMA, which did, had been replaced by ``"rle+ans"``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

import ckptzip
from ckptzip.api import read_manifest
from ckptzip.bindiff import LZ_METHOD, encode_smallest
from ckptzip.codecs.base import EncodeContext, get_codec
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.quantize import quantize


class _Parent:
    def __init__(self, table: dict[str, object]) -> None:
        self.table = table
        self.content_hash = "cd" * 32

    def quantized(self, path: str) -> object:
        return self.table.get(path)


def _rows(patterns: torch.Tensor, rows: int) -> torch.Tensor:
    """A matrix whose rows cycle through ``patterns`` (rows of equal bins far apart)."""
    return patterns.repeat(rows // patterns.shape[0], 1)


def _bytes(enc: object) -> int:
    return sum(map(len, enc.chunks))  # type: ignore[attr-defined]


def test_the_full_encoding_is_tried_where_zstd_beats_the_entropy() -> None:
    g = torch.Generator().manual_seed(0)
    patterns = torch.randn(8, 512, generator=g)
    parent_x = _rows(patterns, 1024)
    child_x = _rows(patterns + 0.05 * torch.randn(8, 512, generator=g), 1024)
    quant = QuantConfig(bins=16)
    config = CompressionConfig(quant=quant, min_numel=0)
    parent = _Parent({"w": quantize(parent_x, quant)})
    delta = get_codec("delta").encode(
        child_x, EncodeContext("w", config, quant=quant, parent=parent)
    )
    full = get_codec("quant").encode(child_x, EncodeContext("w", config, quant=quant))
    # the delta is a small fraction of the entropy (the old rule kept it untried), but the
    # full encoding, eight rows and their repeats, is smaller still
    assert delta.meta["mode"] == "full"
    assert _bytes(delta) <= _bytes(full) + 64


def test_an_mlps_moments_delta_as_before_the_kernel_work(tmp_path: Path) -> None:
    """``benchmarks/dcp.py``'s state, small: 12 layers of 256, AdamW, one step, then five.
    The delta was 335 922 bytes with neither fix (7 % above what run-length + LZMA gave)."""
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(12):
        blocks += [torch.nn.Linear(256, 256), torch.nn.GELU()]
    model = torch.nn.Sequential(*blocks)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train(steps: range) -> dict[str, object]:
        for s in steps:
            x = torch.randn(32, 256, generator=torch.Generator().manual_seed(s))
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    # the keyframe's weights rounded to nearest and every tensor at quant's 16 levels, as
    # before stochastic rounding and the standalone levels became the defaults of files
    # standing alone: its bin-index deltas are what this test pins (a stochastically rounded
    # parent changes a quarter of the weights' indices: 411 KB here)
    nearest = CompressionConfig(rounding="nearest", standalone=None)
    ckptzip.save(train(range(1)), tmp_path / "a.ckz", threads=1, config=nearest)
    ckptzip.save(
        train(range(1, 6)), tmp_path / "b.ckz", parent=tmp_path / "a.ckz", threads=1, config=nearest
    )
    methods = {
        e.meta.get("delta", {}).get("method") for e in read_manifest(tmp_path / "b.ckz").tensors
    }
    assert LZ_METHOD in methods
    assert (tmp_path / "b.ckz").stat().st_size <= 328_000  # 323 464 here
    assert torch.equal(
        ckptzip.load(tmp_path / "b.ckz")["optim"]["state"][0]["step"], torch.tensor(6.0)
    )


def test_no_back_end_is_coded_above_the_limit() -> None:
    rng = np.random.default_rng(1)
    prev = rng.integers(0, 16, 1 << 18).astype(np.uint8)
    now = rng.integers(0, 16, prev.size).astype(np.uint8)  # unrelated: about 4 bits each
    assert encode_smallest(prev, now, 16, limit=1000) is None
    assert encode_smallest(prev, now, 16, limit=None) is not None
