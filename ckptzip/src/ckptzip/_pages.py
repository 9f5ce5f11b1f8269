"""Output tensors of a load, backed by huge pages where the platform offers them.

A restored tensor is written once, front to back, into fresh memory: with 4 KiB pages every
page is a fault the kernel serves (map, zero) on first touch, which can cost more than the
decoding that fills it (writing 88 MB into one new tensor: 36 ms of CPU on 4 KiB pages, 8.7 ms
on 2 MiB ones, Linux with transparent huge pages in ``madvise`` mode, the common default).
Where the allocator hands back memory a process freed and touched before (a loop of loads),
there is less to gain: ``ckptzip.load`` of the 88 MB ``--quick`` keyframe of
``benchmarks/throughput.py`` on one thread, best of 12 interleaved, took 84.4 ms of CPU with
this and 87.9 ms without.
:func:`empty` asks for huge pages (``madvise(MADV_HUGEPAGE)``) over the 2 MiB-aligned part of
a large tensor's memory before anything touches it: what ``torch``'s own
``THP_MEM_ALLOC_ENABLE=1`` does for every allocation, here only for a load's outputs. It
changes no value, only how the memory is mapped; where the call is unavailable (not Linux,
no such advice) or refused, the tensor is an ordinary one. ``CKPTZIP_HUGE_PAGES=0`` in the
environment (read once, at the first large load) turns the advice off: on a host whose memory
is fragmented, the kernel may compact memory to find huge pages, a stall the process would
rather not take.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import sys
from collections.abc import Callable

import numpy as np
import torch

__all__ = ["HUGE_PAGE", "MIN_BYTES", "copy", "empty"]

HUGE_PAGE = 1 << 21
"""The transparent huge page size advised over (2 MiB on x86-64 and arm64 with 4 KiB base
pages); only whole, aligned huge pages inside a tensor's memory are advised."""

MIN_BYTES = 2 * HUGE_PAGE
"""Tensors below this are left alone: they hold at most one aligned huge page, and a small
allocation shares its pages with other objects."""


@functools.cache
def _madvise() -> Callable[[int, int], int] | None:
    if os.environ.get("CKPTZIP_HUGE_PAGES", "1") == "0":
        return None  # turned off by the user
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if not sys.platform.startswith("linux") or advice is None:
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return lambda start, length: int(fn(start, length, advice))


def empty(n: int, dtype: torch.dtype) -> torch.Tensor:
    """``torch.empty(n, dtype=dtype)`` on the CPU, its memory advised to huge pages when it is
    at least :data:`MIN_BYTES` (see the module docstring).

    Examples
    --------
    >>> x = empty(3 << 20, torch.float32)
    >>> x.shape, x.dtype
    (torch.Size([3145728]), torch.float32)
    """
    out = torch.empty(n, dtype=dtype)
    nbytes = n * dtype.itemsize
    advise = _madvise() if nbytes >= MIN_BYTES else None
    if advise is not None:
        start = out.data_ptr()
        lo = -(-start // HUGE_PAGE) * HUGE_PAGE
        hi = (start + nbytes) // HUGE_PAGE * HUGE_PAGE
        if hi > lo:
            advise(lo, hi - lo)  # a refusal (EINVAL where THP is compiled out) changes nothing
    return out


_NUMPY_COPIES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def copy(x: torch.Tensor) -> torch.Tensor:
    """A copy of the CPU tensor ``x`` in new memory (:func:`empty`), copied on the calling
    thread by NumPy (as bytes): ``torch``'s ``copy_`` of a large tensor runs on an OpenMP
    team, whose waiting threads spin for a core; on a loaded two-core machine copying the
    --quick throughput chain's 19 weight tensors (30 MB) took 34 ms of CPU and 59 ms of wall
    time that way, 10-19 ms and 13-26 ms this way.

    Examples
    --------
    >>> x = torch.arange(6.0).reshape(2, 3)
    >>> y = copy(x)
    >>> torch.equal(x, y), y.data_ptr() != x.data_ptr()
    (True, True)
    """
    out = empty(x.numel(), x.dtype)
    src = x.detach().reshape(-1)
    if x.dtype in _NUMPY_COPIES and src.is_contiguous() and src.numel():
        np.copyto(out.view(torch.uint8).numpy(), src.view(torch.uint8).numpy())
    else:
        out.copy_(src)
    return out.reshape(x.shape)
