"""The encoding threads and the private-API helpers they lean on."""

from __future__ import annotations

import io
import threading

import pytest
import torch

import ckptzip._compat
from ckptzip._compat import torch_save_size
from ckptzip._parallel import _omp_set_num_threads, encoding_pool


def test_encoding_threads_run_torch_on_one_core_and_leave_the_caller_alone() -> None:
    before = torch.get_num_threads()
    with encoding_pool(2) as pool:
        inside = set(pool.map(lambda _: torch.get_num_threads(), range(8)))
    assert torch.get_num_threads() == before
    if _omp_set_num_threads() is not None:
        assert inside == {1}
    # a thread the pool does not own keeps torch's count
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    t.start()
    t.join()
    assert seen == [before] or before == 1


def _objects() -> list[object]:
    return [
        {"w": torch.randn(1000), "meta": [1, 2.5, "x", None], "view": torch.arange(10)[2:5]},
        torch.zeros(0),
        {"bf16": (torch.ones(3, dtype=torch.bfloat16),), "big": torch.randn(300_000)},
    ]


@pytest.mark.parametrize("private", [True, False])
def test_torch_save_size_is_what_torch_save_writes(
    private: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not private:  # the public fallback, as on a torch without the private route
        monkeypatch.setattr(ckptzip._compat, "_SAVE_PARAMETERS", ["gone"])
    for obj in _objects():
        buf = io.BytesIO()
        torch.save(obj, buf)
        assert torch_save_size(obj) == len(buf.getvalue())


def test_torch_save_size_raises_what_pickling_raises() -> None:
    with pytest.raises(Exception, match="pickle"):
        torch_save_size({"lock": threading.Lock()})
