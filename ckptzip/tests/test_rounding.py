"""Stochastic rounding (``QuantConfig(rounding="stochastic")``, the default of files standing
alone): unbiased, reproducible, the same indices from both kernel implementations, kept to
the tensors it suits, and invisible to readers that predate it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ckptzip
from ckptzip import kernels
from ckptzip.api import read_manifest
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.errors import ConfigError
from ckptzip.kernels import _reference as ref
from ckptzip.quantize import dequantize, quantize, rounding_seed

fast = kernels.fast
needs_fast = pytest.mark.skipif(fast is None, reason="the compiled kernels are not built here")


def test_the_rounded_value_is_the_value_in_expectation() -> None:
    """Over many draws each entry's mean rounded value is its own value (nearest rounding
    is off by up to half a gap, always the same way)."""
    lv = torch.tensor([-1.0, -0.25, 0.0, 0.5, 2.0])
    x = torch.tensor([-0.9, -0.3, -0.01, 0.1, 0.26, 0.49, 1.9, 1.2])
    idx = kernels.nearest(x, (lv[1:] + lv[:-1]) / 2)
    none = torch.zeros(0, dtype=torch.int64)
    draws = torch.stack(
        [lv[kernels.round_stochastic(x, idx, lv, none, seed).long()] for seed in range(4000)]
    )
    # the standard error of 4000 draws of a two-point value is at most gap / 126
    assert torch.allclose(draws.mean(0), x, atol=0.06)
    nearest = lv[idx.long()]
    assert (nearest - x).abs().max() > 0.2  # what nearest rounding leaves
    # every draw is one of the two levels around the value
    lower = lv[torch.searchsorted(lv, x, right=True) - 1]
    upper = lv[torch.searchsorted(lv, x, right=True)]
    assert bool(((draws == lower) | (draws == upper)).all())


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 9000),
    st.integers(1, 40),
    st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_both_implementations_round_alike(seed: int, n: int, n_levels: int, draw: int) -> None:
    assert fast is not None
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = torch.randn(n, generator=g) * 3
    if n:
        x[rng.random(n) < 0.01] = float("nan")
        x[rng.random(n) < 0.01] = float("inf")
    lv = torch.as_tensor(np.sort(rng.normal(size=n_levels) * 3), dtype=torch.float32)
    idx = (
        ref.nearest(x, (lv[1:] + lv[:-1]) / 2)
        if n_levels > 1
        else torch.zeros(n, dtype=torch.uint8)
    )
    prot = torch.from_numpy(np.flatnonzero(rng.random(n) < 0.02).astype(np.int64))
    got = fast.round_stochastic(x, idx, lv, prot, draw)
    want = ref.round_stochastic(x, idx, lv, prot, draw)
    assert torch.equal(got, want)
    assert torch.equal(got[prot], idx[prot])  # protected entries keep their index
    finite = torch.isfinite(x)
    assert torch.equal(got[~finite], idx[~finite])


def test_quantize_rounds_stochastically_reproducibly_and_measures_it() -> None:
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(3))
    a = quantize(x, QuantConfig(rounding="stochastic"))
    b = quantize(x.clone(), QuantConfig(rounding="stochastic"))
    near = quantize(x, QuantConfig())
    np.testing.assert_array_equal(a.indices, b.indices)  # the same tensor, the same file
    np.testing.assert_array_equal(a.levels, near.levels)  # only the indices differ
    np.testing.assert_array_equal(a.protected_positions, near.protected_positions)
    assert 0.05 < float(np.mean(a.indices != near.indices)) < 0.6
    y = dequantize(a)
    assert float((y - x).norm() / x.norm()) == pytest.approx(a.rel_error, rel=1e-5)
    assert near.rel_error < a.rel_error < 2 * near.rel_error
    # a tensor training has moved draws anew
    moved = quantize(x + 1e-4, QuantConfig(rounding="stochastic"))
    assert rounding_seed(x + 1e-4) != rounding_seed(x)
    changed = np.mean(moved.indices != a.indices)
    assert changed > 0.05


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_round_between_their_own_levels(dtype: torch.dtype) -> None:
    x = torch.randn(20_000, generator=torch.Generator().manual_seed(4)).to(dtype)
    q = quantize(x, QuantConfig(rounding="stochastic"))
    y = dequantize(q)
    assert y.dtype == dtype
    err = float((y.double() - x.double()).norm() / x.double().norm())
    assert err == pytest.approx(q.rel_error, rel=1e-4)


def test_configs_that_cannot_round_stochastically_are_refused() -> None:
    with pytest.raises(ConfigError, match="log_domain"):
        QuantConfig(rounding="stochastic", log_domain=True)
    with pytest.raises(ConfigError, match="prune"):
        QuantConfig(rounding="stochastic", prune=0.2)
    with pytest.raises(ConfigError, match="rounding"):
        QuantConfig(rounding="up")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="rounding"):
        CompressionConfig(rounding="up")  # type: ignore[arg-type]
    assert "rounding" not in QuantConfig().to_json()  # the JSON of older configs unchanged
    c = CompressionConfig(rounding="nearest")
    assert CompressionConfig.from_json(c.to_json()) == c
    old = CompressionConfig().to_json()
    del old["rounding"]  # a config written before the field: today's default
    assert CompressionConfig.from_json(old).rounding == "stochastic"


def test_a_file_standing_alone_rounds_its_weights_and_stores_no_rounding_key(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(128, 128)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 128)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    r = ckptzip.save(state, tmp_path / "s.ckz")
    rounding = {e.path: e.config.rounding for e in r.entries if e.config is not None}
    assert rounding["model/weight"] == "stochastic"
    assert rounding["optimizer/state/0/exp_avg"] == "nearest"
    # the manifest keeps no rounding key: readers that predate it parse every entry
    for e in read_manifest(tmp_path / "s.ckz").tensors:
        assert e.config is None or "rounding" not in e.config
    back = ckptzip.load(tmp_path / "s.ckz")
    assert back["model"]["weight"].shape == (128, 128)
    near = ckptzip.save(state, tmp_path / "n.ckz", config=CompressionConfig(rounding="nearest"))
    assert {e.config.rounding for e in near.entries if e.config is not None} == {"nearest"}


def test_the_manager_rounds_to_nearest(tmp_path: Path) -> None:
    mgr = ckptzip.CheckpointManager(tmp_path, config=CompressionConfig())
    assert mgr.config.rounding == "nearest"
    model = torch.nn.Linear(128, 128)
    r = mgr.save(0, {"model": model.state_dict()})
    mgr.close()
    assert {e.config.rounding for e in r.entries if e.config is not None} == {"nearest"}


def test_a_dcp_writer_without_error_feedback_rounds_to_nearest(tmp_path: Path) -> None:
    from ckptzip.dcp import Writer

    assert Writer(tmp_path / "a", error_feedback=False).config.rounding == "nearest"
    assert Writer(tmp_path / "b").config.rounding == "stochastic"
