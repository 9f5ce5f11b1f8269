"""Recorded kernel calls, replayed: what ``restore_kernels.py`` and ``save_kernels.py`` share.

A call is recorded as (function, copies of its arguments, keyword arguments, values it passes
over); a replay runs it again on what it got, so one kind of call can be timed alone.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["Call", "copy_args", "least_cpu_row"]

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], int]


def copy_args(x: Any) -> Any:
    """A copy of an argument that the call or the caller may change afterwards: arrays,
    tensors, random generators (as the call got them, before it draws), tuples and lists of
    them; anything else as it is."""
    if isinstance(x, np.random.Generator):
        return copy.deepcopy(x)
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (tuple, list)):
        return type(x)(copy_args(v) for v in x)
    return x


def least_cpu_row(
    calls: list[Call], replay: Callable[..., str], repeat: int, unit: str
) -> dict[str, Any]:
    """The table row of one kind of call: how many, the values they pass over, the least
    process CPU seconds of ``repeat`` replays, nanoseconds per ``unit`` and the first 16
    hex digits of ``replay(calls, digest=True)``."""
    values = sum(c[3] for c in calls)
    digest, best = replay(calls, digest=True), float("inf")
    for _ in range(repeat):
        t = time.process_time()
        replay(calls)
        best = min(best, time.process_time() - t)
    return {
        "calls": len(calls),
        f"{unit}s": values,
        "cpu s": best,
        f"ns/{unit}": 1e9 * best / max(values, 1),
        "sha256": digest[:16],
    }
