"""Log-bucket sketch: relative-accuracy guarantee, monotone codes, bounded size, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptzip.errors import ConfigError, UnsupportedValueError
from ckptzip.sketch import DEFAULT_ALPHA, LogSketch, build_sketch, value_codes

# float32 logarithms put a value within ~1e-6 of a bucket edge on either side of it.
_SLACK = 1e-5


@settings(deadline=None)
@given(
    st.lists(st.floats(1e-6, 1e6, allow_nan=False), min_size=1, max_size=400),
    st.floats(0.0, 1.0),
)
def test_quantile_within_alpha_for_positive_data(values: list[float], q: float) -> None:
    x = torch.tensor(values, dtype=torch.float64)
    sk = LogSketch.from_tensor(x)
    exact = float(np.sort(np.array(values))[math.floor(q * (len(values) - 1))])
    assert abs(sk.quantile(q) - exact) <= (sk.alpha + _SLACK) * exact


# magnitudes within 8 decades: inside the kept key range (wider ranges collapse, tested below)
_MAGS = st.floats(1e-4, 1e4).map(lambda v: float(np.float32(v)))
_SIGNED = st.one_of(st.just(0.0), _MAGS, _MAGS.map(lambda v: -v))


@settings(deadline=None)
@given(st.lists(_SIGNED, min_size=1, max_size=400))
def test_codes_are_monotone_and_centres_close(values: list[float]) -> None:
    x = torch.tensor(sorted(values), dtype=torch.float32)
    sk, codes = build_sketch(x)
    assert sk.count == len(values)
    assert torch.all(codes[1:] >= codes[:-1])
    assert int((codes == sk.cap).sum()) == sum(v == 0 for v in values)
    centres = torch.from_numpy(sk.centres())[codes.long()]
    rel = (centres - x.double()).abs() / x.double().abs().clamp_min(1e-300)
    assert bool(torch.all((rel <= sk.alpha + _SLACK) | (x == 0)))


def test_counts_match_bincount_of_codes() -> None:
    x = torch.randn(5000, generator=torch.Generator().manual_seed(1))
    sk, codes = build_sketch(x)
    np.testing.assert_array_equal(np.bincount(codes.numpy(), minlength=sk.counts.size), sk.counts)
    mag = sk.magnitude_counts()
    assert mag.sum() == 5000 and mag.size == sk.cap + 1


def test_wide_range_collapses_lowest_buckets() -> None:
    x = torch.tensor([1e-300, 1e-200, 1e-100, 1.0, 1e100], dtype=torch.float64)
    sk, codes = build_sketch(x, max_buckets=64)
    assert sk.counts.size == 2 * 64 + 1 and sk.count == 5
    # the three tiny values share the lowest kept bucket; the top two keep their own
    assert codes.tolist()[:3] == [64 + 1] * 3
    assert abs(float(sk.centres()[int(codes[-1])]) - 1e100) <= 1e100 * DEFAULT_ALPHA


def test_value_codes_agree_with_build() -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(2)) * 3
    sk, codes = build_sketch(x)
    assert torch.equal(value_codes(sk, x), codes)


def test_subnormals_and_zeros() -> None:
    tiny = torch.tensor([1e-45, -1e-45, 0.0, 1e-40], dtype=torch.float32)
    sk, codes = build_sketch(tiny)
    assert sk.count == 4 and int(codes[2]) == sk.cap
    assert int(codes[0]) > sk.cap > int(codes[1])


def test_all_zero_and_empty() -> None:
    sk, codes = build_sketch(torch.zeros(7))
    assert sk.counts[sk.cap] == 7 and torch.all(codes == sk.cap)
    assert sk.quantile(0.5) == 0.0
    empty = LogSketch.from_tensor(torch.zeros(0))
    assert empty.count == 0
    with pytest.raises(UnsupportedValueError, match="empty"):
        empty.quantile(0.5)


def test_half_precision_inputs() -> None:
    x = torch.linspace(-4, 4, 101)
    for dtype in (torch.float16, torch.bfloat16):
        sk = LogSketch.from_tensor(x.to(dtype))
        assert sk.count == 101
        assert abs(sk.quantile(1.0) - 4.0) <= 4.0 * sk.alpha


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_rejected(bad: float) -> None:
    with pytest.raises(UnsupportedValueError, match="non-finite"):
        LogSketch.from_tensor(torch.tensor([1.0, bad]))


def test_bad_arguments() -> None:
    with pytest.raises(UnsupportedValueError, match="floating-point"):
        LogSketch.from_tensor(torch.arange(3))
    with pytest.raises(ConfigError, match="alpha="):
        LogSketch.from_tensor(torch.ones(3), alpha=1.5)
    with pytest.raises(ConfigError, match="max_buckets="):
        LogSketch.from_tensor(torch.ones(3), max_buckets=0)
    with pytest.raises(ConfigError, match="q="):
        LogSketch.from_tensor(torch.ones(3)).quantile(1.5)


# -- the one-pass sketch over a shared key table --------------------------------------------

_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(deadline=None, max_examples=200)
@given(st.lists(_F32, min_size=1, max_size=300), st.sampled_from([2048, 64, 1]))
def test_scan_counts_what_build_sketch_counts(values: list[float], cap: int) -> None:
    from ckptzip.sketch import scan

    x = torch.tensor(values, dtype=torch.float32)
    sk = scan(x, max_buckets=cap)
    want, _ = build_sketch(x, max_buckets=cap)
    assert sk is not None
    assert sk.key_min == want.key_min
    np.testing.assert_array_equal(sk.counts, want.counts)
    assert sk.bounds == (float(x.min()), float(x.max()))


@pytest.mark.parametrize("alpha", [DEFAULT_ALPHA, 0.3, 0.002])
def test_key_table_holds_every_tensors_thresholds(alpha: float) -> None:
    from ckptzip.sketch import _thresholds, key_offset, key_table

    table = key_table(alpha, 2048)
    assert table is not None and float(table.thresholds[0]) == 0.0
    log_gamma = math.log((1 + alpha) / (1 - alpha))
    # every key_min a float32 tensor can have: key_max = ceil(log_γ top), top a float32
    lowest = math.ceil(math.log(2.0**-149) / log_gamma) - 2047
    highest = math.ceil(math.log(3.4028234663852886e38) / log_gamma) - 2047
    for key_min in (lowest, (lowest + highest) // 2, highest):
        off = key_offset(table, key_min, 2048)
        assert off is not None
        want = _thresholds(key_min, 2048, alpha, torch.zeros(0))
        assert torch.equal(table.thresholds[off : off + 2048], want)


def test_scan_declines_what_it_does_not_cover() -> None:
    from ckptzip.sketch import scan

    assert scan(torch.tensor([1.0, math.inf])) is None
    assert scan(torch.tensor([1.0, 2.0], dtype=torch.float64)) is None
    empty = scan(torch.zeros(0))
    assert empty is not None and empty.count == 0 and empty.bounds is None
