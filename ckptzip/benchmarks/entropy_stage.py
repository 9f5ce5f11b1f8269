"""Benchmark: the entropy stage of bin indices and their deltas against their entropy bounds.

For ``gru`` and ``lm`` (``_workloads``) this trains a few checkpoints apart, quantizes every
weight (16 bins, 20 % pruned) and Adam first moment (8 bins) the way the ``quant`` codec
would, and codes each tensor's indices and, against the previous checkpoint, its rearranged
bin differences with every back end: packed indices + zstd (the ``quant`` codec's layout
before ANS), ANS (order 0), run-length + LZMA (the delta codec's back end before ANS), ANS
with one context per parent bin (what the delta codec now writes when it is smaller), next to
the order-0 entropy and the entropy given the parent's bin. Sizes include every count table.

Run ``python benchmarks/entropy_stage.py`` (~2 min on one core); writes
``benchmarks/results/entropy_stage.json``. Sizes are deterministic for the seed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _measure import conditional_entropy_bits
from _report import RESULTS, print_table, write_json

from ckptzip import entropy
from ckptzip.bindiff import cyclic_difference, rearrangement
from ckptzip.codecs.quantized import encode_indices
from ckptzip.config import QuantConfig
from ckptzip.entropy import encode_symbols, order0_entropy_bits
from ckptzip.packing import bits_for, pack_indices
from ckptzip.quantize import quantize

PLAN = {"gru": (200, 20), "lm": (120, 20)}  # steps, checkpoint every
CONFIGS = {"weights": QuantConfig(bins=16, prune=0.2), "first moments": QuantConfig(bins=8)}


def _size(symbols: np.ndarray, method: str, segments: list[int] | None = None) -> int:
    return sum(len(c) for c in encode_symbols(symbols, method, 9, segments=segments)[0])


def measure(name: str) -> dict[str, dict[str, float]]:
    steps, every = PLAN[name]
    w = _workloads.make(name, 0)
    totals: dict[str, dict[str, float]] = {}
    previous: dict[str, Any] = {}
    for _, state in _workloads.train(w, steps, every=every):
        tensors = {f"w:{k}": t for k, t in state["model"].items()}
        tensors |= {f"m:{i}": s["exp_avg"] for i, s in state["optimizer"]["state"].items()}
        current = {}
        for key, t in tensors.items():
            if not t.is_floating_point() or t.numel() < 4096:
                continue
            kind = "weights" if key.startswith("w:") else "first moments"
            q = quantize(t, CONFIGS[kind])
            current[key] = q
            idx = q.indices.reshape(-1)
            row = totals.setdefault(f"{kind}, full", {})
            packed = encode_indices(idx, len(q.levels), 3)
            row["chosen (quant codec)"] = row.get("chosen (quant codec)", 0) + len(packed[0])
            bits = bits_for(len(q.levels))
            for label, size in (
                ("order-0 entropy", order0_entropy_bits(idx) / 8),
                ("packed+zstd (before ANS)", len(entropy.encode(pack_indices(idx, bits))[0])),
                ("ans", _size(idx, "ans")),
            ):
                row[label] = row.get(label, 0) + size
            p = previous.get(key)
            if p is None:
                continue
            prev = p.indices.reshape(-1)
            bins = max(len(q.levels), len(p.levels))
            diff = cyclic_difference(prev, idx, bins)
            sym = diff[rearrangement(prev)]
            groups = np.bincount(prev, minlength=bins).tolist()
            row = totals.setdefault(f"{kind}, delta", {})
            for label, size in (
                ("order-0 entropy", order0_entropy_bits(sym) / 8),
                ("entropy given parent bin", conditional_entropy_bits(diff, prev) / 8),
                ("rle+lzma", _size(sym, "rle+lzma")),
                ("ans", _size(sym, "ans")),
                ("ans, context per parent bin", _size(sym, "ans", groups)),
            ):
                row[label] = row.get(label, 0) + size
            best = min(_size(sym, "rle+lzma"), _size(sym, "ans", groups))
            row["chosen (delta codec)"] = row.get("chosen (delta codec)", 0) + best
        previous = current
    return totals


def main() -> None:
    torch.set_num_threads(1)
    out: dict[str, Any] = {}
    for name in PLAN:
        out[name] = measure(name)
        for stream, row in out[name].items():
            ref = row.get("entropy given parent bin", row["order-0 entropy"])
            print_table(
                f"{name} {stream}",
                [{"stage": k, "kib": v / 1024, "bound": v / ref} for k, v in row.items()],
                [("stage", "stage", ""), ("kib", "KiB", ".1f"), ("bound", "x the bound", ".3f")],
            )
    write_json(RESULTS / "entropy_stage.json", {"plan": PLAN, "results": out})


if __name__ == "__main__":
    main()
