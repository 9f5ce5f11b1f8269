"""The quantizer: round-trip properties, exact parts, pruning/protection counts, levels, errors."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest
import torch
from _checks import use_kernels
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptzip._types import QuantizedTensor
from ckptzip.config import QuantConfig
from ckptzip.errors import ConfigError, CorruptCheckpointError, UnsupportedValueError
from ckptzip.quantize import assign, dequantize, fit_levels, quantize

_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

# compare raw bits: NaN == NaN, and -0.0 != 0.0
_BITS = {
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float32: torch.int32,
    torch.float64: torch.int64,
}

_SPECIALS = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-45, -1e-40, 5e-324]


@st.composite
def _tensors(draw: st.DrawFn) -> torch.Tensor:
    dtype = draw(st.sampled_from(_DTYPES))
    n = draw(st.integers(0, 300))
    scale = draw(st.sampled_from([1e-3, 1.0, 50.0]))
    seed = draw(st.integers(0, 2**16))
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    x = x * scale
    if n and draw(st.booleans()):
        picks = draw(st.lists(st.tuples(st.integers(0, n - 1), st.sampled_from(_SPECIALS))))
        for i, v in picks:
            x[i] = v
    if n and draw(st.booleans()):  # few distinct values
        x = torch.round(x)
    shape = draw(st.sampled_from([(n,), (1, n), (n, 1)]))
    return x.to(dtype).reshape(shape)


_CONFIGS = st.builds(
    QuantConfig,
    bins=st.sampled_from([2, 3, 4, 8, 16, 32, 256]),
    prune=st.sampled_from([0.0, 0.1, 0.4]),
    protect=st.sampled_from([0.0, 0.0005, 0.01, 0.1]),
    prune_metric=st.sampled_from(["magnitude", "sensitivity"]),
)


def _measured_rel_error(x: torch.Tensor, y: torch.Tensor) -> float:
    fin = torch.isfinite(x)
    xd, yd = x[fin].double(), y[fin].double()
    norm = float(xd.norm())
    return float((yd - xd).norm()) / norm if norm > 0 else 0.0


def _check_round_trip(x: torch.Tensor, cfg: QuantConfig, q: QuantizedTensor) -> torch.Tensor:
    y = dequantize(q)
    assert y.shape == x.shape and y.dtype == x.dtype
    n = x.numel()
    assert q.indices.dtype == np.uint8 and q.indices.size == n
    assert q.levels.dtype == np.float64 and np.all(np.diff(q.levels) > 0)
    assert q.levels.size <= cfg.bins
    if n:
        assert int(q.indices.max()) < q.levels.size
    if cfg.prune > 0 and n:
        assert 0.0 in q.levels.tolist()
    flat_x, flat_y = x.reshape(-1), y.reshape(-1)
    # non-finite values are protected; protected values are bit-exact (NaN stays NaN)
    bad = (~torch.isfinite(flat_x)).nonzero().squeeze(1).numpy()
    assert set(bad.tolist()) <= set(q.protected_positions.tolist())
    pos = torch.from_numpy(q.protected_positions)
    bits = _BITS[x.dtype]
    assert torch.equal(flat_y[pos].view(bits), flat_x[pos].view(bits))
    # protect count: the asked fraction of the finite entries, plus every non-finite one
    n_finite = n - bad.size
    k_protect = math.floor(cfg.protect * n_finite + 0.5)
    assert q.protected_positions.size == k_protect + bad.size
    # the recorded error is the measured one
    assert math.isclose(q.rel_error, _measured_rel_error(x, y), rel_tol=1e-4, abs_tol=1e-6)
    return y


def _prune_candidates(
    flat_x: torch.Tensor, cfg: QuantConfig, q: QuantizedTensor
) -> tuple[torch.Tensor, int]:
    """Mask of finite, unprotected entries, and how many of them the config prunes."""
    fin = torch.isfinite(flat_x)
    fin[torch.from_numpy(q.protected_positions)] = False
    n_finite = int(torch.isfinite(flat_x).sum())
    k_prune = min(
        math.floor(cfg.prune * n_finite + 0.5),
        n_finite - math.floor(cfg.protect * n_finite + 0.5),
    )
    return fin, k_prune


@settings(deadline=None, max_examples=150)
@given(_tensors(), _CONFIGS)
def test_round_trip_properties(x: torch.Tensor, cfg: QuantConfig) -> None:
    q = quantize(x, cfg)
    y = _check_round_trip(x, cfg, q)
    # pruned: at least the asked count is exactly zero, and they are the smallest by |x|
    flat_x, flat_y = x.reshape(-1).double(), y.reshape(-1).double()
    fin, k_prune = _prune_candidates(flat_x, cfg, q)
    if k_prune:
        assert int((flat_y == 0).sum()) >= k_prune
        cand = flat_x[fin].abs()
        kth = torch.sort(cand).values[k_prune - 1]
        assert bool(torch.all(flat_y[fin][cand < kth] == 0))


@settings(deadline=None, max_examples=60)
@given(_tensors(), _CONFIGS, st.integers(0, 2**16))
def test_round_trip_with_scores(x: torch.Tensor, cfg: QuantConfig, seed: int) -> None:
    scores = torch.rand(x.shape, generator=torch.Generator().manual_seed(seed))
    q = quantize(x, cfg, scores=scores)
    y = _check_round_trip(x, cfg, q)
    if cfg.prune_metric == "sensitivity" and cfg.prune > 0 and x.numel():
        flat_x, flat_y = x.reshape(-1), y.reshape(-1)
        fin, k_prune = _prune_candidates(flat_x, cfg, q)
        if k_prune:
            s = scores.reshape(-1)[fin]
            kth = torch.sort(s).values[k_prune - 1]
            assert bool(torch.all(flat_y[fin][s < kth] == 0))


def test_nearest_level_assignment_matches_reference() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(200_000, generator=g) * 0.02
    for cfg in (QuantConfig(bins=16), QuantConfig(bins=5, protect=0.0), QuantConfig(bins=256)):
        q = quantize(x, cfg)
        ref = assign(x, q.levels).numpy()
        keep = np.ones(x.numel(), dtype=bool)
        keep[q.protected_positions] = False
        np.testing.assert_array_equal(q.indices[keep], ref[keep])
        # and at protected positions the index is the nearest level's too
        np.testing.assert_array_equal(q.indices, ref)


def test_pruned_entries_use_the_zero_level_and_fraction_is_exact() -> None:
    x = torch.randn(10_001, generator=torch.Generator().manual_seed(4))
    q = quantize(x, QuantConfig(bins=8, prune=0.3, protect=0.0))
    zero = int(np.searchsorted(q.levels, 0.0))
    assert q.levels[zero] == 0.0
    order = torch.argsort(x.abs()).numpy()
    assert np.all(q.indices[order[:3000]] == zero)


def test_protect_with_scores_takes_half_by_each_score() -> None:
    x = torch.arange(1, 1001, dtype=torch.float32)  # magnitude: high at the end
    scores = torch.flip(x, [0])  # sensitivity: high at the start
    q = quantize(x, QuantConfig(bins=16, protect=0.01), scores=scores)
    assert q.protected_positions.tolist() == [*range(5), *range(995, 1000)]


def test_deterministic() -> None:
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(5))
    a, b = (
        quantize(x, QuantConfig(bins=12, prune=0.1)),
        quantize(x, QuantConfig(bins=12, prune=0.1)),
    )
    np.testing.assert_array_equal(a.levels, b.levels)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.protected_positions, b.protected_positions)
    assert a.rel_error == b.rel_error


def test_error_falls_as_bins_grow() -> None:
    errors = {bins: [] for bins in (4, 8, 16, 32)}
    for seed in range(5):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(20_000, generator=g) * torch.rand(1, generator=g)
        for bins in errors:
            errors[bins].append(quantize(x, QuantConfig(bins=bins, protect=0.0)).rel_error)
    means = [np.mean(errors[b]) for b in (4, 8, 16, 32)]
    assert means == sorted(means, reverse=True)
    assert means[-1] < means[0] / 4


def test_few_distinct_values_are_exact() -> None:
    x = torch.tensor([0.1, -3.5, 7.25, 0.1, 1e-30] * 100, dtype=torch.float32)
    q = quantize(x, QuantConfig(bins=8, protect=0.0))
    assert q.rel_error == 0.0 and torch.equal(dequantize(q), x)
    # with pruning the zero level is added and the rest stays exact
    q = quantize(x, QuantConfig(bins=8, prune=0.2, protect=0.0))
    y = dequantize(q)
    assert torch.equal(y[x.abs() > 1e-20], x[x.abs() > 1e-20])
    assert torch.all(y[x.abs() < 1e-20] == 0)


@pytest.mark.parametrize("dtype", _DTYPES)
def test_all_equal_and_zero_d(dtype: torch.dtype) -> None:
    x = torch.full((4, 5), -2.5, dtype=dtype)
    q = quantize(x, QuantConfig(bins=4))
    assert q.levels.tolist() == [-2.5] and torch.equal(dequantize(q), x)
    s = torch.tensor(3.0, dtype=dtype)
    y = dequantize(quantize(s, QuantConfig(bins=4)))
    assert y.shape == () and torch.equal(y, s)


def test_empty_tensor() -> None:
    x = torch.zeros(0, 3, dtype=torch.bfloat16)
    q = quantize(x, QuantConfig())
    y = dequantize(q)
    assert y.shape == (0, 3) and y.dtype == torch.bfloat16 and q.rel_error == 0.0


def test_float16_levels_never_overflow() -> None:
    x = torch.tensor([65504.0, -65504.0, 65000.0, 1.0] * 50, dtype=torch.float16)
    y = dequantize(quantize(x, QuantConfig(bins=2, protect=0.0)))
    assert bool(torch.isfinite(y).all())


def test_float64_values_whose_squares_leave_its_range_are_fitted_as_well_as_ordinary_ones() -> None:
    # k-means on points of 1e200 squared their distances to inf (the fit fell apart: twice
    # the error, and NumPy overflow warnings); the points are now fitted scaled into range
    g = torch.Generator().manual_seed(3)
    unit = torch.randn(5000, generator=g, dtype=torch.float64).clamp(-1, 1)
    # 1.7e308: within a factor of 2.2 of float64's largest, where the sketch's bucket edges
    # used to stop (e^709), so those values shared one bucket (0.47 relative error); 1e-200
    # in the log domain: the cut-offs' products underflowed to 0 (0.69 relative error) and
    # the squares of the measured error too (it said 0.0)
    for log_domain in (False, True):
        errors = {}
        for scale in (1.0, 1e200, 1e300, 1e-200, 1e-300, 1.7e308):
            x = unit.abs() + 0.01 if log_domain else unit
            with np.errstate(over="raise", invalid="raise"):  # no overflow, no invalid value
                q = quantize(x * scale, QuantConfig(bins=16, protect=0.0, log_domain=log_domain))
            y = dequantize(q) / scale
            errors[scale] = float((y - x).norm() / x.norm())
            assert abs(q.rel_error - errors[scale]) < 1e-3 * errors[scale], (scale, q.rel_error)
        assert all(e < 1.5 * errors[1.0] for e in errors.values()), (log_domain, errors)
    pts = np.linspace(-1.0, 1.0, 200)
    for scale in (1e200, 1e-200):
        assert np.allclose(fit_levels(pts * scale, np.ones(200), 4) / scale,
                           fit_levels(pts, np.ones(200), 4), rtol=1e-12)  # fmt: skip


def test_all_non_finite() -> None:
    x = torch.tensor([math.nan, math.inf, -math.inf])
    q = quantize(x, QuantConfig(bins=4))
    y = dequantize(q)
    assert torch.equal(y.isnan(), x.isnan()) and torch.equal(y[1:], x[1:])
    assert q.rel_error == 0.0


class TestLogDomain:
    def test_zeros_exact_and_error_measured(self) -> None:
        g = torch.Generator().manual_seed(6)
        v = torch.randn(20_000, generator=g) ** 2 * 1e-6
        v[::7] = 0.0
        cfg = QuantConfig(bins=16, log_domain=True)
        q = quantize(v, cfg)
        y = _check_round_trip(v, cfg, q)
        assert torch.all(y[v == 0] == 0) and torch.all(y[v > 0] > 0)
        log_err = (y[v > 0].log() - v[v > 0].log()).abs()
        assert float(log_err.median()) < 0.5

    def test_pruned_and_exact_levels(self) -> None:
        v = torch.tensor([1.0, 4.0, 0.0, 0.25] * 30, dtype=torch.float32)
        q = quantize(v, QuantConfig(bins=4, log_domain=True, protect=0.0))
        assert torch.equal(dequantize(q), v)
        assert 0.0 in q.levels.tolist()  # the zero level; x = 1 got a nudged level
        q = quantize(v, QuantConfig(bins=4, prune=0.3, log_domain=True, protect=0.0))
        assert int((dequantize(q) == 0).sum()) >= 36

    def test_negative_values_rejected(self) -> None:
        with pytest.raises(UnsupportedValueError, match="non-negative"):
            quantize(torch.tensor([1.0, -2.0]), QuantConfig(log_domain=True))


def test_bad_inputs() -> None:
    with pytest.raises(UnsupportedValueError, match=r"dtype=torch\.int64"):
        quantize(torch.arange(10), QuantConfig())
    with pytest.raises(UnsupportedValueError, match=r"torch\.Tensor"):
        quantize(np.ones(3), QuantConfig())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="QuantConfig"):
        quantize(torch.ones(3), {"bins": 4})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"shape \(3,\)"):
        quantize(torch.ones(3), QuantConfig(), scores=torch.ones(4))


def test_non_finite_scores_count_as_zero() -> None:
    x = torch.arange(1.0, 101.0)
    scores = torch.full((100,), math.nan)
    q = quantize(x, QuantConfig(prune=0.1, prune_metric="sensitivity"), scores=scores)
    assert int((dequantize(q) == 0).sum()) >= 10


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda q: {"levels": q.levels[:1]}, "beyond"),
        (lambda q: {"indices": q.indices[:-1]}, "100 uint8"),
        (lambda q: {"protected_positions": np.array([100]), "protected_values": torch.zeros(1)},
         "outside"),
    ],
)  # fmt: skip
def test_dequantize_rejects_inconsistent_parts(change: Any, message: str) -> None:
    q = quantize(torch.randn(100), QuantConfig(bins=4))
    with pytest.raises(CorruptCheckpointError, match=message):
        dequantize(dataclasses.replace(q, **change(q)))


def test_fit_levels_weighted_and_seeded() -> None:
    pts = np.array([0.0, 0.1, 0.2, 10.0])
    heavy_tail = fit_levels(pts, np.array([1.0, 1.0, 1.0, 100.0]), 2)
    assert heavy_tail.tolist()[-1] == 10.0
    np.testing.assert_array_equal(fit_levels(pts, np.ones(4), 3), fit_levels(pts, np.ones(4), 3))
    assert fit_levels(pts, np.zeros(4), 2).size == 0
    with pytest.raises(ConfigError):
        fit_levels(pts, np.ones(3), 2)


def test_assign_validates_levels() -> None:
    with pytest.raises(ConfigError, match="sorted"):
        assign(torch.ones(3), [1.0, 0.0])
    with pytest.raises(ConfigError, match="1 to 256"):
        assign(torch.ones(3), [])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu() -> None:
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(7))
    cfg = QuantConfig(bins=16, prune=0.2)
    qc, qg = quantize(x, cfg), quantize(x.cuda(), cfg)
    assert qg.protected_values.device.type == "cpu"
    np.testing.assert_allclose(qg.levels, qc.levels, rtol=1e-5)
    assert float(np.mean(qg.indices != qc.indices)) < 1e-3
    y = dequantize(qg, device="cuda")
    assert y.device.type == "cuda" and y.dtype == x.dtype


@pytest.mark.parametrize("dtype", _DTYPES)
def test_large_tensor_dequantize_matches_plain_lookup(dtype: torch.dtype) -> None:
    # large enough for the paired-lookup path, odd so one index is left over
    n = (1 << 18) + 1
    x = torch.randn(n, generator=torch.Generator().manual_seed(8)).to(dtype)
    q = quantize(x, QuantConfig(bins=32, protect=0.001))
    ref = torch.as_tensor(q.levels).to(dtype)[torch.from_numpy(q.indices).long()]
    ref[torch.from_numpy(q.protected_positions)] = q.protected_values
    assert torch.equal(dequantize(q), ref)


def test_non_contiguous_and_requires_grad_input() -> None:
    w = torch.randn(300, 200, generator=torch.Generator().manual_seed(9)).requires_grad_()
    x = w.t()  # a transposed view: indices must follow the logical (C) order
    q = quantize(x, QuantConfig(bins=16))
    y = dequantize(q)
    assert y.shape == (200, 300) and not y.requires_grad
    assert math.isclose(q.rel_error, _measured_rel_error(x.detach(), y), rel_tol=1e-4)
    np.testing.assert_array_equal(q.indices, quantize(x.detach().contiguous(), q.config).indices)


@st.composite
def _non_negative(draw: st.DrawFn) -> torch.Tensor:
    x = draw(_tensors()).abs()  # NaN stays NaN, -inf becomes inf, -0.0 becomes 0.0
    if x.numel() and draw(st.booleans()):  # Adam's second moment spans many decades
        spread = torch.logspace(-30, 0, x.numel(), dtype=torch.float64).reshape(x.shape)
        x = (x.double() * spread).to(x.dtype)
    return x


@settings(deadline=None, max_examples=100)
@given(
    _non_negative(),
    st.builds(
        QuantConfig,
        bins=st.sampled_from([2, 4, 16, 64]),
        prune=st.sampled_from([0.0, 0.2]),
        protect=st.sampled_from([0.0, 0.01]),
        log_domain=st.just(True),
    ),
)
def test_log_domain_round_trip_properties(x: torch.Tensor, cfg: QuantConfig) -> None:
    q = quantize(x, cfg)
    y = _check_round_trip(x, cfg, q)
    fin = torch.isfinite(x)
    assert bool(torch.all(y[fin] >= 0))
    assert bool(torch.all(y[fin & (x == 0)] == 0))  # zeros stay exact


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_error_is_finite_near_the_dtype_maximum(dtype: torch.dtype) -> None:
    top = torch.finfo(dtype).max
    x = torch.tensor([top, 1.0, -2.0, -top / 2], dtype=torch.float32).repeat(100).to(dtype)
    q = quantize(x, QuantConfig(bins=2, protect=0.0))
    assert math.isfinite(q.rel_error)
    assert math.isclose(q.rel_error, _measured_rel_error(x, dequantize(q)), rel_tol=1e-6)


def _blocked_cases() -> list[tuple[torch.Tensor, QuantConfig, torch.Tensor | None]]:
    g = torch.Generator().manual_seed(3)
    w = torch.randn(20_011, generator=g) * 0.02
    sq = torch.randn(20_011, generator=g) ** 2 * 1e-6
    sq[::7] = 0.0
    special = w.clone()
    special[[5, 900, 15_000]] = torch.tensor([math.nan, math.inf, -math.inf])
    scores = torch.rand(20_011, generator=g)
    return [
        (w, QuantConfig(), None),
        (w, QuantConfig(prune=0.3, protect=0.01), None),
        (sq, QuantConfig(log_domain=True, prune=0.2), None),
        (w, QuantConfig(protect=0.01, prune=0.1, prune_metric="sensitivity"), scores),
        (special, QuantConfig(prune=0.1), None),
        (w.to(torch.bfloat16), QuantConfig(bins=256), None),
        (w.double(), QuantConfig(bins=32, prune=0.05), None),
    ]


@pytest.mark.parametrize("case", range(7))
def test_blockwise_passes_give_the_whole_tensor_result(
    case: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference kernels run the element-wise passes block by block in encoding threads:
    the same result, bit for bit, as whole-tensor ops (odd blocks, so tails and boundaries
    are exercised), and as the fast kernels where they are built."""
    from ckptzip import kernels

    x, cfg, scores = _blocked_cases()[case]
    use_kernels(monkeypatch, kernels.reference)
    monkeypatch.setattr(kernels.reference, "block_size", lambda t: max(t.numel(), 1))
    whole = quantize(x, cfg, scores=scores)
    monkeypatch.setattr(kernels.reference, "block_size", lambda t: 999)
    blocked = quantize(x, cfg, scores=scores)
    if kernels.fast is not None:
        use_kernels(monkeypatch, kernels.fast)
        fast = quantize(x, cfg, scores=scores)
        assert fast.rel_error == whole.rel_error
        assert np.array_equal(fast.levels, whole.levels)
        assert np.array_equal(fast.indices, whole.indices)
        assert np.array_equal(fast.protected_positions, whole.protected_positions)
    assert whole.rel_error == blocked.rel_error
    assert np.array_equal(whole.levels, blocked.levels)
    assert np.array_equal(whole.indices, blocked.indices)
    assert np.array_equal(whole.protected_positions, blocked.protected_positions)
    bits = _BITS[whole.protected_values.dtype]
    assert torch.equal(whole.protected_values.view(bits), blocked.protected_values.view(bits))


# -- the sketched path: cuts read off the sketch, one assignment pass ------------------------


@settings(deadline=None, max_examples=120)
@given(_tensors(), _CONFIGS)
def test_sketched_selection_is_the_ranking_selection(x: torch.Tensor, cfg: QuantConfig) -> None:
    """Without scores, quantize cuts protect and prune off the sketch and applies them as
    value-and-position rules in one pass; the ranking path (which the scores path keeps)
    makes the same selections, levels, indices and error, ties included (both take tied
    values by position)."""
    from ckptzip import quantize as qmod
    from ckptzip.sketch import scan

    work = x.detach().reshape(-1).to(torch.float32)
    work = work[torch.isfinite(work)]
    if work.numel() == 0:
        return
    sk = scan(work)
    assert sk is not None
    got = qmod._quantize_sketched(work, cfg, x.dtype, sk)
    want = qmod._quantize_finite(work, cfg, None, x.dtype)
    assert np.array_equal(got.levels, want.levels)
    assert torch.equal(got.indices, want.indices)
    assert torch.equal(got.protected, want.protected)
    assert got.rel_error == want.rel_error


def test_tied_values_are_protected_and_pruned_by_position() -> None:
    # every magnitude tied: protect takes the first positions, prune the next ones
    x = torch.tensor([1.0, -1.0] * 500)
    q = quantize(x, QuantConfig(bins=4, protect=0.01, prune=0.02))
    assert q.protected_positions.tolist() == list(range(10))
    zero = int(np.searchsorted(q.levels, 0.0))
    assert np.flatnonzero(q.indices == zero).tolist() == list(range(10, 30))


@pytest.mark.parametrize(
    "cfg",
    [QuantConfig(), QuantConfig(bins=4, prune=0.3, protect=0.01), QuantConfig(bins=256)],
)
def test_a_reused_sketch_gives_the_same_result(cfg: QuantConfig) -> None:
    from ckptzip.quantize import sketch_of

    x = torch.randn(30_000, generator=torch.Generator().manual_seed(4)) * 0.02
    sk = sketch_of(x)
    assert sk is not None and sk.bounds == (float(x.min()), float(x.max()))
    a, b = quantize(x, cfg), quantize(x, cfg, sketch=sk)
    assert np.array_equal(a.levels, b.levels) and np.array_equal(a.indices, b.indices)
    assert np.array_equal(a.protected_positions, b.protected_positions)
    assert a.rel_error == b.rel_error
    with pytest.raises(ConfigError, match="sketch_of"):
        quantize(x[:100], cfg, sketch=sk)
    assert sketch_of(x.double()) is None
    assert sketch_of(torch.tensor([1.0, math.nan])) is None


@settings(max_examples=200, deadline=None)
@given(
    levels=st.lists(
        st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=256
    ),
    log_domain=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]),
)
def test_level_table_holds_the_level_values_padded(
    levels: list[float], log_domain: bool, dtype: torch.dtype
) -> None:
    """The decoders' 256-entry table (built by NumPy for float32 and float64) holds exactly
    the values dequantization gives each level, then zeros."""
    from ckptzip.quantize import _level_values, level_table

    lv = np.sort(np.asarray(levels, dtype=np.float64))
    if log_domain:
        lv = np.clip(lv, -700.0, 700.0)  # what a log-domain codebook can hold
    with np.errstate(over="ignore"):  # np.exp of a large log level: inf, both ways
        table = level_table(lv, log_domain, dtype)
    want = _level_values(lv, log_domain, dtype, torch.device("cpu"))
    assert table.dtype == dtype and table.shape == (256,)
    assert torch.equal(table[: lv.size].view(torch.uint8), want.view(torch.uint8).reshape(-1))
    assert not table[lv.size :].any()
