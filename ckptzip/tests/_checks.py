"""Assertions and small helpers shared by the test modules."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from typing import Any

import torch

from ckptzip.codecs.exact import tensor_to_bytes


def assert_same(a: Any, b: Any) -> None:
    """``a`` and ``b`` are the same structure with bit-identical tensors (NaN payloads too)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
        assert tensor_to_bytes(a) == tensor_to_bytes(b)  # bit-exact, NaN payloads too
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b)
    else:
        assert type(a) is type(b) and a == b


@contextlib.contextmanager
def writer_lock_held(store: Any) -> Iterator[None]:
    """Run the block while another thread of this process holds ``store``'s writer lock
    (``store.writing()``, as a save in progress does): taken before the block starts,
    released when it ends (the thread gives it up after 30 s in any case)."""
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        with store.writing():
            held.set()
            release.wait(30)

    t = threading.Thread(target=writer)
    t.start()
    try:
        assert held.wait(30)
        yield
    finally:
        release.set()
        t.join()


def use_kernels(monkeypatch: Any, implementation: Any) -> None:
    """Run the pipeline on ``implementation`` (``ckptzip.kernels.reference`` or ``.fast``)
    for the rest of the test: the kernel names every stage looks up are rebound."""
    from ckptzip import kernels

    for name in kernels.__all__:
        if name not in ("IMPLEMENTATION", "fast", "reference"):
            monkeypatch.setattr(kernels, name, getattr(implementation, name))
