"""The one timing and reporting helper every benchmark uses.

* :func:`best_of`: the least disturbed wall time of a few calls (and the last result);
* :func:`torch_save_bytes` / :func:`torch_save_raw`: what ``torch.save`` writes for an object
  (the size is the numerator of every "ratio", as ``ckptzip.api.RATIO`` defines it);
* :func:`print_table`: rows of dicts as an aligned text table;
* :func:`write_json`: the results file under :data:`RESULTS`, with the machine it ran on;
  :func:`results_path`: where it goes.
"""

from __future__ import annotations

import io
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

__all__ = [
    "RESULTS",
    "best_of",
    "machine",
    "print_table",
    "results_path",
    "torch_save_bytes",
    "torch_save_raw",
    "write_json",
]

RESULTS = Path(__file__).resolve().parent / "results"
"""Where benchmarks write their JSON."""

T = TypeVar("T")


def best_of(fn: Callable[[], T], repeat: int) -> tuple[T, float]:
    """``fn()``'s result and its smallest wall time over ``repeat`` calls (the least disturbed
    by other load on a shared machine)."""
    if repeat < 1:
        raise ValueError(f"repeat={repeat!r} must be >= 1")
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def torch_save_raw(obj: Any) -> bytes:
    """What ``torch.save(obj)`` writes, in memory."""
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def torch_save_bytes(obj: Any) -> int:
    """Size of what ``torch.save(obj)`` writes."""
    return len(torch_save_raw(obj))


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
    }


def print_table(
    title: str, rows: Sequence[dict[str, Any]], cols: Sequence[tuple[str, str, str]]
) -> None:
    """Print ``rows`` as a table: ``cols`` are ``(key, header, format spec)``, e.g.
    ``("ratio", "ratio", ".2f")``; ``None`` prints as ``n/a``; the first column is left-aligned.
    """
    cells = [[h for _, h, _ in cols]]
    for r in rows:
        cells.append(
            [
                "n/a" if r.get(k) is None else format(r[k], "" if isinstance(r[k], str) else f)
                for k, _, f in cols
            ]
        )
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    print(f"\n{title}")
    for row in cells:
        padded = [c.rjust(w) for c, w in zip(row, widths, strict=True)]
        padded[0] = row[0].ljust(widths[0])
        print("  ".join(padded))


def results_path(out: str | None, name: str) -> Path:
    """Where a benchmark writes its JSON: ``out`` (its ``--out``) where given, else ``name``
    under :data:`RESULTS`."""
    return Path(out) if out else RESULTS / name


def write_json(path: Path, result: dict[str, Any]) -> None:
    """Write ``result`` (plus ``machine``) as indented JSON to ``path`` and say so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**result, "machine": machine()}, indent=1))
    print(f"\nwrote {path}")
