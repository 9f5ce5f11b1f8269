"""Benchmark: error feedback along a delta chain, against today's independent quantization.

A prototype measurement, not a library feature: it decides whether storing each weight's
*change* against the quantized parent is worth building into the codecs.

Train a workload exactly (no restores), take its weights at every checkpoint step, and encode
the chain of checkpoints two ways, with the library's own quantizer and lossless coders:

* ``independent`` (what the manager does): every checkpoint quantized in full at ``--config``
  (bins, protect), a keyframe every ``--keyframe-every`` saves stored in full, the others as
  bin-index differences against the parent (``ckptzip.bindiff.encode_smallest``, the smaller
  of that and the full indices), plus levels and protected values;
* ``feedback`` (error feedback): a keyframe as above; every other checkpoint stores the
  residual ``r = w_k − ŵ_{k−1}`` against the parent's *reconstruction*, quantized
  (``--residual`` configurations ``BINSpPRUNE``: a pruned residual keeps the parent's value),
  and ``ŵ_k = ŵ_{k−1} + r̂``. The error of one checkpoint is the residual's quantization error;
  what it leaves is fed back into the next residual, so errors do not pile up along a chain.

Reported per scheme, over every compressed weight (numel >= 4096) and every non-keyframe
checkpoint: the weights' relative L2 error ``||ŵ_k − w_k|| / ||w_k||`` (median and max over
checkpoints) and the bits written per weight (indices + levels + protected entries; the
container's framing is left out, the same for both). Keyframes are the same for both schemes
and reported once.

Run ``python benchmarks/error_feedback.py --model lm`` (~3 minutes on a shared 2-core
machine). Writes ``benchmarks/results/error_feedback-<model>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads

from ckptzip.bindiff import encode_smallest
from ckptzip.codecs.quantized import encode_indices, encode_side
from ckptzip.config import QuantConfig
from ckptzip.quantize import dequantize, quantize

MIN_NUMEL = 4096
LEVEL = 3  # the lossless stage's zstd level, as the codecs'


def _side_bytes(q: Any) -> int:
    side = encode_side(q, LEVEL)
    return len(side.levels) + len(side.positions) + len(side.values)


def _full_bytes(q: Any) -> int:
    return len(encode_indices(q.indices, len(q.levels), LEVEL)[0]) + _side_bytes(q)


def _delta_bytes(prev: Any, q: Any) -> int:
    bins = max(len(prev.levels), len(q.levels))
    delta = encode_smallest(prev.indices, q.indices, bins).nbytes
    full = len(encode_indices(q.indices, len(q.levels), LEVEL)[0])
    return min(delta, full) + _side_bytes(q)


def _config(name: str, protect: float) -> QuantConfig:
    bins, prune = name.split("p")
    return QuantConfig(bins=int(bins), prune=float(prune) / 10, protect=protect)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="lm", choices=sorted(_workloads.WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--keyframe-every", type=int, default=10)
    ap.add_argument("--config", default="16p0", help="independent: BINSpPRUNE (prune/10)")
    ap.add_argument("--protect", type=float, default=0.005)
    ap.add_argument("--residual", default="16p0,8p0,4p0,4p5,4p8,2p9")
    ap.add_argument("--residual-protect", type=float, default=0.0005)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    w = _workloads.make(args.model, args.seed)
    names = [n for n, p in w.model.named_parameters() if p.numel() >= MIN_NUMEL]
    checkpoints: list[dict[str, torch.Tensor]] = []
    for step in range(args.steps):
        w.train_step(step)
        if (step + 1) % args.every == 0:
            sd = w.model.state_dict()
            checkpoints.append({n: sd[n].detach().clone() for n in names})
    numel = sum(checkpoints[0][n].numel() for n in names)
    keyframe = [i % args.keyframe_every == 0 for i in range(len(checkpoints))]

    def error(recon: dict[str, torch.Tensor], live: dict[str, torch.Tensor]) -> float:
        num = sum(float((recon[n].double() - live[n].double()).norm() ** 2) for n in names)
        return (num / sum(float(live[n].double().norm() ** 2) for n in names)) ** 0.5

    base = _config(args.config, args.protect)
    schemes: dict[str, dict[str, list[float]]] = {}
    # independent (today's codecs): every checkpoint quantized in full, bin-index deltas
    rows: dict[str, list[float]] = {"error": [], "bits": [], "key_error": [], "key_bits": []}
    prev: dict[str, Any] = {}
    for i, live in enumerate(checkpoints):
        qs = {n: quantize(live[n], base) for n in names}
        recon = {n: dequantize(q).reshape(live[n].shape) for n, q in qs.items()}
        if keyframe[i]:
            size = sum(_full_bytes(q) for q in qs.values())
        else:
            size = sum(_delta_bytes(prev[n], qs[n]) for n in names)
        prefix = "key_" if keyframe[i] else ""
        rows[prefix + "error"].append(error(recon, live))
        rows[prefix + "bits"].append(8 * size / numel)
        prev = qs
    schemes["independent " + args.config] = rows
    print(f"independent {args.config}: {_line(rows)}", flush=True)
    for name in args.residual.split(","):
        cfg = _config(name, args.residual_protect)
        rows = {"error": [], "bits": []}
        parent: dict[str, torch.Tensor] = {}
        for i, live in enumerate(checkpoints):
            if keyframe[i]:
                parent = {n: dequantize(quantize(live[n], base)).reshape(live[n].shape)
                          for n in names}  # fmt: skip
                continue
            size = 0
            for n in names:
                r = live[n] - parent[n]
                q = quantize(r, cfg)
                parent[n] = parent[n] + dequantize(q).reshape(r.shape)
                size += _full_bytes(q)
            rows["error"].append(error(parent, live))
            rows["bits"].append(8 * size / numel)
        schemes["feedback " + name] = rows
        print(f"feedback {name}: {_line(rows)}", flush=True)
    out = Path(args.out) if args.out else _report.RESULTS / f"error_feedback-{args.model}.json"
    _report.write_json(out, {"meta": vars(args), "numel": numel, "schemes": schemes})
    return 0


def _line(rows: dict[str, list[float]]) -> str:
    e, b = rows["error"], rows["bits"]
    text = (
        f"deltas: error median {statistics.median(e):.4f} max {max(e):.4f}, "
        f"bits/weight median {statistics.median(b):.3f} ({32 / statistics.median(b):.1f}x)"
    )
    if rows.get("key_error"):
        text += (
            f"; keyframes: error {statistics.median(rows['key_error']):.4f}, "
            f"bits/weight {statistics.median(rows['key_bits']):.3f}"
        )
    return text


if __name__ == "__main__":
    raise SystemExit(main())
