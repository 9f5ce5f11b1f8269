"""The encoding threads: a pool whose threads run torch ops without an OpenMP team each.

Tensors are encoded in parallel by Python threads (torch ops, NumPy and zstd release the
GIL). torch's CPU build parallelises each large op over its own OpenMP team as well, so
``k`` encoding threads would run ``k`` teams of one thread per core: on a machine with few
cores (and a training job next to it) the teams' fork/join and spin-waits cost more than the
work (measured: ``log_`` on a 16K-element block 0.6 ns/element with one OpenMP thread,
100-1000 ns with two on a loaded two-core machine). The pool's threads therefore set their
own OpenMP thread count to one; that count is per thread (an OpenMP ICV), so the caller's
threads and torch's global setting (``torch.get_num_threads()``) are left as they were.
Where the OpenMP runtime is not reachable (another backend, another platform), the threads
run torch's default and only lose that gain.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch

__all__ = ["default_threads", "encoding_pool", "map_on_encoding_threads"]

_T = TypeVar("_T")
_R = TypeVar("_R")


def default_threads() -> int:
    """One encoding thread per core, at most 8."""
    return min(os.cpu_count() or 1, 8)


@functools.cache
def _omp_set_num_threads() -> Callable[[int], None] | None:
    """``omp_set_num_threads`` of the OpenMP runtime torch loaded, if any."""
    try:
        return ctypes.CDLL(None).omp_set_num_threads
    except (OSError, AttributeError, TypeError):  # no such symbol, or no global namespace
        return None


def _one_openmp_thread() -> None:
    """Pool initializer: this thread's torch ops run inline, without an OpenMP team."""
    setter = _omp_set_num_threads()
    if setter is None:
        return
    # torch sets a thread's OpenMP count from its global setting on the thread's first
    # parallel op; do that first so it cannot undo the setting below
    torch.get_num_threads()
    setter(1)


def encoding_pool(workers: int, name: str = "ckptzip-encode") -> ThreadPoolExecutor:
    """A pool of ``workers`` threads whose torch ops each run on one core."""
    return ThreadPoolExecutor(workers, thread_name_prefix=name, initializer=_one_openmp_thread)


def map_on_encoding_threads(
    fn: Callable[[_T], _R], items: Iterable[_T], workers: int | None = None
) -> list[_R]:
    """``[fn(x) for x in items]``, computed by a pool of ``workers`` encoding threads (default
    one per core, at most 8), in order.

    Even one item goes to a pool thread: there its torch ops run without an OpenMP team, which
    on a loaded machine is what costs most (the search's trial quantizations, run in the
    caller's thread on a loaded 2-core machine: 3x the CPU time and 3x the wall time of one
    pool thread, ``benchmarks/throughput.py``).
    """
    todo = list(items)
    if not todo:
        return []
    n = min(default_threads() if workers is None else workers, len(todo))
    with encoding_pool(n, "ckptzip-search") as pool:
        return list(pool.map(fn, todo))
