"""Benchmark: the ANS coder alone, one stream against lanes, in nanoseconds per symbol.

A stream of ``--numel`` symbols from a 16-symbol bell-shaped distribution (about 3.6 bits a
symbol, like the 16-level indices of a weight tensor), one context, coded by the active
kernels (``ckptzip.kernels``): as one stream (the ``"ans"`` back end) and in blocks of
:data:`ckptzip.entropy.ANS_BLOCK` split into 1, 2, 4 (what ckptzip writes) or 8 lanes
(``"ans-lanes"``): encoding, decoding to symbols, and decoding straight into an fp32 tensor
(each symbol's level written as it leaves the coder), then the 4-lane decode on 1 and 2
threads. Each figure is the best of ``--repeat`` calls, by the process's CPU time (a core's
work, whatever share of it a loaded machine gives) and, for the threads, by wall time.

``python benchmarks/ans_coder.py``; prints a table and writes
``benchmarks/results/ans_coder.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, print_table, write_json

from ckptzip import entropy, kernels


def best(fn: Callable[[], Any], repeat: int, clock: Callable[[], float]) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = clock()
        fn()
        out = min(out, clock() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--numel", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path, default=RESULTS / "ans_coder.json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    p = np.exp(-0.5 * ((np.arange(16) - 7.5) / 3) ** 2)
    sym = rng.choice(16, size=args.numel, p=p / p.sum()).astype(np.uint8)
    n, block = sym.size, entropy.ANS_BLOCK
    bounds = np.array([0, n], np.int64)
    counts = kernels.ans_counts(sym, bounds, 16)
    table, out = torch.randn(16), torch.empty(n)
    cpu, r = time.process_time, args.repeat
    _, words = kernels.ans_encode(sym, bounds, 16)
    rows = [
        {
            "layout": "one stream",
            "encode": best(lambda: kernels.ans_encode(sym, bounds, 16), r, cpu),
            "decode": best(lambda: kernels.ans_decode(words, bounds, counts, n), r, cpu),
            "into": None,
            "bits": 32 * words.size / n,
        }
    ]
    for lanes in (1, 2, 4, 8):
        lengths, w = kernels.ans_lanes_encode(sym, bounds, counts, block, lanes)
        args_ = (w, lengths, bounds, counts, n, block, lanes)
        rows.append(
            {
                "layout": f"{lanes} lane{'s' * (lanes > 1)}",
                "encode": best(
                    lambda lanes=lanes: kernels.ans_lanes_encode(sym, bounds, counts, block, lanes),
                    r,
                    cpu,
                ),
                "decode": best(lambda a=args_: kernels.ans_lanes_decode(*a), r, cpu),
                "into": best(
                    lambda a=args_: kernels.ans_lanes_decode(*a, table=table, out=out), r, cpu
                ),
                "bits": 32 * (w.size + lengths.size) / n,
            }
        )
        if lanes == 4:
            four = args_
    for row in rows:
        for key in ("encode", "decode", "into"):
            if row[key] is not None:
                row[key] = 1e9 * row[key] / n
    wall = time.perf_counter
    threads = {
        t: best(
            lambda t=t: kernels.ans_lanes_decode(*four, table=table, out=out, threads=t), r, wall
        )
        for t in (1, 2)
    }
    print_table(
        f"ANS on {n} symbols ({kernels.IMPLEMENTATION} kernels), ns per symbol of CPU time",
        rows,
        [
            ("layout", "layout", ""),
            ("encode", "encode", ".2f"),
            ("decode", "decode", ".2f"),
            ("into", "decode into fp32", ".2f"),
            ("bits", "bits/symbol", ".4f"),
        ],
    )
    print(
        f"4 lanes into fp32, wall: {n / threads[1] / 1e6:.0f} Msymbols/s on 1 thread, "
        f"{n / threads[2] / 1e6:.0f} on 2 ({threads[1] / threads[2]:.2f}x)"
    )
    write_json(
        args.json,
        {
            "numel": n,
            "kernels": kernels.IMPLEMENTATION,
            "rows": rows,
            "4 lanes into fp32, wall seconds by threads": threads,
        },
    )


if __name__ == "__main__":
    main()
