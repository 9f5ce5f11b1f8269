"""Clean single-core timings of the codec, and a GPU check, for an otherwise idle machine.

``codec.py`` is the full benchmark; on a shared machine its timings are noise. This script
runs the timing parts of it (its own functions: nothing is re-implemented here) in a few
minutes, so they can be taken on an idle host: the codec alone on 10M fp32 values (LM weights
resampled, and Gaussian), ``ckptzip.save``/``load`` on the mlp and lm checkpoints after 20
steps at 16 bins, quantization on CUDA when present (time, agreement with the CPU), and the
sketch k-means against Lloyd on 10M values. One thread (``torch.set_num_threads(1)``).

Run ``python benchmarks/codec_clean.py [--json PATH]`` (default
``benchmarks/results/codec_clean.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
import codec
from _report import RESULTS, best_of

from ckptzip.config import QuantConfig
from ckptzip.quantize import dequantize, quantize


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=RESULTS / "codec_clean.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    out: dict[str, Any] = {"torch": torch.__version__, "threads": torch.get_num_threads()}

    def dump() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))

    # 1. codec alone, 10M fp32 values resampled from LM weights (as codec.py does), and Gaussian
    w = _workloads.make("lm", 0)
    for s in range(20):
        w.train_step(s)
    pool = torch.cat(
        [x.reshape(-1) for _, x in codec._leaves(w.state()["model"]) if codec._lossy(x)]
    )
    g = torch.Generator().manual_seed(0)
    big = pool[torch.randint(pool.numel(), (10_000_000,), generator=g)].float().contiguous()
    gauss = torch.randn(10_000_000, generator=g) * 0.02
    out["codec_lm_pool"] = codec._bench_codec_tensor(big, 3)
    out["codec_gauss"] = codec._bench_codec_tensor(gauss, 3)
    print(json.dumps(out["codec_gauss"], indent=1), flush=True)

    # 2. small checkpoints end to end (weights and whole), ckptzip.save/load at 16 bins
    tmp = Path(tempfile.mkdtemp())
    out["save_load"] = {}
    for name in ("mlp", "lm"):
        wl = _workloads.make(name, 0)
        for s in range(20):
            wl.train_step(s)
        st = _workloads._clone(wl.state())
        for scope, obj in (("weights", st["model"]), ("whole", st)):
            ref, rows = codec._bench_torch_and_zstd(obj, 3)
            rows.append(codec._bench_ckptzip(obj, 16, 0.0, ref, tmp, 3))
            rows.append(codec._bench_uniform8(obj, ref, 3))
            out["save_load"][f"{name}/{scope}"] = rows
            summary = [
                (r["method"], round(r["compress_MBps"]), round(r["decompress_MBps"])) for r in rows
            ]
            print(name, scope, summary, flush=True)
    dump()

    # 3. CUDA
    try:
        if torch.cuda.is_available():
            xc = gauss.cuda()
            cfg = QuantConfig(bins=16, prune=0.2)
            quantize(xc, cfg)
            torch.cuda.synchronize()
            qg, tg = best_of(lambda: quantize(xc, cfg), 3)
            qc = quantize(gauss, cfg)
            yg, tdg = best_of(
                lambda: (dequantize(qg, device="cuda"), torch.cuda.synchronize())[0], 3
            )
            out["cuda"] = {
                "device": torch.cuda.get_device_name(),
                "quantize_s": tg,
                "dequantize_s": tdg,
                "levels_max_rel_diff": float(
                    np.max(np.abs(qg.levels - qc.levels)) / np.max(np.abs(qc.levels))
                ),
                "index_mismatch_frac": float(np.mean(qg.indices != qc.indices)),
                "rel_error_gpu": qg.rel_error,
                "rel_error_cpu": qc.rel_error,
                "dequant_equal_cpu_path": bool(torch.equal(yg.cpu(), dequantize(qg))),
            }
            print(out["cuda"], flush=True)
    except Exception:  # the CPU figures above are still worth keeping
        traceback.print_exc()
    dump()

    # 4. sketch k-means vs Lloyd on 10M values
    out["kmeans"] = codec._bench_kmeans(big, 16, 50, 3)
    print(json.dumps(out["kmeans"], indent=1), flush=True)
    dump()
    return out


if __name__ == "__main__":
    main()
