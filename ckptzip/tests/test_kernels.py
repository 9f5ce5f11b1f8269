"""The kernel layer: the fast implementation writes what the reference writes, bit for bit.

Kernel by kernel on random and edge-case inputs (Hypothesis), then whole files: a save in a
process that chose the reference kernels at import and one that chose the fast kernels
write the same bytes, keyframe and delta. Skipped pieces say why (no compiled kernels).
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ckptzip import kernels
from ckptzip.errors import CorruptCheckpointError
from ckptzip.kernels import reference as ref

fast = kernels.fast
needs_fast = pytest.mark.skipif(fast is None, reason="the compiled kernels are not built here")


def test_the_active_implementation_is_the_compiled_one_where_it_is_built() -> None:
    want = "fast" if fast is not None else "reference"
    if os.environ.get("CKPTZIP_KERNELS") == "reference":
        want = "reference"
    assert want == kernels.IMPLEMENTATION


def test_the_coders_share_one_ans_model_and_the_sdist_carries_it() -> None:
    # the two C coders (one stream, lanes) must model a context alike, or files written by
    # one would not decode with the other: one definition, in a header; an sdist carries an
    # Extension's sources and depends only, so a header missing from depends is missing from
    # the sdist (the build then fails on a user's machine) and a change to it rebuilds nothing
    root = Path(__file__).resolve().parents[1]
    sources = {c.name: c.read_text() for c in (root / "src/ckptzip/kernels").glob("*.c")}
    included = {h for text in sources.values() for h in re.findall(r'#include "([^"]+)"', text)}
    assert "_ans.h" in included
    setup = (root / "setup.py").read_text()
    assert all(f"src/ckptzip/kernels/{h}" in setup for h in included)
    defined = [n for n, text in sources.items() if "Categorical" in text and "(2^24 -" in text]
    assert defined == []  # the model's definition lives in _ans.h alone


@needs_fast
def test_a_stale_build_missing_a_kernel_is_an_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # an editable install built before a kernel was added: `import ckptzip` must fall back to
    # the reference (ImportError), not die with ctypes' AttributeError "undefined symbol"
    import ctypes
    import importlib

    real = ctypes.CDLL

    class Stale:
        def __init__(self, path: str) -> None:
            self._lib = real(path)

        def __getattr__(self, name: str) -> object:
            if name == "ckz_ans_decode":
                raise AttributeError(f"undefined symbol: {name}")
            return getattr(self._lib, name)

    monkeypatch.setattr(ctypes, "CDLL", Stale)
    monkeypatch.delitem(sys.modules, "ckptzip.kernels._fast")
    with pytest.raises(ImportError, match=r"ckz_ans_decode.*rebuild"):
        importlib.import_module("ckptzip.kernels._fast")


# -- sketch codes ------------------------------------------------------------------------------


def _thresholds(key_min: int, cap: int, alpha: float = 0.01) -> torch.Tensor:
    from ckptzip.sketch import _thresholds

    return _thresholds(key_min, cap, alpha, torch.zeros(0))


@needs_fast
@given(
    st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=300),
    st.integers(-200, 60),
    st.integers(1, 2048),
    st.sampled_from([0.01, 0.001, 0.3]),  # 0.001: several thresholds in one table slice
)
@settings(max_examples=200, deadline=None)
def test_sketch_codes_match(values: list[float], key_min: int, cap: int, alpha: float) -> None:
    assert fast is not None
    t = _thresholds(key_min, cap, alpha)
    # the thresholds themselves and their neighbours are the values where a bucket changes
    edges = t[torch.randint(0, cap, (20,), generator=torch.Generator().manual_seed(cap))]
    x = torch.cat(
        [
            torch.tensor(values, dtype=torch.float32),
            edges,
            torch.nextafter(edges, torch.tensor(math.inf)),
            -torch.nextafter(edges, torch.tensor(0.0)),
            torch.tensor([0.0, -0.0, 1e-45, -1e-45, 3.4e38]),
        ]
    )
    c_ref, n_ref = ref.sketch_codes(x, t, cap)
    c_fast, n_fast = fast.sketch_codes(x, t, cap)
    assert torch.equal(c_ref, c_fast)
    assert n_ref is not None and n_fast is not None
    assert np.array_equal(n_ref, n_fast)


@needs_fast
def test_sketch_codes_match_on_a_large_tensor() -> None:
    assert fast is not None
    x = torch.randn(1_000_003, generator=torch.Generator().manual_seed(0)) * 0.02
    x[::17] = 0.0
    t = _thresholds(-300, 2048)
    c_ref, n_ref = ref.sketch_codes(x, t, 2048)
    c_fast, n_fast = fast.sketch_codes(x, t, 2048)
    assert torch.equal(c_ref, c_fast) and np.array_equal(n_ref, n_fast)  # type: ignore[arg-type]


# -- the quantizer's fused passes -----------------------------------------------------------------


def _edge_values(table: object, seed: int) -> torch.Tensor:
    """Thresholds and their float32 neighbours: where a key changes."""
    t = table.thresholds[: table.size]  # type: ignore[attr-defined]
    pick = t[torch.randint(0, t.numel(), (40,), generator=torch.Generator().manual_seed(seed))]
    up = torch.nextafter(pick, torch.tensor(math.inf))
    out = torch.cat([pick, up, -pick, -torch.nextafter(pick, torch.tensor(0.0))])
    return out[torch.isfinite(out)]  # the table's top keys are above the float32 maximum


@needs_fast
@given(
    st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), max_size=300),
    st.sampled_from([0.01, 0.3, 0.002]),  # 0.002: several thresholds in one table slice
    st.integers(0, 2**16),
)
@settings(max_examples=150, deadline=None)
def test_key_scan_matches(values: list[float], alpha: float, seed: int) -> None:
    from ckptzip.sketch import key_table

    assert fast is not None
    table = key_table(alpha, 2048)
    assert table is not None
    x = torch.cat(
        [
            torch.tensor(values, dtype=torch.float32),
            _edge_values(table, seed),
            torch.tensor([0.0, -0.0, 1e-45, -1e-45, 3.4e38, -3.4e38]),
        ]
    )
    h_ref, lo_ref, hi_ref, fin_ref = ref.key_scan(x, table)
    h_fast, lo_fast, hi_fast, fin_fast = fast.key_scan(x, table)
    assert fin_ref and fin_fast
    assert np.array_equal(h_ref, h_fast)
    assert (lo_ref, hi_ref) == (lo_fast, hi_fast)
    bad = torch.cat([x, torch.tensor([math.nan])])
    assert not ref.key_scan(bad, table)[3] and not fast.key_scan(bad, table)[3]


def _windows(t: torch.Tensor, side: str, parity: int, width: int = 16) -> torch.Tensor:
    """The ``width`` float32 values next to every other positive normal threshold of ``t``
    (those of index parity ``parity``): at or below it (``side="below"``) or above it. Each
    window's values share one key, and a key one off lands in a bin no window fills, so a
    histogram that matches the reference's holds every value's key."""
    bits = t.numpy().view(np.int32).astype(np.int64)
    idx = np.flatnonzero((t.numpy() >= np.float32(2.0**-126)) & np.isfinite(t.numpy()))
    idx = idx[idx % 2 == parity]
    steps = np.arange(width) - (width - 1 if side == "below" else -1)
    out = (bits[idx][:, None] + steps[None, :]).reshape(-1)
    out = out[(out > 0) & (out < 0x7F800000)].astype(np.int32)
    return torch.from_numpy(out.view(np.float32).copy())


@needs_fast
@pytest.mark.parametrize("alpha", [0.01, 0.002, 0.3])
def test_key_scan_keys_every_value_next_to_every_threshold(alpha: float) -> None:
    # the AVX-512 loop reads keys off a fitted log2 (ckz_log_fit) and looks up only the
    # values within its error of a threshold: every value within 16 ulps of a threshold
    # (the lookup's band is about 2 ulps wide at alpha 0.01) gets the reference's key
    from ckptzip.sketch import key_table

    assert fast is not None
    table = key_table(alpha, 2048)
    assert table is not None
    t = table.thresholds[: table.size]
    for side in ("below", "above"):
        for parity in (0, 1):
            x = _windows(t, side, parity)
            x = torch.cat([x, -x.flip(0)])  # both rows, and the other order
            h_ref, lo_ref, hi_ref, _ = ref.key_scan(x, table)
            h_fast, lo_fast, hi_fast, _ = fast.key_scan(x, table)
            assert np.array_equal(h_ref, h_fast), (side, parity)
            assert (lo_ref, hi_ref) == (lo_fast, hi_fast)


@needs_fast
@pytest.mark.parametrize("key_min", [-300, -4000, 40])
def test_fit_sums_code_every_value_next_to_every_threshold(key_min: int) -> None:
    # the same for the first moment's fit: the sums' buckets by the fitted log2
    assert fast is not None
    t = _thresholds(key_min, 2048)
    for side in ("below", "above"):
        for parity in (0, 1):
            x = _windows(t, side, parity)
            x = torch.cat([x, -x.flip(0)])
            if not x.numel():
                continue
            v = torch.full_like(x, 1e-6)
            rules = ((math.inf, -1), (-1.0, -1))
            s_ref = ref.fit_sums(x, v, 1e-8, t, 2048, *rules)
            assert s_ref.tobytes() == fast.fit_sums(x, v, 1e-8, t, 2048, *rules).tobytes()


@needs_fast
@pytest.mark.slow
def test_key_scan_keys_every_positive_float32() -> None:
    # all 2^31 - 2^23 positive finite floats, a binade at a time: the keys of consecutive
    # floats ascend, so a binade's histogram is the differences of where each threshold's
    # bits fall in it (computed here without the kernels)
    from ckptzip.sketch import key_table

    assert fast is not None
    table = key_table(0.01, 2048)
    assert table is not None
    size = table.size
    t_bits = table.thresholds[:size].numpy().view(np.int32).astype(np.int64)
    for e in range(255):
        lo, hi = e << 23, (e + 1) << 23
        x = torch.arange(lo, hi, dtype=torch.int32).view(torch.float32)
        hist, *_ = fast.key_scan(x, table)
        # values with key <= k: the floats at or below threshold k, i.e. bits <= t_bits[k]
        at_most = np.clip(t_bits + 1 - lo, 0, hi - lo)
        want = np.diff(np.concatenate([[0], at_most, [hi - lo]]))
        assert np.array_equal(hist[1], want), e
        assert not hist[0].any()


@needs_fast
@given(st.integers(0, 2**32 - 1), st.integers(0, 5000), st.integers(1, 2))
@settings(max_examples=80, deadline=None)
def test_members_match(seed: int, n: int, k: int) -> None:
    assert fast is not None
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g)
    x[::7] = 0.0
    edges = torch.rand(4, generator=g).sort().values.tolist()
    ranges = (
        [(-1.0, 0.0), (edges[0], edges[1]), (edges[2], edges[3])][:k]
        if seed % 2
        else [
            (edges[0], edges[1]),
            (edges[1], edges[3]),
        ][:k]
    )
    ranges = [(float(np.float32(a)), float(np.float32(b))) for a, b in ranges]
    for r, f in zip(ref.members(x, ranges), fast.members(x, ranges), strict=True):
        assert torch.equal(r, f)
    assert fast.members(x, []) == ref.members(x, []) == []  # no range: no pass over x


def _second_moments(g: torch.Generator, n: int) -> torch.Tensor:
    """Adam-like ``v`` over many decades, with the entries a weight must survive: zeros of
    both signs, negatives, subnormals, huge values, NaN and inf."""
    v = torch.exp(torch.randn(n, generator=g) * 6.0 - 14.0)
    odd = torch.tensor([0.0, -0.0, -1e-3, 1e-45, 1e-38, 3e38, math.nan, math.inf, -math.inf])
    at = torch.randint(0, n, (min(n, 3 * odd.numel()),), generator=g)
    v[at] = odd.repeat(3)[: at.numel()]
    return v


@needs_fast
@given(
    st.integers(0, 10_000),
    st.integers(1, 2048),
    st.integers(-900, 40),
    st.booleans(),
    st.booleans(),
    st.sampled_from([0.01, 0.001]),  # 0.001: several thresholds in one table slice
)
@settings(max_examples=100, deadline=None)
def test_fit_sums_match(
    seed: int, cap: int, key_min: int, protect: bool, prune: bool, alpha: float
) -> None:
    assert fast is not None
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 5000, (1,), generator=g))
    x = torch.randn(n, generator=g) * 0.02
    x[:: 1 + seed % 7] = 0.0
    t = _thresholds(key_min, cap, alpha)
    edges = t[torch.randint(0, cap, (20,), generator=g)]
    x = torch.cat([x, edges, -torch.nextafter(edges, torch.tensor(math.inf))])
    n = x.numel()
    v = _second_moments(g, n)
    a = x.abs()
    # rules on values that occur, ties by position: the quantizer's
    pt, pp = (float(a.max()), int(seed % n)) if protect else (math.inf, -1)
    qt, qp = (float(a.sort().values[n // 3]), n // 2) if prune else (-1.0, -1)
    s_ref = ref.fit_sums(x, v, 1e-8, t, cap, (pt, pp), (qt, qp))
    s_fast = fast.fit_sums(x, v, 1e-8, t, cap, (pt, pp), (qt, qp))
    assert s_fast.dtype == np.float64 and s_fast.shape == (2 * cap + 1,)
    assert s_ref.tobytes() == s_fast.tobytes()  # the same sums, bit for bit
    # the definition: the weight tensor's, bucket by bucket, over the entries left
    codes, _ = ref.sketch_codes(x, t, cap, histogram=False)
    w = torch.nan_to_num(ref.step_weights(v, 1e-8).double(), nan=0.0, posinf=0.0)
    pos = torch.arange(n)
    left = ~((a > pt) | ((a == pt) & (pos <= pp)) | (a < qt) | ((a == qt) & (pos <= qp)))
    want = np.zeros(2 * cap + 1)
    np.add.at(want, codes[left].numpy(), w[left].numpy())
    assert np.allclose(s_ref, want, rtol=1e-12, atol=0.0)


@needs_fast
def test_fit_sums_match_on_a_large_tensor() -> None:
    assert fast is not None
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1_000_003, generator=g) * 0.02
    x[::17] = 0.0
    v = _second_moments(g, x.numel())
    t = _thresholds(-300, 2048)
    qt = float(x.abs().kthvalue(300_000).values)
    rules = ((float(x.abs().kthvalue(999_000).values), 77), (qt, 500_000))
    s_ref = ref.fit_sums(x, v, 1e-8, t, 2048, *rules)
    assert s_ref.tobytes() == fast.fit_sums(x, v, 1e-8, t, 2048, *rules).tobytes()
    # a float64 second moment is not the compiled pass's: the reference's sums
    v64 = v.double() * 1.000001
    assert ref.fit_sums(x, v64, 1e-8, t, 2048, *rules).tobytes() == (
        fast.fit_sums(x, v64, 1e-8, t, 2048, *rules).tobytes()
    )


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 255),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
@settings(max_examples=100, deadline=None)
def test_assign_fused_matches(
    seed: int, n_cuts: int, log_domain: bool, protect: bool, prune: bool
) -> None:
    assert fast is not None
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 6000, (1,), generator=g))
    x = torch.randn(n, generator=g) * 0.1
    cuts = (torch.randn(n_cuts, generator=g) * 0.1).sort().values
    if log_domain:
        x, cuts = x.abs(), cuts.abs().sort().values
        x[::5] = 0.0
    x = torch.cat([x, cuts, torch.nextafter(cuts, torch.tensor(math.inf)), torch.tensor([0.0])])
    if seed % 3 == 0:  # a cut at zero, and exact ties on it
        cuts[0] = 0.0
        cuts = cuts.sort().values
    n = x.numel()
    a = x.abs()
    order = torch.sort(a, descending=True, stable=True).indices
    k_prot = min(n, int(seed % 17)) if protect else 0
    pt, pp = (float(a[order[k_prot - 1]]), int(order[k_prot - 1])) if k_prot else (math.inf, -1)
    if k_prot:  # how many the rule takes, ties by position
        k_prot = int(((a > pt) | ((a == pt) & (torch.arange(n) <= pp))).sum())
    qt, qp = (float(a[n // 3]), n // 2) if prune else (-1.0, -1)
    levels = np.sort(np.random.default_rng(seed).standard_normal(n_cuts + 1) * 0.1)
    plan = kernels.Assignment(
        cuts=cuts,
        o2i=np.arange(n_cuts + 1, dtype=np.uint8),
        zero_fix=int(seed % (n_cuts + 1)) if log_domain else -1,
        protect=(pt, pp),
        n_protected=k_prot,
        prune=(qt, qp, int(seed % (n_cuts + 1))),
        values=torch.from_numpy(levels).float(),
    )
    i_ref, p_ref, e_ref, m_ref = ref.assign_fused(x, plan)
    i_fast, p_fast, e_fast, m_fast = fast.assign_fused(x, plan)
    assert torch.equal(i_ref, i_fast)
    assert torch.equal(p_ref, p_fast)
    assert math.isclose(e_ref, e_fast, rel_tol=1e-12, abs_tol=1e-300)
    assert math.isclose(m_ref, m_fast, rel_tol=1e-12)
    want = torch.searchsorted(cuts, x)
    if log_domain:
        want = torch.where(x == 0, plan.zero_fix, want)
    kept = ~torch.isin(torch.arange(n), p_ref) & ~((a < qt) | ((a == qt) & (torch.arange(n) <= qp)))
    assert torch.equal(i_ref[kept].long(), want[kept])


# -- assignment and its error ------------------------------------------------------------------


@needs_fast
@given(st.integers(0, 2**32 - 1), st.integers(2, 256), st.booleans())
@settings(max_examples=60, deadline=None)
def test_assignment_and_error_match(seed: int, bins: int, log_domain: bool) -> None:
    from ckptzip.config import QuantConfig
    from ckptzip.quantize import quantize

    assert fast is not None
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 20_000, (1,), generator=g))
    x = torch.randn(n, generator=g)
    if log_domain:
        x = x.square()
        x[:: max(1, n // 10)] = 0.0
    cfg = QuantConfig(bins=bins, prune=0.1, protect=0.001, log_domain=log_domain)
    with pytest.MonkeyPatch.context() as mp:
        _use(mp, ref)
        want = quantize(x, cfg)
        _use(mp, fast)
        got = quantize(x, cfg)
    assert got.rel_error == want.rel_error
    assert np.array_equal(got.levels, want.levels)
    assert np.array_equal(got.indices, want.indices)
    assert np.array_equal(got.protected_positions, want.protected_positions)


@needs_fast
@given(st.integers(0, 2**32 - 1), st.integers(0, 3000), st.integers(-5, 40), st.integers(0, 9))
@settings(max_examples=60, deadline=None)
def test_selection_passes_match(seed: int, n: int, lo: int, width: int) -> None:
    assert fast is not None
    codes = torch.randint(0, 65, (n,), generator=torch.Generator().manual_seed(seed))
    codes = codes.to(torch.int32)
    assert torch.equal(fast.magnitude_rank(codes, 32), ref.magnitude_rank(codes, 32))
    for hi in (lo + width, 1 << 30):
        assert torch.equal(fast.positions(codes, lo, hi), ref.positions(codes, lo, hi))


@needs_fast
@given(st.integers(0, 2**32 - 1), st.integers(1, 255))
@settings(max_examples=60, deadline=None)
def test_nearest_level_matches(seed: int, n_mids: int) -> None:
    assert fast is not None
    g = torch.Generator().manual_seed(seed)
    mids = torch.randn(n_mids, generator=g).sort().values
    x = torch.cat([torch.randn(5000, generator=g) * 2, mids, torch.tensor([0.0, -0.0])])
    assert torch.equal(fast.nearest(x, mids), ref.nearest(x, mids))


@needs_fast
@given(st.integers(0, 2**32 - 1), st.integers(3, 3000), st.integers(2, 64), st.booleans())
@settings(max_examples=80, deadline=None)
def test_kmeans_matches(seed: int, n: int, k: int, coarse: bool) -> None:
    assert fast is not None
    rng = np.random.default_rng(seed)
    pts = np.sort(rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e3]))
    if coarse:  # repeated points: empty clusters and rows that run out of points
        pts = np.round(pts, 1)
    w = rng.random(n) + 1e-300
    k = min(k, n - 1)
    want = ref.kmeans(pts, w, k, 3, np.random.default_rng(7), 100)
    got = fast.kmeans(pts, w, k, 3, np.random.default_rng(7), 100)
    assert np.array_equal(got, want)


def _use(mp: pytest.MonkeyPatch, implementation: object) -> None:
    from _checks import use_kernels

    use_kernels(mp, implementation)


# -- packing, gathering, deltas -----------------------------------------------------------------


@needs_fast
@given(st.integers(1, 8), st.integers(0, 5000), st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_pack_unpack_match(bits: int, n: int, seed: int) -> None:
    assert fast is not None
    idx = np.random.default_rng(seed).integers(0, 1 << bits, n).astype(np.uint8)
    nbytes = (n * bits + 7) // 8
    packed = ref.pack(idx, bits, nbytes) if bits < 8 else idx.tobytes()
    assert fast.pack(idx, bits, nbytes) == packed
    raw = np.frombuffer(packed, dtype=np.uint8)
    assert np.array_equal(fast.unpack(raw, bits, n), idx)
    if bits < 8:
        assert np.array_equal(ref.unpack(raw, bits, n), idx)


@needs_fast
@pytest.mark.parametrize("bits", [3, 5, 6, 7])
def test_pack_groups_end_alike(bits: int) -> None:
    """The fast pack stores eight indices with one 8-byte store while 8 bytes of output are
    left: every length around that edge, with the top index (all bits set) and random ones."""
    assert fast is not None
    rng = np.random.default_rng(bits)
    for n in range(0, 200):
        nbytes = (n * bits + 7) // 8
        for idx in (
            np.full(n, (1 << bits) - 1, np.uint8),
            rng.integers(0, 1 << bits, n).astype(np.uint8),
        ):
            assert fast.pack(idx, bits, nbytes) == ref.pack(idx, bits, nbytes), n


@needs_fast
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_gather_matches(dtype: torch.dtype) -> None:
    assert fast is not None
    levels = torch.randn(200, generator=torch.Generator().manual_seed(1)).to(dtype)
    idx = np.random.default_rng(0).integers(0, 200, 100_001).astype(np.uint8)
    assert torch.equal(fast.gather(levels, idx), ref.gather(levels, idx))


@needs_fast
@given(st.integers(1, 256), st.integers(0, 3000), st.booleans(), st.integers(0, 2**32 - 1))
@settings(max_examples=100, deadline=None)
def test_delta_by_parent_bin_matches(bins: int, n: int, rearrange: bool, seed: int) -> None:
    assert fast is not None
    rng = np.random.default_rng(seed)
    prev = rng.integers(0, bins, n).astype(np.uint8)
    now = np.where(rng.random(n) < 0.8, prev, rng.integers(0, bins, n)).astype(np.uint8)
    sym_ref, groups_ref = ref.delta_encode(prev, now, bins, rearrange)
    sym_fast, groups_fast = fast.delta_encode(prev, now, bins, rearrange)
    assert np.array_equal(sym_ref, sym_fast) and groups_ref == groups_fast
    assert np.array_equal(fast.delta_decode(prev, sym_fast, bins, rearrange), now)
    assert np.array_equal(ref.delta_decode(prev, sym_fast, bins, rearrange), now)
    # the group sizes a caller counted already (bindiff's ANS contexts) give the same indices
    counts = fast.bin_counts(prev)
    assert np.array_equal(fast.delta_decode(prev, sym_fast, bins, rearrange, counts), now)
    assert np.array_equal(ref.delta_decode(prev, sym_fast, bins, rearrange, counts), now)
    # decoded over the parent's own indices (a chain's intermediate), in place
    for k in (fast, ref):
        mine = prev.copy()
        got = k.delta_decode(mine, sym_fast, bins, rearrange, counts, mine)
        assert np.array_equal(got, now) and (n == 0 or np.shares_memory(got, mine))


@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize("rearrange", [False, True])
def test_delta_decode_refuses_a_difference_beyond_the_bins_alike(
    impl: str, rearrange: bool
) -> None:
    k = ref if impl == "reference" else fast
    if k is None:
        pytest.skip("the compiled kernels are not built here")
    prev = np.array([0, 1, 2, 3, 0, 1], np.uint8)
    symbols = np.array([0, 0, 4, 0, 0, 0], np.uint8)
    with pytest.raises(CorruptCheckpointError, match="difference >= bins=4"):
        k.delta_decode(prev, symbols, 4, rearrange, k.bin_counts(prev))


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 9000),
    st.integers(1, 40),
    st.integers(0, 2),
    st.booleans(),
)
@settings(max_examples=100, deadline=None)
def test_requantize_pass_matches(
    seed: int, n: int, n_levels: int, zeros: int, mapped: bool
) -> None:
    # zeros: 0 none kept, 1 some kept with a zero level, 2 some kept without one (None);
    # mapped: the counts go through an o2i table (a log-domain codebook's non-zero levels)
    assert fast is not None
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    x = torch.randn(n, generator=g) * 3
    x[rng.random(n) < 0.05] = 0.0
    lv = np.sort(rng.normal(size=n_levels) * 3)
    zero_at = -1 if zeros != 1 else int(rng.integers(0, n_levels))
    if zero_at >= 0:
        lv[zero_at] = 0.0
        lv = np.sort(lv)
        zero_at = int(np.flatnonzero(lv == 0.0)[0])
    own = torch.zeros(16, dtype=torch.bool)
    if zeros:
        own[3] = True
    qidx = rng.integers(0, 16, n).astype(np.uint8)
    prot = torch.from_numpy(np.flatnonzero(rng.random(n) < 0.02).astype(np.int64))
    lv_t = torch.as_tensor(lv)
    mids = ((lv_t[1:] + lv_t[:-1]) / 2).to(torch.float32)
    values = lv_t.to(torch.float32)
    o2i = rng.permutation(n_levels).astype(np.uint8) if mapped else None
    got = fast.requantize(x, qidx, own, prot, mids, zero_at, values, o2i)
    want = ref.requantize(x, qidx, own, prot, mids, zero_at, values, o2i)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert torch.equal(got[0], want[0])
    assert got[1:] == pytest.approx(want[1:], rel=1e-9, abs=1e-12)
    # the one pass is the separate passes it replaces
    idx = fast.nearest(x, mids)
    if o2i is not None:
        idx = torch.from_numpy(o2i)[idx.long()]
    zero = own[torch.from_numpy(qidx).long()]
    zero[prot] = False
    if zero_at >= 0:
        idx.masked_fill_(zero, zero_at)
    assert torch.equal(got[0], idx)
    # the same sums to rounding (the AVX-512 loop adds in lanes; the quantizer records the
    # relative error to 8 digits, so the file does not move)
    assert got[1:] == pytest.approx(fast.squared_error(x, idx, values, prot), rel=1e-12, abs=0.0)


@needs_fast
@given(st.integers(0, 9000), st.integers(0, 40), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_squared_error_matches_reference(n: int, n_prot: int, seed: int) -> None:
    """Four interleaved sums a block against the reference's torch sums: the same error up
    to the order of the additions, protected positions (any run lengths between them, the
    first and last positions included) left out of the error and kept in the norm."""
    assert fast is not None
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal(n).astype(np.float32))
    values = torch.from_numpy(np.sort(rng.standard_normal(16)).astype(np.float32))
    idx = torch.from_numpy(rng.integers(0, 16, n).astype(np.uint8))
    picks = rng.integers(0, max(n, 1), n_prot) if n else np.zeros(0, np.int64)
    if n:
        picks = np.concatenate([picks, [0, n - 1]])
    prot = torch.from_numpy(np.unique(picks).astype(np.int64))
    got = fast.squared_error(x, idx, values, prot)
    assert got == pytest.approx(ref.squared_error(x, idx, values, prot), rel=1e-9, abs=1e-12)


def _runs_stream(seed: int, n: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """A symbol stream in ``groups`` contexts: runs of one symbol (often 0) between others."""
    rng = np.random.default_rng(seed)
    p = rng.random() ** 3
    run = int(rng.choice([0, 0, 1, 15]))
    sym = np.where(rng.random(n) < p, rng.integers(0, 16, n), run).astype(np.uint8)
    cuts = np.sort(rng.integers(0, n + 1, groups - 1))
    return sym, np.concatenate([[0], cuts, [n]]).astype(np.int64)


@needs_fast
@given(st.integers(0, 2**32 - 1), st.integers(0, 3000), st.integers(1, 20))
@settings(max_examples=150, deadline=None)
def test_run_length_split_matches(seed: int, n: int, groups: int) -> None:
    assert fast is not None
    sym, bounds = _runs_stream(seed, n, groups)
    parts_ref, parts_fast = ref.rle_split(sym, bounds), fast.rle_split(sym, bounds)
    for a, b in zip(parts_ref, parts_fast, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    tokens, values, others, base, extra, bits = parts_fast
    for k in (ref, fast):
        assert np.array_equal(k.rle_join(tokens, values, extra, bits, bounds, others, base), sym)
    assert np.array_equal(ref.bin_counts(sym), fast.bin_counts(sym))


@needs_fast
def test_run_length_split_matches_on_long_runs() -> None:
    assert fast is not None
    sym = np.zeros(3_000_000, np.uint8)
    sym[[5, 70_000, 2_999_999]] = 3  # runs 5, 69 994, 929 999 | 1 999 999, 0: length classes
    bounds = np.array([0, 1_000_000, 3_000_000], np.int64)
    parts = fast.rle_split(sym, bounds)
    for a, b in zip(ref.rle_split(sym, bounds), parts, strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    tokens, values, others, base, extra, bits = parts
    long = [11 + r.bit_length() for r in (69_994, 929_999, 1_999_999)]
    assert tokens.tolist() == [5, *long, 0] and bits == sum(t - 12 for t in long)
    for k in (ref, fast):
        assert np.array_equal(k.rle_join(tokens, values, extra, bits, bounds, others, base), sym)


@needs_fast
@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize(
    "damage",
    ["token", "base", "others", "short bits", "extra bits", "value is the base", "lost value"],
)
def test_run_length_parts_that_do_not_fit_are_refused_alike(impl: str, damage: str) -> None:
    k = ref if impl == "reference" else fast
    assert k is not None
    sym, bounds = _runs_stream(4, 5000, 3)
    sym[100:200] = 0  # one run of 100: a length class with extra bits
    tokens, values, others, base, extra, bits = ref.rle_split(sym, bounds)
    tokens, values, others, base = tokens.copy(), values.copy(), others.copy(), base.copy()
    if damage == "token":
        tokens[0] = 250  # a run of 2**243
    elif damage == "base":
        base = base[:-1]
    elif damage == "others":
        others[0] += 1
    elif damage == "short bits":
        bits -= 1
    elif damage == "extra bits":
        bits += 1
    elif damage == "value is the base":
        values[0] = base[0]
    else:
        values = values[:-1]
    with pytest.raises(CorruptCheckpointError, match="inconsistent"):
        k.rle_join(tokens, values, extra, bits, bounds, others, base)


# -- the "rle" back ends' zero runs -----------------------------------------------------------


def _decoded_or_refused(k: Any, data: np.ndarray, n: int, nonzero: int) -> object:
    try:
        return k.zero_runs_decode(data, n, nonzero).tobytes()
    except CorruptCheckpointError as exc:
        return str(exc)


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 3000),
    st.sampled_from([0.0, 0.001, 0.05, 0.5, 1.0]),
)
@settings(max_examples=100, deadline=None)
def test_zero_runs_round_trip(seed: int, n: int, density: float) -> None:
    """Runs of every length class (escaped or not, at the ends or not) come back, and both
    encoders write the same payload."""
    assert fast is not None
    rng = np.random.default_rng(seed)
    sym = np.where(rng.random(n) < density, rng.integers(1, 256, n), 0).astype(np.uint8)
    if n > 600 and seed % 2:
        sym[100:620] = 0  # a run past two escapes
    data, nonzero = ref.zero_runs_encode(sym)
    fast_data, fast_nonzero = fast.zero_runs_encode(sym)
    assert np.array_equal(fast_data, data) and fast_nonzero == nonzero
    assert nonzero == int(np.count_nonzero(sym))
    for k in (fast, ref):
        assert np.array_equal(k.zero_runs_decode(data, n, nonzero), sym)


@needs_fast
@given(
    # escapes and zeros often: the bytes that decide a payload's runs and its refusals
    st.lists(st.one_of(st.integers(0, 255), st.sampled_from([0, 255])), max_size=600).map(bytes),
    st.integers(0, 2000),
    st.integers(0, 700),
)
@settings(max_examples=300, deadline=None)
def test_zero_runs_any_payload_is_decoded_or_refused_alike(
    data: bytes, n: int, nonzero: int
) -> None:
    """A parser of untrusted bytes: on any payload, the same symbols or the same message."""
    raw = np.frombuffer(data, np.uint8)
    assert _decoded_or_refused(fast, raw, n, nonzero) == _decoded_or_refused(ref, raw, n, nonzero)


@needs_fast
@pytest.mark.parametrize(
    "payload, n, nonzero, match",
    [
        (b"\x03\x07", 3, 1, "past the end"),  # a run of 3 then a symbol at 3 of 3
        (b"\x00\xff\x07", 5, 1, "inconsistent"),  # escapes after the last run
        (b"\x00\x00", 5, 1, "inconsistent"),  # a zero symbol
        (b"\x00\x01\x07", 5, 1, "inconsistent"),  # two runs for one symbol
        (b"\x07", 5, 2, "announces"),
    ],
)
def test_zero_runs_damaged_payloads_are_refused_alike(
    payload: bytes, n: int, nonzero: int, match: str
) -> None:
    raw = np.frombuffer(payload, np.uint8)
    for k in (fast, ref):
        assert k is not None
        with pytest.raises(CorruptCheckpointError, match=match):
            k.zero_runs_decode(raw, n, nonzero)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler here")
def test_the_ans_encoders_division_is_exact(tmp_path: Path) -> None:
    # the encoders divide the state by a symbol's width with a multiply-high (_ans.h);
    # checked against the processor's division on ~4M dividends and divisors, edges included
    here = Path(__file__).resolve().parent
    kernels_dir = here.parent / "src" / "ckptzip" / "kernels"
    exe = tmp_path / "ans_div_check"
    built = subprocess.run(
        ["cc", "-O2", "-I", str(kernels_dir), str(here / "c" / "ans_div_check.c"), "-o", str(exe)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    done = subprocess.run([str(exe)], capture_output=True, text=True)
    checked, wrong = map(int, done.stdout.split())
    assert done.returncode == 0 and wrong == 0 and checked > 3_000_000


# -- ANS: word for word constriction's ----------------------------------------------------------


def _stream(seed: int, n: int, alphabet: int, contexts: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(alphabet, rng.choice([0.05, 0.5, 5.0])))
    sym = rng.choice(alphabet, size=n, p=p).astype(np.uint8)
    cuts = np.sort(rng.integers(0, n + 1, contexts - 1))
    return sym, np.concatenate([[0], cuts, [n]]).astype(np.int64)


@needs_fast
@given(st.integers(0, 2**32 - 1), st.integers(0, 4000), st.integers(2, 256), st.integers(1, 40))
@settings(max_examples=150, deadline=None)
def test_ans_words_match_constriction(seed: int, n: int, alphabet: int, contexts: int) -> None:
    assert fast is not None
    sym, bounds = _stream(seed, n, alphabet, contexts)
    top = int(sym.max()) + 1 if n else 1
    counts_ref, words_ref = ref.ans_encode(sym, bounds, top)
    counts_fast, words_fast = fast.ans_encode(sym, bounds, top)
    assert np.array_equal(counts_ref, counts_fast)
    assert np.array_equal(words_ref, words_fast)
    assert np.array_equal(fast.ans_decode(words_ref, bounds, counts_ref, n), sym)
    assert np.array_equal(ref.ans_decode(words_fast, bounds, counts_fast, n), sym)


@needs_fast
def test_ans_words_match_constriction_on_long_streams() -> None:
    assert fast is not None
    for seed, alphabet in [(0, 16), (1, 256), (2, 2)]:
        sym, bounds = _stream(seed, 1_500_000, alphabet, 3)
        top = int(sym.max()) + 1
        counts, words = ref.ans_encode(sym, bounds, top)
        assert np.array_equal(fast.ans_encode(sym, bounds, top)[1], words)
        assert np.array_equal(fast.ans_decode(words, bounds, counts, sym.size), sym)


@needs_fast
@pytest.mark.parametrize("dominant", [0, 77, 255])
def test_ans_decoders_take_both_kinds_of_decode_table_slot(dominant: int) -> None:
    """Widths at both ends of 2^24: one symbol holding nearly all of it, the others 1 to a few
    (some absent: width 1 all the same), so the decoders' table has slots wholly one symbol's
    and slots split among dozens, both read by every decoder (one stream, two, lanes)."""
    assert fast is not None
    rng = np.random.default_rng(dominant)
    rare = rng.choice(256, size=600).astype(np.uint8)
    rare = rare[(rare % 5 != 0) | (rare == dominant)]  # every fifth symbol never appears
    sym = np.full(300_000, dominant, np.uint8)
    sym[rng.choice(sym.size, size=rare.size, replace=False)] = rare
    bounds = np.array([0, 1000, sym.size], np.int64)
    counts, words = ref.ans_encode(sym, bounds, 256)
    assert np.array_equal(fast.ans_encode(sym, bounds, 256)[1], words)
    assert np.array_equal(fast.ans_decode(words, bounds, counts, sym.size), sym)
    stream = (words, bounds, counts, sym.size)
    pair = fast.ans_decode_pair(stream, stream)
    assert all(np.array_equal(got, sym) for got in pair)
    for block in (4096, 1 << 18):
        lengths, lane_words = fast.ans_lanes_encode(sym, bounds, counts, block, 4)
        got = fast.ans_lanes_decode(lane_words, lengths, bounds, counts, sym.size, block, 4)
        assert got is not None and np.array_equal(got, sym)


@needs_fast
@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_ans_damaged_streams_are_refused_alike(impl: str) -> None:
    k = ref if impl == "reference" else fast
    assert k is not None
    sym, bounds = _stream(3, 5000, 8, 2)
    counts, words = ref.ans_encode(sym, bounds, int(sym.max()) + 1)
    with pytest.raises(CorruptCheckpointError, match="zero word"):
        k.ans_decode(np.concatenate([words, [0]]).astype(np.uint32), bounds, counts, sym.size)
    with pytest.raises(CorruptCheckpointError, match="left after"):
        k.ans_decode(np.concatenate([[7], words]).astype(np.uint32), bounds, counts, sym.size)


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.tuples(st.integers(0, 3000), st.integers(0, 3000)),
    st.tuples(st.integers(2, 256), st.integers(2, 16)),
    st.tuples(st.integers(1, 40), st.integers(1, 40)),
)
@settings(max_examples=100, deadline=None)
def test_two_ans_streams_in_one_loop_decode_as_each_alone(
    seed: int, n: tuple[int, int], alphabet: tuple[int, int], contexts: tuple[int, int]
) -> None:
    assert fast is not None
    streams, want = [], []
    for k in range(2):
        sym, bounds = _stream(seed + k, n[k], alphabet[k], contexts[k])
        counts, words = ref.ans_encode(sym, bounds, int(sym.max()) + 1 if n[k] else 1)
        streams.append((words, bounds, counts, n[k]))
        want.append(sym)
    for impl in (fast, ref):
        got = impl.ans_decode_pair(streams[0], streams[1])
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


@needs_fast
@pytest.mark.parametrize("impl", ["reference", "fast"])
@pytest.mark.parametrize("damaged", [0, 1])
def test_two_ans_streams_damaged_are_refused_as_each_alone(impl: str, damaged: int) -> None:
    k = ref if impl == "reference" else fast
    assert k is not None
    streams = []
    for seed in (3, 4):
        sym, bounds = _stream(seed, 5000, 8, 2)
        counts, words = ref.ans_encode(sym, bounds, int(sym.max()) + 1)
        streams.append((words, bounds, counts, sym.size))
    words, bounds, counts, size = streams[damaged]
    for bad, match in (
        (np.concatenate([words, [0]]), "zero word"),
        (np.concatenate([[7], words]), "left after"),
    ):
        pair = list(streams)
        pair[damaged] = (bad.astype(np.uint32), bounds, counts, size)
        with pytest.raises(CorruptCheckpointError, match=match):
            k.ans_decode_pair(pair[0], pair[1])


# -- ANS in lanes: each lane of each block constriction's words ----------------------------------


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 3000),
    st.integers(1, 40),
    st.integers(1, 6),
    st.sampled_from([1, 5, 64, 1000, 1 << 18]),
    st.sampled_from([1, 2, 3, 4, 7]),
    st.integers(1, 3),
)
@settings(max_examples=150, deadline=None)
def test_ans_lanes_match_constriction(
    seed: int, n: int, alphabet: int, contexts: int, block: int, lanes: int, threads: int
) -> None:
    assert fast is not None
    sym, bounds = _stream(seed, n, max(alphabet, 2), contexts)
    top = int(sym.max()) + 1 if n else 1
    counts = ref.ans_counts(sym, bounds, top)
    assert np.array_equal(fast.ans_counts(sym, bounds, top), counts)
    lengths_ref, words_ref = ref.ans_lanes_encode(sym, bounds, counts, block, lanes)
    lengths, words = fast.ans_lanes_encode(sym, bounds, counts, block, lanes, threads=threads)
    assert np.array_equal(lengths, lengths_ref) and np.array_equal(words, words_ref)
    args = (bounds, counts, n, block, lanes)
    got = fast.ans_lanes_decode(words_ref, lengths_ref, *args, threads=threads)
    assert got is not None and np.array_equal(got, sym)
    back = ref.ans_lanes_decode(words, lengths, *args)
    assert back is not None and np.array_equal(back, sym)
    # straight into a tensor: each symbol's entry of the table, in the table's dtype
    for dtype in (torch.bfloat16, torch.float32, torch.float64):
        table = torch.randn(top, generator=torch.Generator().manual_seed(seed)).to(dtype)
        want = ref.gather(table, sym)
        for k in (fast, ref):
            out = torch.empty(n, dtype=dtype)
            assert k.ans_lanes_decode(words, lengths, *args, table=table, out=out) is None
            assert torch.equal(out, want)
        # added to a base (a residual's reconstruction), into a new tensor or over the base
        base = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
        for k in (fast, ref):
            out = torch.empty(n, dtype=dtype)
            k.ans_lanes_decode(words, lengths, *args, table=table, out=out, base=base)
            assert _bits_equal(out, base + want)
            over = base.clone()
            k.ans_lanes_decode(words, lengths, *args, table=table, out=over, base=over)
            assert _bits_equal(over, base + want)


@needs_fast
def test_word_arrays_at_odd_addresses_reach_the_c_code_aligned() -> None:
    # a chunk starts wherever the manifest before it ended, so the words a decoder is given
    # may be a view at an odd address; C reads them as uint32_t, which must be aligned (the
    # sanitized build's fuzz run, test_sanitizers.py, caught the lanes decoder reading such
    # a view): the kernels hand over an aligned copy, and decode the same symbols
    assert fast is not None
    sym, bounds = _stream(3, 5000, 7, 2)
    counts = ref.ans_counts(sym, bounds, 7)
    lengths, words = fast.ans_lanes_encode(sym, bounds, counts, 1000, 4)
    raw = bytearray(1 + words.nbytes)
    raw[1:] = words.astype("<u4").tobytes()
    odd = np.frombuffer(raw, dtype="<u4", offset=1)
    assert not odd.flags.aligned and np.array_equal(odd, words)
    handed = fast._contig(odd, np.uint32)
    assert handed.flags.aligned and handed.flags.c_contiguous and np.array_equal(handed, words)
    aligned = fast._contig(words, np.uint32)
    assert aligned.ctypes.data == words.ctypes.data  # no copy where none is needed
    got = fast.ans_lanes_decode(odd, lengths, bounds, counts, sym.size, 1000, 4)
    assert got is not None and np.array_equal(got, sym)


@needs_fast
@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_ans_lanes_damaged_streams_are_refused_alike(impl: str) -> None:
    k = ref if impl == "reference" else fast
    assert k is not None
    sym, bounds = _stream(3, 5000, 8, 2)
    counts = ref.ans_counts(sym, bounds, int(sym.max()) + 1)
    lengths, words = ref.ans_lanes_encode(sym, bounds, counts, 2048, 4)
    args = (bounds, counts, sym.size, 2048, 4)
    zero = np.concatenate([words, [0]]).astype(np.uint32)
    with pytest.raises(CorruptCheckpointError, match="zero word"):
        k.ans_lanes_decode(
            zero, lengths + np.eye(1, lengths.size, lengths.size - 1, np.int64)[0], *args
        )
    extra = np.concatenate([[7], words]).astype(np.uint32)
    with pytest.raises(CorruptCheckpointError, match="left after"):
        k.ans_lanes_decode(extra, lengths + np.eye(1, lengths.size, 0, np.int64)[0], *args)


# -- ANS in 32 wide lanes: the compiled coder writes the reference's words -------------------


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 5000),
    st.integers(1, 256),
    st.sampled_from([32, 64, 4096, 1 << 18]),
    st.integers(1, 3),
)
@settings(max_examples=150, deadline=None)
def test_ans_wide_matches_the_reference(
    seed: int, n: int, alphabet: int, block: int, threads: int
) -> None:
    assert fast is not None
    sym, _ = _stream(seed, n, max(alphabet, 2), 1)
    top = int(sym.max()) + 1 if n else 1
    counts = np.bincount(sym, minlength=top).astype(np.uint32)
    lengths_ref, words_ref = ref.ans_wide_encode(sym, counts, block)
    lengths, words = fast.ans_wide_encode(sym, counts, block, threads=threads)
    assert np.array_equal(lengths, lengths_ref) and np.array_equal(words, words_ref)
    assert words.dtype == np.uint16 and int(lengths.sum()) == words.size
    args = (counts, n, block)
    got = fast.ans_wide_decode(words_ref, lengths_ref, *args, threads=threads)
    assert got is not None and np.array_equal(got, sym)
    back = ref.ans_wide_decode(words, lengths, *args)
    assert back is not None and np.array_equal(back, sym)
    # straight into a tensor of each width, and added to a base, as ans_lanes_decode does
    for dtype in (torch.bfloat16, torch.float32, torch.float64):
        table = torch.randn(top, generator=torch.Generator().manual_seed(seed)).to(dtype)
        want = ref.gather(table, sym)
        base = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
        for k in (fast, ref):
            out = torch.empty(n, dtype=dtype)
            assert k.ans_wide_decode(words, lengths, *args, table=table, out=out) is None
            assert torch.equal(out, want)
            k.ans_wide_decode(words, lengths, *args, table=table, out=out, base=base)
            assert _bits_equal(out, base + want)
            over = base.clone()
            k.ans_wide_decode(words, lengths, *args, table=table, out=over, base=over)
            assert _bits_equal(over, base + want)


@needs_fast
@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_ans_wide_damaged_streams_are_refused_alike(impl: str) -> None:
    k = ref if impl == "reference" else fast
    assert k is not None
    sym, _ = _stream(3, 9000, 8, 1)
    counts = np.bincount(sym).astype(np.uint32)
    lengths, words = ref.ans_wide_encode(sym, counts, 4096)  # three blocks
    args = (counts, sym.size, 4096)
    last = np.eye(1, lengths.size, lengths.size - 1, np.int64)[0]
    for bad, lens in (
        (words[:-1], lengths - last),  # a block one word short
        (np.concatenate([words, [7]]), lengths + last),  # a word no step takes
        (words[:-1], lengths),  # lengths past the words
        (words, np.minimum(lengths, 63)),  # blocks without their 32 states
    ):
        with pytest.raises(CorruptCheckpointError, match="does not decode"):
            k.ans_wide_decode(bad.astype(np.uint16), lens, *args)
    # a changed word decodes to other symbols, or is refused: a lane ends elsewhere
    flipped = words.copy()
    flipped[100] ^= 0x0100
    with pytest.raises(CorruptCheckpointError, match="does not decode"):
        k.ans_wide_decode(flipped, lengths, *args)
    # one distinct symbol codes nothing, so a block with words is damaged
    ones = np.full(5000, 3, np.uint8)
    one_counts = np.bincount(ones).astype(np.uint32)
    lens, none = ref.ans_wide_encode(ones, one_counts, 4096)
    assert none.size == 0 and not lens.any()
    assert np.array_equal(k.ans_wide_decode(none, lens, one_counts, 5000, 4096), ones)
    with pytest.raises(CorruptCheckpointError, match="does not decode"):
        k.ans_wide_decode(np.zeros(1, np.uint16), np.array([1, 0]), one_counts, 5000, 4096)


_WIDE_DECODE = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    import torch
    from ckptzip.kernels import _fast as fast
    h = hashlib.sha256()
    rng = np.random.default_rng(7)
    # alphabets about the AVX2 compare decoder's 16 and the AVX-512 decoder's 32, sizes
    # about a step, a chunk and a block
    for n in (1, 31, 32, 33, 4095, 4096, 4097, 70_001):
        for alphabet in (2, 3, 5, 16, 17, 32, 33, 200):
            sym = rng.integers(0, alphabet, n).astype(np.uint8)
            counts = np.bincount(sym, minlength=alphabet).astype(np.uint32)
            lengths, words = fast.ans_wide_encode(sym, counts, 8192)
            got = fast.ans_wide_decode(words, lengths, counts, n, 8192)
            assert np.array_equal(got, sym), (n, alphabet)
            table = torch.randn(alphabet, generator=torch.Generator().manual_seed(n))
            out = torch.empty(n)
            fast.ans_wide_decode(words, lengths, counts, n, 8192, table=table, out=out)
            h.update(lengths.tobytes() + words.tobytes())  # the encoder's vector steps too
            h.update(got.tobytes() + out.numpy().tobytes())
            try:
                fast.ans_wide_decode(words[:-1], lengths - np.eye(1, lengths.size,
                                     lengths.size - 1, np.int64)[0], counts, n, 8192)
            except Exception as exc:
                h.update(type(exc).__name__.encode())
    print(h.hexdigest())
    """
)


@needs_fast
def test_the_scalar_wide_decoder_writes_what_the_vector_one_writes() -> None:
    # x86-64 decodes the 32 lanes of "ans-wide" as two AVX-512 vectors (alphabets of up to
    # 32) or four AVX2 ones, and encodes them as two AVX-512 vectors; CKPTZIP_NO_AVX512 makes
    # the same process take the AVX2 decoders and the scalar encoder, CKPTZIP_NO_AVX2 the
    # scalar loops other machines run; the same words either way
    _same_under_every_switch(_WIDE_DECODE)


def _ctx_stream(
    seed: int, n: int, alphabet: int, contexts: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stream cut into contexts of their own distributions, some holding one symbol, some
    empty, some shorter than a step: symbols, bounds and counts."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.integers(0, n + 1, contexts - 1))
    bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
    sym = np.empty(n, np.uint8)
    for c in range(contexts):
        lo, hi = int(bounds[c]), int(bounds[c + 1])
        if rng.random() < 0.25:
            sym[lo:hi] = rng.integers(0, alphabet)
        else:
            p = rng.dirichlet(np.full(alphabet, rng.choice([0.05, 0.5, 5.0])))
            sym[lo:hi] = rng.choice(alphabet, size=hi - lo, p=p)
    return sym, bounds, ref.ans_counts(sym, bounds, alphabet)


@needs_fast
@given(
    st.integers(0, 2**32 - 1),
    st.integers(0, 6000),
    st.integers(1, 256),
    st.integers(1, 24),
    st.sampled_from([32, 64, 96, 4096, 1 << 18]),
    st.integers(1, 3),
)
@settings(max_examples=150, deadline=None)
def test_ans_wide_ctx_matches_the_reference(
    seed: int, n: int, alphabet: int, contexts: int, block: int, threads: int
) -> None:
    assert fast is not None
    sym, bounds, counts = _ctx_stream(seed, n, alphabet, contexts)
    lengths_ref, words_ref = ref.ans_wide_ctx_encode(sym, bounds, counts, block)
    lengths, words = fast.ans_wide_ctx_encode(sym, bounds, counts, block, threads=threads)
    assert np.array_equal(lengths, lengths_ref) and np.array_equal(words, words_ref)
    assert words.dtype == np.uint16 and int(lengths.sum()) == words.size
    args = (bounds, counts, n, block)
    assert np.array_equal(fast.ans_wide_ctx_decode(words_ref, lengths_ref, *args, threads), sym)
    assert np.array_equal(ref.ans_wide_ctx_decode(words, lengths, *args), sym)
    # one context is the "ans-wide" stream's lanes, under a model of the symbols it holds
    if n and alphabet > 1 and (counts > 0).all():
        single = np.array([0, n], np.int64), counts.sum(axis=0, keepdims=True).astype(np.uint32)
        assert np.array_equal(
            fast.ans_wide_ctx_encode(sym, *single, block)[1],
            fast.ans_wide_encode(sym, single[1][0], block)[1],
        )


@needs_fast
@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_ans_wide_ctx_damaged_streams_are_refused_alike(impl: str) -> None:
    k = ref if impl == "reference" else fast
    assert k is not None
    sym, bounds, counts = _ctx_stream(5, 9000, 8, 6)
    lengths, words = ref.ans_wide_ctx_encode(sym, bounds, counts, 4096)  # three blocks
    args = (bounds, counts, sym.size, 4096)
    last = np.eye(1, lengths.size, lengths.size - 1, np.int64)[0]
    for bad, lens in (
        (words[:-1], lengths - last),  # a block one word short
        (np.concatenate([words, [7]]), lengths + last),  # a word no step takes
        (words[:-1], lengths),  # lengths past the words
        (words, np.minimum(lengths, 63)),  # blocks without their 32 states
    ):
        with pytest.raises(CorruptCheckpointError, match="does not decode"):
            k.ans_wide_ctx_decode(bad.astype(np.uint16), lens, *args)
    flipped = words.copy()
    flipped[100] ^= 0x0100
    with pytest.raises(CorruptCheckpointError, match="does not decode"):
        k.ans_wide_ctx_decode(flipped, lengths, *args)
    for bounds_bad in (bounds[::-1], bounds[:-1], bounds + 1):
        with pytest.raises(CorruptCheckpointError):
            k.ans_wide_ctx_decode(words, lengths, bounds_bad, counts, sym.size, 4096)


_WIDE_CTX = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    from ckptzip.kernels import _fast as fast
    h = hashlib.sha256()
    rng = np.random.default_rng(11)
    # alphabets about the vector decoders' 16 and 32, contexts from shorter than a step to
    # longer than a chunk, boundaries on and off the steps
    for n in (33, 4097, 70_001):
        for alphabet in (2, 5, 16, 17, 32, 33, 200):
            for contexts in (1, 3, 16):
                cuts = np.sort(rng.integers(0, n + 1, contexts - 1))
                bounds = np.concatenate([[0], cuts, [n]]).astype(np.int64)
                sym = rng.integers(0, alphabet, n).astype(np.uint8)
                sym[bounds[0]:bounds[1]] = 1 if contexts > 1 else sym[bounds[0]:bounds[1]]
                counts = fast.ans_counts(sym, bounds, alphabet)
                lengths, words = fast.ans_wide_ctx_encode(sym, bounds, counts, 8192)
                got = fast.ans_wide_ctx_decode(words, lengths, bounds, counts, n, 8192)
                assert np.array_equal(got, sym), (n, alphabet, contexts)
                h.update(lengths.tobytes() + words.tobytes() + got.tobytes())
    print(h.hexdigest())
    """
)


@needs_fast
def test_the_scalar_wide_ctx_coder_writes_what_the_vector_one_writes() -> None:
    # whole steps inside a context run "ans-wide"'s vector loops (AVX-512, or AVX2 for the
    # decoder) with that context's model; the same words and symbols under every switch
    _same_under_every_switch(_WIDE_CTX)


@needs_fast
@given(st.integers(1, 8), st.integers(0, 20_000), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_unpack_gather_matches(bits: int, n: int, seed: int) -> None:
    assert fast is not None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, 1 << bits, n).astype(np.uint8)
    raw = np.frombuffer(ref.pack(idx, bits, (n * bits + 7) // 8), np.uint8)
    table = torch.randn(1 << bits, generator=torch.Generator().manual_seed(seed))
    for dtype in (torch.float16, torch.float32, torch.float64):
        outs = [torch.empty(n, dtype=dtype) for _ in range(2)]
        tops = [
            k.unpack_gather(raw, bits, table.to(dtype), o)
            for k, o in zip((fast, ref), outs, strict=True)
        ]
        assert tops[0] == tops[1] == int(idx.max(initial=0))
        assert torch.equal(outs[0], outs[1])
        assert torch.equal(outs[0], ref.gather(table.to(dtype), idx))
        # added to a base: one addition in the dtype, as torch's base + change (bf16 and
        # fp16 go to the reference, which adds in the dtype too)
        base = torch.randn(n, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
        base[::7] = float("inf")
        want = base + ref.gather(table.to(dtype), idx)
        for k in (fast, ref):
            out = torch.empty(n, dtype=dtype)
            assert k.unpack_gather(raw, bits, table.to(dtype), out, base) == tops[0]
            assert _bits_equal(out, want)
            over = base.clone()
            assert k.unpack_gather(raw, bits, table.to(dtype), over, over) == tops[0]
            assert _bits_equal(over, want)


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same bits (NaN payloads included), not only equal values."""
    return a.dtype == b.dtype and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
    )


@pytest.mark.parametrize("impl", ["reference", "fast"])
def test_unpack_gather_reports_indices_beyond_the_table_alike(impl: str) -> None:
    # 10 levels in 4 bits: 15 addresses nothing; both report it for the caller to refuse
    k = ref if impl == "reference" else fast
    if k is None:
        pytest.skip("the compiled kernels are not built here")
    raw = np.frombuffer(ref.pack(np.full(100, 15, np.uint8), 4, 50), np.uint8)
    assert k.unpack_gather(raw, 4, torch.zeros(10), torch.empty(100)) == 15


# -- whole files: the implementation chosen at import writes the same bytes ---------------------

_SAVE = textwrap.dedent(
    """
    import hashlib, sys, torch, ckptzip
    from ckptzip import kernels
    g = torch.Generator().manual_seed(0)
    def state(step):
        h = torch.Generator().manual_seed(step)
        w = torch.randn(200_003, generator=g if step == 0 else h) * 0.02
        return {
            "model": {"w": w, "b": (torch.randn(9000, generator=h) * 0.1).bfloat16(),
                      "h": torch.randn(5000, generator=h).half()},
            "optimizer": {"state": {0: {"exp_avg": w * 0.01, "exp_avg_sq": w.square() * 1e-3,
                                        "step": torch.tensor(float(step))}}},
            "step": step,
        }
    out = sys.argv[1]
    mgr = ckptzip.CheckpointManager(out, keyframe_every=3)
    base = state(0)
    for step in range(3):
        s = state(0)
        s["model"]["w"] = base["model"]["w"] + 1e-4 * step
        mgr.save(step, s)
    mgr.close()
    print(kernels.IMPLEMENTATION)
    """
)


def _saved(tmp: Path, implementation: str) -> dict[str, str]:
    env = {**os.environ, "CKPTZIP_KERNELS": implementation}
    out = tmp / implementation
    done = subprocess.run(
        [sys.executable, "-c", _SAVE, str(out)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == implementation
    # the step files; the directory's lock records its holder, not the checkpoint
    files = sorted(out.glob("*.ckz"))
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@needs_fast
def test_reference_and_fast_kernels_write_byte_identical_files(tmp_path: Path) -> None:
    want = _saved(tmp_path, "reference")
    got = _saved(tmp_path, "fast")
    assert len(want) >= 3
    assert got == want


_QUANTIZE = textwrap.dedent(
    """
    import hashlib, torch
    from ckptzip.config import QuantConfig
    from ckptzip.quantize import quantize
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300_007, generator=g) * 0.02
    w[::11] = 0.0
    sq = w.square()
    h = hashlib.sha256()
    for x, cfg in [
        (w, QuantConfig()),
        (w, QuantConfig(bins=4, prune=0.3, protect=0.01)),
        (w, QuantConfig(bins=32, prune=0.1)),  # 31 cut-offs: the AVX-512 loop's largest
        (w, QuantConfig(bins=32, rounding="stochastic")),
        (w, QuantConfig(bins=256, prune=0.05)),
        (sq, QuantConfig(log_domain=True)),
        (sq, QuantConfig(log_domain=True, bins=64, prune=0.2)),
    ]:
        q = quantize(x, cfg)
        h.update(q.indices.tobytes() + q.protected_positions.tobytes() + q.levels.tobytes())
        h.update(repr(q.rel_error).encode())
    print(h.hexdigest())
    """
)


_KEY_SCAN = textwrap.dedent(
    """
    import hashlib, numpy as np, torch
    from ckptzip.kernels import _fast as fast
    from ckptzip.sketch import key_table
    g = torch.Generator().manual_seed(1)
    z, nz, nan, inf = 0.0, -0.0, float("nan"), float("inf")
    cases = [
        torch.randn(100_003, generator=g) * 0.02,
        torch.randn(4099, generator=g).abs(),  # a zero minimum below: the first zero's sign
        torch.tensor([1.0, nz, z, 2.0] * 5), torch.tensor([2.0, z, nz, 1.0] * 5),
        torch.tensor([-1.0, z, nz] * 5), torch.tensor([-1.0, nz, z] * 5),
        torch.tensor([nz] * 40), torch.tensor([nan] * 9 + [1.0] * 20),
        torch.tensor([1e-40, 2.0, -3e-42] * 7),  # subnormals: slices of several thresholds
        torch.cat([torch.randn(100, generator=g), torch.tensor([1e-39]), -torch.ones(99)]),
        torch.tensor([inf, 1.0] * 8), torch.tensor([3.0, -2.0, 7.0]),
    ]
    cases[1][[5, 3000]] = torch.tensor([nz, z])
    h = hashlib.sha256()
    for alpha in (0.01, 0.002):
        table = key_table(alpha, 2048)
        for x in cases:
            hist, lo, hi, finite = fast.key_scan(x, table)
            h.update(hist.tobytes() + np.float32(lo).tobytes() + np.float32(hi).tobytes())
            h.update(bytes([finite]))
    print(h.hexdigest())
    """
)


_FIT_SUMS = textwrap.dedent(
    """
    import hashlib, math, torch
    from ckptzip.kernels import _fast as fast
    from ckptzip.sketch import _thresholds
    g = torch.Generator().manual_seed(3)
    h = hashlib.sha256()
    x = torch.randn(100_003, generator=g) * 0.02
    x[::13] = 0.0
    v = torch.exp(torch.randn(x.numel(), generator=g) * 6.0 - 14.0)
    v[::101] = float("nan")
    a = x.abs()
    for key_min, cap in ((-300, 2048), (-40, 64), (-4000, 2048)):
        t = _thresholds(key_min, cap, 0.01, torch.zeros(0))
        for rules in (
            ((math.inf, -1), (-1.0, -1)),
            ((float(a.kthvalue(99_000).values), 500), (float(a.kthvalue(30_000).values), 70)),
        ):
            h.update(fast.fit_sums(x, v, 1e-8, t, cap, *rules).tobytes())
    print(h.hexdigest())
    """
)


@needs_fast
def test_the_scalar_fit_sums_add_what_the_vector_ones_add() -> None:
    # the first moment's fit sums: eight values at a time, buckets from a fitted log2 with
    # AVX-512 or by gathers with AVX2; the scalar loop elsewhere; the same sums to the bit
    _same_under_every_switch(_FIT_SUMS)


@needs_fast
def test_the_scalar_key_scan_counts_what_the_vector_one_counts() -> None:
    # the sketch pass goes sixteen values at a time with AVX-512 (keys by arithmetic) or
    # eight with AVX2 (keys by a gather); the same counts, and the same extremes to the bit
    # (a zero extreme keeps the sign of the first zero, as in the loop)
    _same_under_every_switch(_KEY_SCAN)


def _same_under_every_switch(
    script: str, switches: tuple[str, ...] = ("CKPTZIP_NO_AVX512", "CKPTZIP_NO_AVX2")
) -> None:
    """``script`` prints the same in a fresh interpreter by default and with each of
    ``switches`` set to 1 (``CKPTZIP_NO_AVX512``: the AVX2 loops; ``CKPTZIP_NO_AVX2``: the
    scalar ones other processors run); the kernels choose their loops once per process, so
    each choice needs its own."""
    printed = {}
    for switch in (None, *switches):
        env = {k: v for k, v in os.environ.items() if k not in switches}
        if switch is not None:
            env[switch] = "1"
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        printed[switch] = done.stdout.strip()
    assert len(set(printed.values())) == 1, printed


@needs_fast
def test_the_scalar_assignment_writes_what_the_vector_one_writes() -> None:
    # x86-64 runs the fused assignment sixteen values at a time (AVX-512, codebooks of up to
    # 32 levels) or eight (AVX2) where the processor has them; CKPTZIP_NO_AVX512 makes the
    # same process take the AVX2 loop, CKPTZIP_NO_AVX2 the scalar loop other machines run
    _same_under_every_switch(_QUANTIZE)


@needs_fast
@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 20_001])
def test_residual_error_matches_the_reference(n: int) -> None:
    # the float64 sums over the finite entries of x, in another order: equal to rounding
    assert fast is not None
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g)
    y = x + 1e-3 * torch.randn(n, generator=g)
    if n > 10:
        x[[3, 7, 9]] = torch.tensor([float("nan"), float("inf"), -float("inf")])
        y[5] = float("inf")  # a reconstruction that overflowed where x is finite counts
    got, want = fast.residual_error(x, y), ref.residual_error(x, y)
    assert got == pytest.approx(want, rel=1e-12, abs=0.0, nan_ok=True)
    if n > 10:
        assert math.isinf(got[0]) and math.isfinite(got[1])
        y[5] = x[5]
        got, want = fast.residual_error(x, y), ref.residual_error(x, y)
        assert got == pytest.approx(want, rel=1e-12, abs=0.0) and got[0] > 0
    # another dtype goes to the reference
    assert fast.residual_error(x.double(), y.double()) == ref.residual_error(x.double(), y.double())


_DELTA_DECODE = textwrap.dedent(
    """
    import hashlib
    import numpy as np
    from ckptzip.kernels import _fast as fast
    h = hashlib.sha256()
    rng = np.random.default_rng(5)
    # sizes about a 64-index block, bins about the vector passes' 16 and 32, runs of equal
    # parents (one stream ends exactly at the buffer's end, or just before it)
    for n in (0, 1, 63, 64, 65, 127, 128, 1000, 4096, 70_001):
        for bins in (1, 2, 15, 16, 17, 32, 33, 200):
            prev = rng.integers(0, bins, n).astype(np.uint8)
            if n > 10:
                prev[: n // 3] = bins - 1
            now = np.where(rng.random(n) < 0.7, prev, rng.integers(0, bins, n)).astype(np.uint8)
            sym, _ = fast.delta_encode(prev, now, bins, True)
            counts = fast.bin_counts(prev)
            assert np.array_equal(counts, np.bincount(prev, minlength=256))
            for known in (None, counts):
                got = fast.delta_decode(prev, sym, bins, True, known)
                assert np.array_equal(got, now), (n, bins)
            h.update(sym.tobytes() + counts.tobytes() + got.tobytes())
            if n and bins < 256:  # a difference >= bins is refused by both loops
                bad = sym.copy()
                bad[-1] = bins
                try:
                    fast.delta_decode(prev, bad, bins, True, counts)
                except Exception as exc:
                    h.update(type(exc).__name__.encode())
                else:
                    raise AssertionError("a difference >= bins decoded")
    # run-length splits: runs of the base around 16 (the vector pass's limit) and long ones,
    # groups not aligned to its 64-symbol chunks
    for n, density in ((1000, 0.5), (70_001, 0.05), (70_001, 0.3), (300_000, 0.002)):
        sym = np.where(rng.random(n) < density, rng.integers(0, 16, n), 7).astype(np.uint8)
        bounds = np.array([0, 3, 130, n // 2, n // 2 + 64, n], np.int64)
        for part in fast.rle_split(sym, bounds):
            h.update(np.asarray(part).tobytes())
    # requantizing against another codebook: 16 and 32 levels (the vector loop), 40 (the
    # loop it leaves to), mapped through o2i or not, the parent's zeros kept or not
    import torch
    for n_levels, mapped, zeros in ((16, False, 1), (32, True, 2), (40, False, 1), (8, True, 5)):
        x = torch.from_numpy(rng.standard_normal(70_001).astype(np.float32))
        x[::9] = 0.0
        lv = np.sort(rng.standard_normal(n_levels))
        lv[n_levels // 2] = 0.0
        lv = np.sort(lv)
        zero_at = int(np.flatnonzero(lv == 0.0)[0])
        own = torch.zeros(64, dtype=torch.bool)
        own[:zeros] = True
        qidx = rng.integers(0, 64, x.numel()).astype(np.uint8)
        prot = torch.from_numpy(np.flatnonzero(rng.random(x.numel()) < 0.01).astype(np.int64))
        lv_t = torch.as_tensor(lv)
        mids = ((lv_t[1:] + lv_t[:-1]) / 2).to(torch.float32)
        o2i = rng.permutation(n_levels).astype(np.uint8) if mapped else None
        idx, err2, norm2 = fast.requantize(x, qidx, own, prot, mids, zero_at, lv_t.float(), o2i)
        h.update(idx.numpy().tobytes() + f"{err2:.10g} {norm2:.10g}".encode())
    # levels gathered into a tensor (16 levels: the vector pass; 40: blocks it leaves)
    from ckptzip.kernels import _reference as ref
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        for levels in (16, 40):
            table = torch.randn(levels, generator=torch.Generator().manual_seed(levels)).to(dtype)
            idx = rng.integers(0, 16, 10_001).astype(np.uint8)
            idx[5000:5100] = rng.integers(0, levels, 100)
            got = fast.gather(table, idx)
            assert torch.equal(got, ref.gather(table, idx)), (dtype, levels)
            h.update(got.view(torch.uint8).numpy().tobytes())
    print(h.hexdigest())
    """
)


@needs_fast
def test_the_scalar_delta_decoding_writes_what_the_vector_one_writes() -> None:
    # x86-64 with AVX-512 (BW, DQ, VBMI2) counts parent bins, rearranges a delta, splits it
    # into runs and applies it 64 indices at a time, and requantizes 16 values at a time;
    # CKPTZIP_NO_AVX512 makes the same process take the scalar loops
    _same_under_every_switch(_DELTA_DECODE, ("CKPTZIP_NO_AVX512",))
