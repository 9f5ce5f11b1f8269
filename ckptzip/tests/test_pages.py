"""ckptzip._pages: a load's large outputs advised to huge pages, values untouched."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import ckptzip
from ckptzip import _pages


def _anon_huge_kib() -> int | None:
    try:
        text = Path("/proc/self/smaps_rollup").read_text()
    except OSError:
        return None
    m = re.search(r"AnonHugePages:\s+(\d+) kB", text)
    return None if m is None else int(m.group(1))


@pytest.mark.parametrize("n", [0, 1, 1000, (_pages.MIN_BYTES // 4) + 12_345])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.uint8])
def test_empty_is_an_ordinary_tensor(n: int, dtype: torch.dtype) -> None:
    x = _pages.empty(n, dtype)
    assert x.shape == (n,) and x.dtype == dtype and x.device.type == "cpu"
    assert x.is_contiguous() and x.storage_offset() == 0
    assert x.untyped_storage().nbytes() == n * dtype.itemsize  # nothing more is saved
    x.fill_(1)
    assert bool((x == 1).all())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages: Linux")
def test_a_large_output_is_advised_to_huge_pages_where_the_system_allows() -> None:
    mode = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode.exists() or "[never]" in mode.read_text() or _pages._madvise() is None:
        pytest.skip("no transparent huge pages here")
    before = _anon_huge_kib()
    if before is None:
        pytest.skip("no /proc/self/smaps_rollup")
    x = _pages.empty(16 * _pages.HUGE_PAGE // 4, torch.float32)
    x.fill_(1.0)  # the first touch: the kernel maps huge pages where it can spare them
    after = _anon_huge_kib()
    assert after is not None
    # the kernel may lack free huge pages: then the advice changes nothing, which is allowed;
    # where it had them, at least half of the aligned interior is huge
    if after == before:
        pytest.skip("the kernel mapped no huge page (none free)")
    assert after - before >= 7 * _pages.HUGE_PAGE // 1024


def test_a_load_returns_the_same_values_with_and_without_the_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(0)
    state = {"w": torch.randn(3_000_000, generator=g), "b": torch.randn(10, generator=g)}
    ckptzip.save(state, tmp_path / "s.ckz")
    advised = ckptzip.load(tmp_path / "s.ckz")
    monkeypatch.setattr(_pages, "MIN_BYTES", 1 << 62)
    plain = ckptzip.load(tmp_path / "s.ckz")
    for k in state:
        assert torch.equal(advised[k].view(torch.int32), plain[k].view(torch.int32))


def test_the_environment_turns_the_advice_off(monkeypatch: pytest.MonkeyPatch) -> None:
    _pages._madvise.cache_clear()
    monkeypatch.setenv("CKPTZIP_HUGE_PAGES", "0")
    try:
        assert _pages._madvise() is None
        x = _pages.empty(_pages.MIN_BYTES, torch.uint8)  # an ordinary tensor, not advised
        assert x.numel() == _pages.MIN_BYTES
    finally:
        _pages._madvise.cache_clear()  # the next caller reads the environment again
