"""Benchmark: the compiled passes of one ``ckptzip.save``, replayed alone on one thread.

The ``throughput.py --quick`` state (7.4M parameters + AdamW, 88 MB) is saved once at the
default config with ``threads=1`` while every call of the kernel layer's per-element passes
is recorded (the sketch scan, the members of the protect/prune buckets, the first moment's
fit sums, k-means, the fused assignment, stochastic rounding, the measured error, bit
packing, bin counts and the ``"ans-wide"`` encoder). Each kind of call is then replayed on one
thread, best of ``--repeat`` by the process's CPU time (the figure other processes on the
machine move least), in nanoseconds per value; the sha256 of their outputs says whether two
runs computed the same results (a run with ``CKPTZIP_NO_AVX512=1`` or ``CKPTZIP_NO_AVX2=1``
takes the other loops: the digests must not move, the times do).

``python benchmarks/save_kernels.py`` (under a minute); prints a table and writes
``benchmarks/results/save_kernels.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _replay import Call, copy_args, least_cpu_row
from _report import RESULTS, print_table, write_json
from throughput import Run

import ckptzip
from ckptzip import kernels

PASSES = (
    "key_scan",
    "members",
    "fit_sums",
    "kmeans",
    "assign_fused",
    "round_stochastic",
    "squared_error",
    "pack",
    "bin_counts",
    "ans_wide_encode",
)
"""The kernel layer's functions a default save calls, in the order a tensor meets them."""


def _size(args: tuple[Any, ...]) -> int:
    """The values a call passes over: its first argument's element count."""
    first = args[0]
    return int(first.numel() if isinstance(first, torch.Tensor) else np.asarray(first).size)


def record(state: dict[str, Any], path: Path) -> dict[str, list[Call]]:
    """Every call of :data:`PASSES` during ``ckptzip.save(state, path, threads=1)``:
    (function, copies of its arguments, values); the save itself runs as it would."""
    calls: dict[str, list[Call]] = {name: [] for name in PASSES}
    originals = {name: getattr(kernels, name) for name in PASSES}

    def spy(name: str) -> Callable[..., Any]:
        fn = originals[name]

        def call(*args: Any, **kw: Any) -> Any:
            if name == "ans_wide_encode":
                kw = {**kw, "threads": 1}
            calls[name].append((fn, copy_args(args), copy_args(kw), _size(args)))
            return fn(*args, **kw)

        return call

    for name in PASSES:
        setattr(kernels, name, spy(name))
    try:
        ckptzip.save(state, path, threads=1)
    finally:
        for name, fn in originals.items():
            setattr(kernels, name, fn)
    return calls


def _digest_into(h: Any, out: Any) -> None:
    if isinstance(out, torch.Tensor):
        h.update(out.contiguous().view(torch.uint8).numpy().tobytes())
    elif isinstance(out, np.ndarray):
        h.update(np.ascontiguousarray(out).tobytes())
    elif isinstance(out, (tuple, list)):
        for part in out:
            _digest_into(h, part)
    else:  # the passes' float sums: to 12 digits (the vector loops add in another order)
        h.update(f"{out:.12g}".encode() if isinstance(out, float) else repr(out).encode())


def _fresh(x: Any) -> Any:
    """A random generator as it was recorded (k-means draws from it: each replay must start
    from the recorded state); anything else as it is."""
    return copy.deepcopy(x) if isinstance(x, np.random.Generator) else x


def replay(calls: list[Call], digest: bool = False) -> str:
    """Run every call once; with ``digest``, a sha256 of what they returned."""
    h = hashlib.sha256()
    for fn, args, kw, _ in calls:
        out = fn(*(_fresh(a) for a in args), **{k: _fresh(v) for k, v in kw.items()})
        if digest:
            _digest_into(h, out)
    return h.hexdigest()


def measure(calls: dict[str, list[Call]], repeat: int) -> list[dict[str, Any]]:
    """One row per pass: calls, values, least CPU seconds over ``repeat`` replays."""
    return [
        {"pass": name, **least_cpu_row(these, replay, repeat, "value")}
        for name, these in calls.items()
        if these
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", type=Path, default=RESULTS / "save_kernels.json")
    args = ap.parse_args()
    run = Run(8192, 256, 4)
    for _ in range(3):
        run.step()
    with TemporaryDirectory() as tmp:
        calls = record(run.state(), Path(tmp) / "s.ckz")
    rows = measure(calls, args.repeat)
    total = sum(r["cpu s"] for r in rows)
    switches = {
        k: os.environ[k] for k in ("CKPTZIP_NO_AVX2", "CKPTZIP_NO_AVX512") if k in os.environ
    }
    print_table(
        f"the passes of one ckptzip.save of the --quick state, replayed on one thread "
        f"({kernels.IMPLEMENTATION}{', ' + str(switches) if switches else ''}); "
        f"all: {total:.4f} CPU s",
        rows,
        [
            ("pass", "pass", ""),
            ("calls", "calls", "d"),
            ("values", "values", "d"),
            ("cpu s", "cpu s", ".4f"),
            ("ns/value", "ns/value", ".2f"),
            ("sha256", "sha256", ""),
        ],
    )
    write_json(
        args.json,
        {"kernels": kernels.IMPLEMENTATION, "switches": switches, "cpu s": total, "rows": rows},
    )


if __name__ == "__main__":
    main()
