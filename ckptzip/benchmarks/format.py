"""Benchmark: the cost of ckptzip's file format around the quantizer.

On the final checkpoint (model + Adam state) of each small CPU workload of ``_workloads``, it
splits the time of :func:`ckptzip.save` and :func:`ckptzip.load` into the quantizer's share
(``quantize`` / ``dequantize`` of the same tensors, timed alone) and the rest: structure, the
codecs' packing and zstd, sha256 checksums, the manifest, the atomic write and the reads. It
also times the lossless path (every tensor exact), ``verify`` (checksums only) and
``verify(decode=True)``, reports how much of each file the manifest takes, and compares the
lossless stage's plain zstd with its byte-plane coding on Gaussian fp32/bf16/fp16 weights.

Speeds are MB/s of tensor bytes in memory (``numel × itemsize``), on one thread
(``torch.set_num_threads(1)``), best of ``--repeat`` runs. Run ``python benchmarks/format.py``
(mlp, cnn, lm, and one synthetic 8M-value tensor) or ``--quick`` (mlp only, fewer
steps, a 2M-value tensor); prints a table and writes JSON
(``--json``, default ``benchmarks/results/format.json``). Timings depend on the machine and
on whatever else runs on it.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _report import RESULTS, best_of, print_table, write_json

import ckptzip
from ckptzip import entropy
from ckptzip._types import QuantizedTensor
from ckptzip.api import read_manifest, read_quantized, verify
from ckptzip.codecs.exact import tensor_to_bytes
from ckptzip.config import CompressionConfig
from ckptzip.quantize import dequantize, quantize
from ckptzip.structure import flatten


def trained(name: str, steps: int) -> dict[str, Any]:
    work = _workloads.make(name, seed=0)
    for _, _state in _workloads.train(work, steps, every=steps):
        pass
    return work.state()


def synthetic(numel: int) -> dict[str, Any]:
    """One large weight-like tensor: the regime where per-file costs (fsync, manifest) vanish."""
    g = torch.Generator().manual_seed(0)
    return {"model": {"w": torch.randn(numel // 1024, 1024, generator=g) * 0.02}}


def measure(name: str, state: dict[str, Any], repeat: int, d: str) -> dict[str, Any]:
    config = CompressionConfig()
    _, leaves = flatten(state)
    mb = sum(t.numel() * t.element_size() for _, t in leaves) / 1e6
    path = os.path.join(d, "bench.ckz")

    def save() -> ckptzip.Report:
        return ckptzip.save(state, path, config=config, overwrite=True)

    report, t_save = best_of(save, repeat)
    lossy = {e.path: e.config for e in report.entries if e.config is not None}
    by_path = dict(leaves)
    _, t_quant = best_of(lambda: [quantize(by_path[p], c) for p, c in lossy.items()], repeat)
    _, t_load = best_of(lambda: ckptzip.load(path), repeat)
    table = read_quantized(path)
    qts = [q for q in table.values() if isinstance(q, QuantizedTensor)]
    _, t_deq = best_of(lambda: [dequantize(q) for q in qts], repeat)
    _, t_verify = best_of(lambda: verify(path), repeat)
    _, t_verify_dec = best_of(lambda: verify(path, decode=True), repeat)
    size = os.path.getsize(path)
    manifest = read_manifest(path)
    exact_path = os.path.join(d, "bench-exact.ckz")
    exact_cfg = CompressionConfig(exact=("*",))
    erep, t_esave = best_of(
        lambda: ckptzip.save(state, exact_path, config=exact_cfg, overwrite=True), repeat
    )
    _, t_eload = best_of(lambda: ckptzip.load(exact_path), repeat)
    return {
        "workload": name,
        "tensor_mb": mb,
        "tensors": len(leaves),
        "quantized_tensors": len(lossy),
        "ratio": report.ratio,
        "file_bytes": size,
        "manifest_bytes": size - manifest.data_bytes,
        "save_mb_s": mb / t_save,
        "save_quantize_share": t_quant / t_save,
        # timed apart, so under load the difference can vanish: reported as None then
        "save_format_mb_s": mb / (t_save - t_quant) if t_save > 1.05 * t_quant else None,
        "load_mb_s": mb / t_load,
        "load_dequantize_share": t_deq / t_load,
        "load_format_mb_s": mb / (t_load - t_deq) if t_load > 1.05 * t_deq else None,
        "verify_file_mb_s": size / 1e6 / t_verify,
        "verify_decode_mb_s": mb / t_verify_dec,
        "exact_ratio": erep.ratio,
        "exact_save_mb_s": mb / t_esave,
        "exact_load_mb_s": mb / t_eload,
    }


def lossless(numel: int, repeat: int) -> list[dict[str, Any]]:
    """The exact path's stage on Gaussian weights: plain zstd against byte planes."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(numel, generator=g) * 0.02
    rows = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        raw = tensor_to_bytes(base.to(dtype))
        mb = len(raw) / 1e6
        for mode, itemsize in (("zstd", 1), ("planes", base.to(dtype).element_size())):
            (payload, info), t_enc = best_of(
                lambda r=raw, i=itemsize: entropy.encode(r, 3, itemsize=i), repeat
            )
            _, t_dec = best_of(lambda p=payload, f=info: entropy.decode(p, f), repeat)
            rows.append(
                {
                    "dtype": str(dtype).removeprefix("torch."),
                    "stage": mode,
                    "ratio": len(raw) / len(payload),
                    "encode_mb_s": mb / t_enc,
                    "decode_mb_s": mb / t_dec,
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="mlp only, fewer steps, 2 repeats")
    ap.add_argument("--repeat", type=int, default=None, help="runs per timing (best is kept)")
    ap.add_argument("--json", type=Path, default=RESULTS / "format.json", help="output JSON")
    args = ap.parse_args()
    torch.set_num_threads(1)
    names = ["mlp"] if args.quick else ["mlp", "cnn", "lm"]
    steps = 20 if args.quick else 60
    repeat = args.repeat or (2 if args.quick else 3)
    big = (2 << 20) if args.quick else (8 << 20)
    with tempfile.TemporaryDirectory() as d:
        rows = [measure(f"{n} ({steps} steps)", trained(n, steps), repeat, d) for n in names]
        rows.append(measure(f"synthetic {big / 1e6:.1f}M", synthetic(big), repeat, d))
    print_table(
        "save and load, MB/s of tensor bytes (one thread)",
        rows,
        [
            ("workload", "workload", "s"),
            ("tensor_mb", "MB", ".1f"),
            ("ratio", "ratio", ".1f"),
            ("manifest_bytes", "manifest B", "d"),
            ("save_mb_s", "save", ".0f"),
            ("save_quantize_share", "quantize", ".0%"),
            ("save_format_mb_s", "save fmt", ".0f"),
            ("load_mb_s", "load", ".0f"),
            ("load_dequantize_share", "dequant", ".0%"),
            ("load_format_mb_s", "load fmt", ".0f"),
            ("verify_file_mb_s", "verify", ".0f"),
            ("exact_save_mb_s", "exact save", ".0f"),
            ("exact_load_mb_s", "exact load", ".0f"),
        ],
    )
    stage_rows = lossless(big, repeat)
    print_table(
        f"lossless stage on {big / 1e6:.1f}M Gaussian weights (the exact codec's path)",
        stage_rows,
        [
            ("dtype", "dtype", "s"),
            ("stage", "stage", "s"),
            ("ratio", "ratio", ".3f"),
            ("encode_mb_s", "encode MB/s", ".0f"),
            ("decode_mb_s", "decode MB/s", ".0f"),
        ],
    )
    result = {
        "benchmark": "format",
        "quick": args.quick,
        "repeat": repeat,
        "rows": rows,
        "lossless_stage": stage_rows,
    }
    write_json(args.json, result)


if __name__ == "__main__":
    main()
