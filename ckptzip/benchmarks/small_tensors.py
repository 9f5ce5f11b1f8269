"""Benchmark: from what size on does quantizing an optimizer moment pay for its overhead?

A quantized tensor carries a fixed cost an exact one does not: its codebook, its entropy
coder's count table, a longer manifest record. Below some size that cost outweighs what the
levels save. This measures it on Adam moments (not on synthetic noise): for each size ``n``,
``K`` parameters of ``n`` elements are trained with AdamW for a few steps on a noisy quadratic
(gradients with a signal and noise, as in training), then their optimizer state is written

* ``exact``: every tensor exact (what ckptzip did below ``min_numel``);
* ``quant``: the moments quantized by :class:`ckptzip.MomentPolicy`'s default levels
  (first moments 8 levels with exact zeros kept, second moments 16 log-domain levels);
* ``quant delta``: the same a few steps later, delta-coded against the ``quant`` file.

Bytes per tensor are ``(file bytes - bytes of the same file with no tensors of that size) / K``
for each moment kind, so the container's per-file cost is not counted and its per-tensor cost
(manifest record, chunk framing) is.

Second table: the small *weights* (fewer than ``min_numel`` elements: biases, norms) of the
fault-tolerant benchmark's models after ``--steps`` steps, all in one file: exact as ckptzip
stores them (the file, and the compressed payloads alone, without manifest and framing), the
byte planes of all of them concatenated in one zstd frame each (the
cross-tensor lossless alternative), and quantized with 256, 64 and 16 levels (protect 1 %),
with the largest relative error.

Run ``python benchmarks/small_tensors.py``; prints the tables and writes
``benchmarks/results/small_tensors.json``. Deterministic (one seed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _report import RESULTS, print_table, write_json

import ckptzip
from ckptzip import entropy
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.plan import MomentPolicy

SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
MODELS = ("digits", "gru", "lm")


def _train(n: int, k: int, steps: int, seed: int) -> tuple[list[torch.nn.Parameter], Any]:
    """``k`` parameters of ``n`` elements after ``steps`` AdamW steps on a noisy quadratic."""
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen) * 0.1) for _ in range(k)]
    targets = [torch.randn(n, generator=gen) * 0.1 for _ in range(k)]
    opt = torch.optim.AdamW(params, lr=1e-3)
    for _ in range(steps):
        _step(params, targets, opt, gen)
    return params, (targets, opt, gen)


def _step(
    params: list[torch.nn.Parameter], targets: list[torch.Tensor], opt: Any, gen: Any
) -> None:
    for p, t in zip(params, targets, strict=True):
        p.grad = (p.detach() - t) + 0.05 * torch.randn(p.shape, generator=gen)
    opt.step()


def _only(state: dict[str, Any], key: str) -> dict[str, Any]:
    """The optimizer state dict with only the moment ``key`` kept (step counters cost the same
    either way)."""
    return {
        "state": {i: {k: v for k, v in s.items() if k == key} for i, s in state["state"].items()},
        "param_groups": state["param_groups"],
    }


def _size(obj: Any, path: Path, config: CompressionConfig, parent: Path | None = None) -> int:
    report = ckptzip.save(
        obj, path, config=config, parent=None if parent is None else str(parent), overwrite=True
    )
    return report.bytes_out


def measure(n: int, k: int, steps: int, seed: int, tmp: Path) -> dict[str, Any]:
    """Bytes per tensor of each moment kind, exact, quantized in full and delta-coded."""
    params, (targets, opt, gen) = _train(n, k, steps, seed)
    policy = MomentPolicy()
    exact = CompressionConfig(exact=("*",))
    quant = CompressionConfig(
        min_numel=1,
        overrides=(
            ("*/exp_avg", policy.first(QuantConfig()) or QuantConfig()),
            ("*/exp_avg_sq", policy.second()),
        ),
    )
    row: dict[str, Any] = {"numel": n, "tensors": k}
    before = opt.state_dict()
    empty = {"state": {}, "param_groups": before["param_groups"]}
    base = _size(empty, tmp / "empty.ckz", exact)
    for _ in range(5):
        _step(params, targets, opt, gen)
    after = opt.state_dict()
    for key in ("exp_avg", "exp_avg_sq"):
        raw = n * 4
        e = (_size(_only(before, key), tmp / "e.ckz", exact) - base) / k
        q = (_size(_only(before, key), tmp / "q.ckz", quant) - base) / k
        d = (_size(_only(after, key), tmp / "d.ckz", quant, tmp / "q.ckz") - base) / k
        row[f"{key} exact"] = e
        row[f"{key} quant"] = q
        row[f"{key} delta"] = d
        row[f"{key} gain"] = e / q
        row[f"{key} delta gain"] = e / d
        row[f"{key} raw"] = raw
    return row


def small_weights(name: str, steps: int, seed: int, tmp: Path) -> dict[str, Any]:
    """Bytes of one model's small weights: exact, one shared frame per byte plane, quantized."""
    w = _workloads.make(name, seed)
    for step in range(steps):
        w.train_step(step)
    floor = CompressionConfig().min_numel
    small = {
        k: v.detach().clone()
        for k, v in w.model.state_dict().items()
        if v.is_floating_point() and 0 < v.numel() < floor
    }
    exact = CompressionConfig(exact=("*",))
    row: dict[str, Any] = {
        "model": name,
        "tensors": len(small),
        "elements": sum(v.numel() for v in small.values()),
        "raw": sum(v.numel() * v.element_size() for v in small.values()),
        "exact": _size(small, tmp / "w.ckz", exact) - _size({}, tmp / "0.ckz", exact),
    }
    # float32 weights in these models: itemsize 4, one frame per byte plane over all tensors
    raw = np.frombuffer(b"".join(tensor_to_bytes(v) for v in small.values()), np.uint8)
    planes = raw.reshape(-1, 4).T
    zc = zstandard.ZstdCompressor(level=exact.zstd_level)
    row["exact payload"] = sum(
        len(entropy.encode(tensor_to_bytes(v), exact.zstd_level, itemsize=4)[0])
        for v in small.values()
    )
    row["shared planes"] = sum(len(zc.compress(np.ascontiguousarray(p).tobytes())) for p in planes)
    for bins in (256, 64, 16):
        cfg = CompressionConfig(min_numel=1, quant=QuantConfig(bins=bins, protect=0.01))
        report = ckptzip.save(small, tmp / "q.ckz", config=cfg, overwrite=True)
        row[f"b{bins}"] = report.bytes_out - _size({}, tmp / "0.ckz", exact)
        row[f"b{bins} err"] = max(e.rel_error or 0.0 for e in report.entries)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tensors", type=int, default=16, help="tensors per size (K)")
    ap.add_argument("--steps", type=int, default=30, help="AdamW steps before the first save")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "small_tensors.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        rows = [measure(n, args.tensors, args.steps, args.seed, Path(d)) for n in SIZES]
    cols = [("numel", "numel", "d")]
    for key in ("exp_avg", "exp_avg_sq"):
        cols += [
            (f"{key} exact", f"{key} exact B", ".0f"),
            (f"{key} quant", "quant B", ".0f"),
            (f"{key} delta", "delta B", ".0f"),
            (f"{key} gain", "gain", ".2f"),
            (f"{key} delta gain", "delta gain", ".2f"),
        ]
    print_table("bytes per tensor (exact vs MomentPolicy levels)", rows, cols)
    with tempfile.TemporaryDirectory() as d:
        weights = [small_weights(m, args.steps, args.seed, Path(d)) for m in MODELS]
    wcols = [("model", "model", "s"), ("tensors", "tensors", "d"), ("raw", "raw B", "d")]
    wcols += [("exact", "exact B", "d"), ("exact payload", "payload B", "d")]
    wcols += [("shared planes", "shared planes B", "d")]
    for bins in (256, 64, 16):
        wcols += [(f"b{bins}", f"{bins} levels B", "d"), (f"b{bins} err", "max rel err", ".4f")]
    print_table("small weights of the fault-tolerant models (one file each)", weights, wcols)
    write_json(
        Path(args.out),
        {
            "command": " ".join(["python", *sys.argv]),
            "tensors": args.tensors,
            "rows": rows,
            "small_weights": weights,
        },
    )


if __name__ == "__main__":
    main()
