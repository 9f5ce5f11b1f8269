"""Benchmark: the save time that quantizing once saves after a configuration search.

For each small CPU workload of ``_workloads`` (trained ``--steps`` steps with Adam), it runs
:func:`ckptzip.search.search` (with ``eval_fn`` and the optimizer, as
:class:`~ckptzip.CheckpointManager` does), then times :func:`ckptzip.save` of the same
snapshot with the same searched config two ways: given the search's accepted tensors
(``prequantized=result.prequantized``: the searched weights are stored as evaluated) and
without them (every weight quantized again, as before the plan). It checks that both files
decode to the same tensors, so the saving is pure overhead removed. Optimizer moments are
quantized by the save in both cases (the search does not evaluate them).

Times are the best of ``--repeat`` saves on one thread (``torch.set_num_threads(1)``).
``python benchmarks/quantize_once.py`` (mlp, cnn, lm) or ``--quick`` (mlp only); prints a
table and writes ``benchmarks/results/quantize_once.json`` (``--json``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _report import RESULTS, best_of, print_table, write_json

import ckptzip
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.search import save_scores, search
from ckptzip.structure import flatten


def measure(name: str, steps: int, repeat: int, d: Path) -> dict[str, Any]:
    work = _workloads.make(name, seed=0)
    for step in range(steps):
        work.train_step(step)
    result, t_search = best_of(
        lambda: search(work.model, eval_fn=work.eval_fn, optimizer=work.optimizer), 1
    )
    state = work.state()
    scores = save_scores(work.model, result, optimizer=work.optimizer)

    def save(path: Path, pre: Any) -> ckptzip.Report:
        return ckptzip.save(
            state,
            path,
            config=result.config,
            scores=scores,
            overwrite=True,
            prequantized=pre,
        )

    once, t_once = best_of(lambda: save(d / "once.ckz", result.prequantized), repeat)
    twice, t_twice = best_of(lambda: save(d / "twice.ckz", None), repeat)
    a = flatten(ckptzip.load(d / "once.ckz"))[1]
    b = flatten(ckptzip.load(d / "twice.ckz"))[1]
    same = [p for p, _ in a] == [p for p, _ in b] and all(
        tensor_to_bytes(x) == tensor_to_bytes(y) for (_, x), (_, y) in zip(a, b, strict=True)
    )
    searched_mb = (
        sum(p.quantized.numel * p.quantized.dtype.itemsize for p in result.prequantized.values())
        / 1e6
    )
    return {
        "workload": f"{name} ({steps} steps)",
        "tensor_mb": once.tensor_nbytes / 1e6,
        "searched_mb": searched_mb,
        "search_s": t_search,
        "trials": result.trials,
        "save_requantize_s": t_twice,
        "save_once_s": t_once,
        "saved_s": t_twice - t_once,
        "saved_fraction": (t_twice - t_once) / t_twice,
        "ratio": once.ratio,
        "same_tensors": same,
        "same_bytes": once.bytes_out == twice.bytes_out,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="mlp only, fewer steps")
    ap.add_argument("--repeat", type=int, default=3, help="saves per timing (best is kept)")
    ap.add_argument("--json", type=Path, default=RESULTS / "quantize_once.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    names = ["mlp"] if args.quick else ["mlp", "cnn", "lm"]
    steps = 20 if args.quick else 60
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure(n, steps, args.repeat, Path(tmp)) for n in names]
    print_table(
        "save after a search: quantizing again vs storing the accepted tensors",
        rows,
        [
            ("workload", "workload", "s"),
            ("tensor_mb", "MB", ".2f"),
            ("searched_mb", "searched MB", ".2f"),
            ("search_s", "search s", ".2f"),
            ("save_requantize_s", "save (again) s", ".3f"),
            ("save_once_s", "save (once) s", ".3f"),
            ("saved_fraction", "saved", ".0%"),
            ("same_tensors", "same tensors", ""),
        ],
    )
    out = {"benchmark": "quantize_once", "quick": args.quick, "repeat": args.repeat, "rows": rows}
    write_json(args.json, out)
    return out


if __name__ == "__main__":
    main()
