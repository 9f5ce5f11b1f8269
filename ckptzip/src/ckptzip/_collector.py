"""Python's cyclic garbage collector paused while a load runs.

A load makes many short-lived objects: each manifest's JSON tree (a dict per entry and per
codec record, lists, strings), thrown away once its entries are built, and per tensor and
link the small arrays, records and closures of decoding. None of them needs the cyclic
collector (they die by reference counting), but each one made counts toward its thresholds
(a freed one counts back), so with the collector on, a load sets off collections as it goes,
now and then a full one, which visits every object of the process: a process that has
imported torch holds hundreds of thousands. Measured (``benchmarks/restore_kernels.py
--phases 15``, fifteen chain-end restores, README): with the collector paused only while each
manifest was parsed, 185 young, 17 middle and 2 full collections, 22-26 ms a restore on
average (a full one about 120 ms); paused for the whole restore, 13 young and 2 middle ones,
6-7 ms; and with the load's own reference cycles broken (:func:`spent`), 0.2 ms of young
collections a restore. With it paused, what a load throws away is freed before anything is
collected, and only what it returns is left to count when the collector resumes.

The pause is process-wide (the collector has no other switch): other threads' cyclic garbage
waits for the load's end too. A caller that turned the collector off keeps it off; nested
pauses resume only at the outermost one's end.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from typing import Any, NoReturn

__all__ = ["collector_paused", "spent"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside (unless the caller had it off already)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def spent(*args: Any, **kw: Any) -> NoReturn:
    """What a recursive closure's name is rebound to once its work is done.

    A nested function that calls itself (or a sibling that calls it back) reaches itself
    through its closure's cell: a reference cycle, so it and everything it captured (file
    readers holding a file's bytes, manifests, tensors) outlive the call until the cyclic
    collector runs, which a load pauses. Rebinding the name breaks the cycle, and reference
    counting frees them as the call returns (``tests/test_collector.py``)."""
    raise AssertionError("a recursive closure was called after its work was done")
