"""Benchmark: ckptzip's quantizer and file format against lossless and uniform-8-bit baselines.

Trains the small CPU workloads of ``_workloads`` in-process and, on the final checkpoint of
each, measures side by side

* ``torch.save``: the exact file (the reference for every ratio);
* ``zstd``: zstandard (level 3) of the ``torch.save`` bytes, the lossless floor;
* ``ckptzip bB pP``: real ``ckptzip.save`` / ``ckptzip.load`` files at several configs (Adam's
  ``exp_avg_sq`` in the log domain in the whole-checkpoint scope);
* ``uniform8``: the Check-N-Run style baseline: per-tensor min/max affine 8-bit codes + zstd
  (same exactness rules as ckptzip: tensors under 4096 elements and non-float tensors raw);

for the weights only (``model`` state dict; the headline) and for the whole checkpoint
(model + optimizer). Per method: ratio (``torch.save`` bytes / bytes out), relative L2 error
per lossy tensor (median, max), and compress / decompress speed in MB/s of floating-point
input, on one thread (``torch.set_num_threads(1)``).

It also runs the codec alone on two large tensors (LM weights resampled, and Gaussian;
quantize + pack + zstd, and back), quantizes on the GPU when there is one (time, agreement
with the CPU), and sets
the approximate k-means (sketch, then weighted k-means on ≤ 4097 bucket centres) against
plain Lloyd k-means on the raw values (same k, k-means++ init, vectorised, capped
iterations) of a tensor of ``--lloyd-numel`` values (10M in full mode) drawn from the trained
LM's weights: time to find the levels and the MSE after nearest-level assignment.

Run ``python benchmarks/codec.py`` (full) or ``--quick``; prints tables and writes JSON
(``--json``, default ``benchmarks/results/codec.json``). Sizes and errors are deterministic;
timings depend on the machine and on whatever else runs on it.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _report import RESULTS, best_of, print_table, torch_save_raw, write_json

import ckptzip
from ckptzip.codecs.base import DecodeContext
from ckptzip.codecs.quantized import decode_quantized, encode_quantized
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.quantize import dequantize, fit_levels, quantize
from ckptzip.sketch import build_sketch

MB = 1e6
CONFIGS: list[tuple[int, float]] = [(64, 0.0), (32, 0.0), (16, 0.0), (8, 0.2), (4, 0.4)]
MIN_NUMEL = CompressionConfig().min_numel


# -- helpers -----------------------------------------------------------------------------------


def _leaves(obj: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for every tensor in a nested checkpoint, paths joined with "/"."""
    out: list[tuple[str, torch.Tensor]] = []
    if isinstance(obj, torch.Tensor):
        out.append((prefix, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(_leaves(v, f"{prefix}/{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.extend(_leaves(v, f"{prefix}/{i}" if prefix else str(i)))
    return out


def _lossy(x: torch.Tensor) -> bool:
    return x.is_floating_point() and x.dim() > 0 and x.numel() >= MIN_NUMEL


def _float_bytes(obj: Any) -> int:
    return sum(x.numel() * x.element_size() for _, x in _leaves(obj) if x.is_floating_point())


def _rel_error(x: torch.Tensor, y: torch.Tensor) -> float:
    xd, yd = x.double(), y.double()
    norm = float(xd.norm())
    return float((yd - xd).norm()) / norm if norm > 0 else 0.0


def _errors(original: Any, restored: Any) -> list[float]:
    """Relative L2 error of every lossy-eligible tensor (others are checked to be exact)."""
    back = dict(_leaves(restored))
    errs = []
    for path, x in _leaves(original):
        y = back[path]
        if _lossy(x):
            errs.append(_rel_error(x, y))
        elif not torch.equal(x, y):
            raise AssertionError(f"{path} should have come back exact")
    return errs


def _row(
    method: str,
    bytes_ref: int,
    bytes_out: int,
    errs: list[float],
    nbytes: int,
    tc: float,
    td: float,
) -> dict[str, Any]:
    return {
        "method": method,
        "bytes": bytes_out,
        "ratio": bytes_ref / bytes_out,
        "rel_err_median": statistics.median(errs) if errs else 0.0,
        "rel_err_max": max(errs) if errs else 0.0,
        "compress_MBps": nbytes / MB / tc,
        "decompress_MBps": nbytes / MB / td,
    }


# -- methods -----------------------------------------------------------------------------------


def _bench_torch_and_zstd(obj: Any, repeat: int) -> tuple[int, list[dict[str, Any]]]:
    nbytes = _float_bytes(obj)
    raw, t_save = best_of(lambda: torch_save_raw(obj), repeat)
    _, t_load = best_of(lambda: torch.load(io.BytesIO(raw), weights_only=True), repeat)
    cctx = zstandard.ZstdCompressor(level=3)
    z, t_z = best_of(lambda: cctx.compress(raw), repeat)
    dctx = zstandard.ZstdDecompressor()

    def unz() -> Any:
        return torch.load(io.BytesIO(dctx.decompress(z)), weights_only=True)

    _, t_unz = best_of(unz, repeat)
    rows = [
        _row("torch.save", len(raw), len(raw), [], nbytes, t_save, t_load),
        _row("zstd(torch.save)", len(raw), len(z), [], nbytes, t_save + t_z, t_unz),
    ]
    return len(raw), rows


def _bench_ckptzip(
    obj: Any, bins: int, prune: float, bytes_ref: int, tmp: Path, repeat: int
) -> dict[str, Any]:
    quant = QuantConfig(bins=bins, prune=prune)
    # Adam's second moment is positive with a huge dynamic range: quantize its logarithm.
    config = CompressionConfig(
        quant=quant,
        overrides=(("*exp_avg_sq", QuantConfig(bins=bins, prune=prune, log_domain=True)),),
    )
    path = tmp / f"b{bins}_p{prune}.ckz"

    def save() -> ckptzip.Report:
        return ckptzip.save(obj, path, config=config, overwrite=True)

    report, t_save = best_of(save, repeat)
    restored, t_load = best_of(lambda: ckptzip.load(path), repeat)
    size = path.stat().st_size
    assert size == report.bytes_out, (size, report.bytes_out)
    row = _row(
        f"ckptzip b{bins} p{prune:g}",
        bytes_ref,
        size,
        _errors(obj, restored),
        _float_bytes(obj),
        t_save,
        t_load,
    )
    row["quantized_tensors"] = sum(e.codec != "exact" for e in report.entries)
    row["exact_tensors"] = sum(e.codec == "exact" for e in report.entries)
    return row


def _uniform8_encode(obj: Any, cctx: zstandard.ZstdCompressor) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for path, x in _leaves(obj):
        if _lossy(x):
            xf = x.detach().float().reshape(-1)
            lo, hi = float(xf.min()), float(xf.max())
            scale = (hi - lo) / 255 if hi > lo else 1.0
            codes = torch.round((xf - lo) / scale).to(torch.uint8)
            out.append((path, (lo, scale, x.dtype, tuple(x.shape), cctx.compress(codes.numpy()))))
        else:
            out.append(
                (
                    path,
                    cctx.compress(x.detach().contiguous().view(-1).view(torch.uint8).numpy())
                    if x.numel()
                    else b"",
                )
            )
    return out


def _uniform8_decode(
    enc: list[tuple[str, Any]], like: dict[str, torch.Tensor], dctx: zstandard.ZstdDecompressor
) -> dict[str, torch.Tensor]:
    out = {}
    for path, item in enc:
        x = like[path]
        if isinstance(item, tuple):
            lo, scale, dtype, shape, blob = item
            codes = torch.frombuffer(bytearray(dctx.decompress(blob)), dtype=torch.uint8)
            out[path] = (codes.float() * scale + lo).to(dtype).reshape(shape)
        else:
            raw = (
                dctx.decompress(item, max_output_size=x.numel() * x.element_size()) if item else b""
            )
            out[path] = (
                torch.frombuffer(bytearray(raw), dtype=x.dtype).reshape(x.shape)
                if raw
                else x.clone()
            )
    return out


def _bench_uniform8(obj: Any, bytes_ref: int, repeat: int) -> dict[str, Any]:
    cctx, dctx = zstandard.ZstdCompressor(level=3), zstandard.ZstdDecompressor()
    enc, t_c = best_of(lambda: _uniform8_encode(obj, cctx), repeat)
    like = dict(_leaves(obj))
    dec, t_d = best_of(lambda: _uniform8_decode(enc, like, dctx), repeat)
    size = sum(len(i[4]) + 16 if isinstance(i, tuple) else len(i) for _, i in enc)
    # the structure (names, shapes) costs about what torch.save spends on it; count the
    # tensor payloads plus 16 bytes of (min, scale) per quantized tensor.
    errs = []
    for path, x in like.items():
        if _lossy(x):
            errs.append(_rel_error(x, dec[path]))
    return _row("uniform8+zstd", bytes_ref, size, errs, _float_bytes(obj), t_c, t_d)


# -- codec alone on one large tensor --------------------------------------------------------


def _bench_codec_tensor(x: torch.Tensor, repeat: int) -> list[dict[str, Any]]:
    rows = []
    nbytes = x.numel() * x.element_size()
    for bins, prune in CONFIGS:
        cfg = QuantConfig(bins=bins, prune=prune)
        q, t_q = best_of(lambda cfg=cfg: quantize(x, cfg), repeat)
        (meta, chunks), t_e = best_of(lambda q=q: encode_quantized(q, 3), repeat)
        # the pipeline's fields of the entry
        ctx = DecodeContext("x", tuple(x.shape), x.dtype, cfg, q.rel_error)
        q2, t_dq = best_of(
            lambda meta=meta, chunks=chunks, ctx=ctx: decode_quantized(meta, chunks, ctx), repeat
        )
        y, t_deq = best_of(lambda q2=q2: dequantize(q2), repeat)
        assert torch.equal(y, dequantize(q))
        rows.append(
            {
                "config": f"b{bins} p{prune:g}",
                "numel": x.numel(),
                "bytes": sum(len(c) for c in chunks),
                "ratio_vs_fp32": nbytes / sum(len(c) for c in chunks),
                "rel_error": q.rel_error,
                "quantize_MBps": nbytes / MB / t_q,
                "compress_MBps": nbytes / MB / (t_q + t_e),
                "decompress_MBps": nbytes / MB / (t_dq + t_deq),
                "dequantize_MBps": nbytes / MB / t_deq,
            }
        )
    return rows


def _bench_cuda(x: torch.Tensor, repeat: int) -> dict[str, Any]:
    """Quantize on the GPU: time, and agreement with the CPU result on the same values."""
    cfg = QuantConfig(bins=16, prune=0.2)
    xc = x.cuda()
    quantize(xc, cfg)  # warm-up: kernels, allocator

    def run() -> Any:
        q = quantize(xc, cfg)
        torch.cuda.synchronize()
        return q

    qg, t_q = best_of(run, repeat)
    qc = quantize(x, cfg)

    def back() -> torch.Tensor:
        y = dequantize(qg, device="cuda")
        torch.cuda.synchronize()
        return y

    yg, t_d = best_of(back, repeat)
    return {
        "device": torch.cuda.get_device_name(),
        "numel": x.numel(),
        "quantize_seconds": t_q,
        "dequantize_seconds": t_d,
        "levels_max_rel_diff_vs_cpu": float(
            np.max(np.abs(qg.levels - qc.levels)) / np.max(np.abs(qc.levels))
        ),
        "index_mismatch_fraction_vs_cpu": float(np.mean(qg.indices != qc.indices)),
        "rel_error_gpu": qg.rel_error,
        "rel_error_cpu": qc.rel_error,
        "dequantize_matches_cpu": bool(torch.equal(yg.cpu(), dequantize(qg))),
    }


# -- approximate k-means against Lloyd ----------------------------------------------------------


def lloyd_kmeans(
    x: torch.Tensor, k: int, *, max_iter: int, seed: int = 0
) -> tuple[np.ndarray, int]:
    """Plain k-means on the raw values: k-means++ init, then Lloyd, vectorised with torch."""
    v = x.reshape(-1).double()
    g = torch.Generator().manual_seed(seed)
    centres = [float(v[torch.randint(v.numel(), (1,), generator=g)])]
    d2 = (v - centres[0]) ** 2
    for _ in range(1, k):
        i = int(torch.multinomial(d2 / d2.sum(), 1, generator=g))  # exact D² sampling
        centres.append(float(v[i]))
        d2 = torch.minimum(d2, (v - centres[-1]) ** 2)
    c = torch.tensor(sorted(centres), dtype=torch.float64)
    iterations = 0
    while iterations < max_iter:
        iterations += 1
        lab = torch.bucketize(v, (c[1:] + c[:-1]) / 2)
        cnt = torch.bincount(lab, minlength=k).double()
        tot = torch.bincount(lab, weights=v, minlength=k)
        new = torch.where(cnt > 0, tot / cnt.clamp_min(1), c).sort().values
        if torch.allclose(new, c, rtol=1e-9, atol=0.0):
            c = new
            break
        c = new
    return c.numpy(), iterations


def sketch_kmeans(x: torch.Tensor, k: int, *, sigma: float) -> np.ndarray:
    """The quantizer's level fit on its own: sketch, then weighted k-means on the buckets."""
    sk, _ = build_sketch(x)
    occupied = np.flatnonzero(sk.counts)
    centres = sk.centres()[occupied]
    cnt = sk.counts[occupied].astype(np.float64)
    mag = np.abs(centres)
    w = sigma * cnt / cnt.sum() + (1 - sigma) * mag / mag.sum()
    return fit_levels(centres, w, k)


def _mse(x: torch.Tensor, levels: np.ndarray) -> float:
    lv = torch.as_tensor(levels, dtype=torch.float64)
    idx = torch.bucketize(x.double(), (lv[1:] + lv[:-1]) / 2)
    return float(((lv[idx] - x.double()) ** 2).mean())


def _bench_kmeans(x: torch.Tensor, k: int, max_iter: int, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {"numel": x.numel(), "k": k, "lloyd_max_iter": max_iter}
    (lloyd, iters), t_lloyd = best_of(lambda: lloyd_kmeans(x, k, max_iter=max_iter), 1)
    out["lloyd"] = {"seconds": t_lloyd, "iterations": iters, "mse": _mse(x, lloyd)}
    for sigma in (1.0, 0.2):
        lv, t = best_of(lambda sigma=sigma: sketch_kmeans(x, k, sigma=sigma), repeat)
        mse = _mse(x, lv)
        out[f"sketch_sigma{sigma:g}"] = {
            "seconds": t,
            "mse": mse,
            "speedup_vs_lloyd": t_lloyd / t,
            "mse_vs_lloyd": mse / out["lloyd"]["mse"] - 1.0,
        }
    return out


# -- driver -------------------------------------------------------------------------------------


_COLS = [
    ("method", "method", "s"),
    ("bytes", "bytes", "d"),
    ("ratio", "ratio", ".2f"),
    ("rel_err_median", "err med", ".4f"),
    ("rel_err_max", "err max", ".4f"),
    ("compress_MBps", "comp MB/s", ".1f"),
    ("decompress_MBps", "dec MB/s", ".1f"),
]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few steps, a 2M-value k-means tensor")
    ap.add_argument("--json", type=Path, default=RESULTS / "codec.json", help="output JSON")
    ap.add_argument("--workloads", default="mlp,cnn,lm", help="comma-separated workload names")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default 250, 40)")
    ap.add_argument("--lloyd-numel", type=int, default=None, help="k-means tensor (10M, 2M)")
    ap.add_argument("--lloyd-iter", type=int, default=50, help="cap on Lloyd iterations")
    ap.add_argument("--repeat", type=int, default=None, help="timing repeats (best of; 3, 1)")
    args = ap.parse_args(argv)
    steps = args.steps or (40 if args.quick else 250)
    lloyd_numel = args.lloyd_numel or (2_000_000 if args.quick else 10_000_000)
    repeat = args.repeat or (1 if args.quick else 3)
    torch.set_num_threads(1)

    result: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "steps": steps,
        "note": "timings are wall-clock best-of-repeats on one thread; a shared machine makes "
        "them noisy. Ratios and errors are deterministic.",
        "workloads": {},
    }
    lm_weights: list[torch.Tensor] = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        for name in args.workloads.split(","):
            w = _workloads.make(name, seed=0)
            t0 = time.perf_counter()
            for s in range(steps):
                w.train_step(s)
            train_s = time.perf_counter() - t0
            state = _workloads._clone(w.state())
            if name == "lm":
                lm_weights = [x for _, x in _leaves(state["model"]) if _lossy(x)]
            entry: dict[str, Any] = {"train_seconds": train_s, "eval_loss": w.eval_fn(w.model)}
            for scope, obj in (("weights", state["model"]), ("whole", state)):
                ref, rows = _bench_torch_and_zstd(obj, repeat)
                for bins, prune in CONFIGS:
                    rows.append(_bench_ckptzip(obj, bins, prune, ref, tmp, repeat))
                rows.append(_bench_uniform8(obj, ref, repeat))
                entry[scope] = {
                    "torch_save_bytes": ref,
                    "float_bytes": _float_bytes(obj),
                    "rows": rows,
                }
                print_table(
                    f"{name} — {scope} ({ref} bytes torch.save, {steps} steps)", rows, _COLS
                )
            result["workloads"][name] = entry

    # the values of a 10M tensor: trained LM weights resampled (or Gaussian without the LM)
    g = torch.Generator().manual_seed(0)
    pool = torch.cat([x.reshape(-1) for x in lm_weights]) if lm_weights else torch.randn(100_000)
    big = pool[torch.randint(pool.numel(), (lloyd_numel,), generator=g)].float().contiguous()
    gauss = torch.randn(lloyd_numel, generator=g) * 0.02
    result["codec_tensor"] = {}
    pool_label = "lm_weights_resampled" if lm_weights else "standard_normal_resampled"
    for label, tensor in ((pool_label, big), ("gaussian", gauss)):
        codec_rows = _bench_codec_tensor(tensor, repeat)
        result["codec_tensor"][label] = codec_rows
        print_table(
            f"codec alone on {lloyd_numel} fp32 values, {label} "
            "(quantize+pack+zstd / unzstd+unpack+dequantize)",
            codec_rows,
            [
                ("config", "config", "s"),
                ("ratio_vs_fp32", "ratio", ".2f"),
                ("rel_error", "rel err", ".4f"),
                ("quantize_MBps", "quant MB/s", ".1f"),
                ("compress_MBps", "comp MB/s", ".1f"),
                ("decompress_MBps", "dec MB/s", ".1f"),
            ],
        )
    if torch.cuda.is_available():
        result["cuda"] = _bench_cuda(gauss, repeat)
        print(f"\nCUDA: {result['cuda']}")
    km = _bench_kmeans(big, 16, args.lloyd_iter, repeat)
    result["kmeans"] = km
    print(f"\nk-means on {km['numel']} values, k=16")
    print(
        f"  Lloyd (raw values, k-means++ init, {km['lloyd']['iterations']} iterations): "
        f"{km['lloyd']['seconds']:.2f} s, MSE {km['lloyd']['mse']:.4e}"
    )
    for sigma in ("1", "0.2"):
        r = km[f"sketch_sigma{sigma}"]
        print(
            f"  sketch k-means, sigma={sigma}: {r['seconds']:.3f} s "
            f"({r['speedup_vs_lloyd']:.1f}x faster), MSE {r['mse']:.4e} "
            f"({100 * r['mse_vs_lloyd']:+.1f} % vs Lloyd)"
        )

    write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
