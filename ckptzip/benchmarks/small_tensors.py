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
(manifest record, chunk framing) is. Run ``python benchmarks/small_tensors.py``; prints a
table and writes ``benchmarks/results/small_tensors.json``. Deterministic (one seed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, print_table, write_json

import ckptzip
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.plan import MomentPolicy

SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


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
    exact = CompressionConfig(min_numel=1 << 40)
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
    write_json(
        Path(args.out),
        {"command": " ".join(["python", *sys.argv]), "tensors": args.tensors, "rows": rows},
    )


if __name__ == "__main__":
    main()
