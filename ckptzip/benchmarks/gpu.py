"""Benchmark: ckptzip on a CUDA device, in GB/s of fp32 input (run it where a GPU is).

Quantization runs on the tensor's device (torch ops: the reference kernels, which the
compiled kernels hand CUDA tensors to); only the uint8 indices, the levels and the protected
values come to the host. Decoding onto ``map_location="cuda"`` copies the indices up and
gathers the levels on the device. Measured, each best of ``--repeat`` with the device
synchronised:

* ``quantize``: one ``--numel`` fp32 tensor on the device, and the bytes that crossed to the
  host (indices + protected values) against the tensor's;
* ``dequantize``: the same tensor back onto the device;
* ``save`` / ``load``: ``ckptzip.save`` of a state of such tensors living on the device, and
  ``ckptzip.load(map_location="cuda")``, against ``torch.save`` / ``torch.load`` of it;
* a ``CheckpointManager`` chain of that state: a delta save, and the restore of the chain's
  last step onto the device.

``python benchmarks/gpu.py`` (``--numel``, default 64M); prints a table and writes
``benchmarks/results/gpu.json``. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import RESULTS, print_table, write_json

import ckptzip
from ckptzip.config import QuantConfig
from ckptzip.quantize import dequantize, quantize


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    best, out = float("inf"), None
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return out, best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--numel", type=int, default=64 * 1024 * 1024)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, default=RESULTS / "gpu.json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device here: nothing measured")
        return
    x = torch.randn(args.numel, device="cuda") * 0.02
    nbytes = x.numel() * x.element_size()
    cfg = QuantConfig()
    quantize(x[:1_000_000], cfg)  # warm up the device's kernels
    q, t_q = timed(lambda: quantize(x, cfg), args.repeat)
    host = q.indices.nbytes + q.protected_values.numel() * x.element_size()
    _, t_dq = timed(lambda: dequantize(q, device="cuda"), args.repeat)
    state = {f"w{i}": torch.randn(args.numel // 4, device="cuda") * 0.02 for i in range(4)}
    with tempfile.TemporaryDirectory() as d:
        pt, ckz = Path(d) / "s.pt", Path(d) / "s.ckz"
        _, t_ts = timed(lambda: torch.save(state, pt), args.repeat)
        _, t_cs = timed(lambda: ckptzip.save(state, ckz, overwrite=True), args.repeat)
        _, t_tl = timed(lambda: torch.load(pt, map_location="cuda"), args.repeat)
        _, t_cl = timed(lambda: ckptzip.load(ckz, map_location="cuda"), args.repeat)
        ratio = pt.stat().st_size / ckz.stat().st_size
        # a manager chain of the same state: keyframe, then deltas of a slightly moved state
        mgr = ckptzip.CheckpointManager(Path(d) / "chain", keyframe_every=8)
        mgr.save(0, state)
        t_md, step = float("inf"), 0
        for _ in range(args.repeat):
            step += 1
            for v in state.values():
                v.add_(torch.randn_like(v), alpha=1e-4)
            _, t = timed(lambda s=step: mgr.save(s, state), 1)
            t_md = min(t_md, t)
        _, t_mr = timed(lambda: mgr.load(step, map_location="cuda"), args.repeat)
        mgr.close()
    rows = [
        {"what": "quantize on the device", "s": t_q, "gbs": nbytes / t_q / 1e9},
        {"what": "dequantize onto the device", "s": t_dq, "gbs": nbytes / t_dq / 1e9},
        {"what": "torch.save", "s": t_ts, "gbs": nbytes / t_ts / 1e9},
        {"what": "ckptzip.save", "s": t_cs, "gbs": nbytes / t_cs / 1e9},
        {"what": "torch.load (cuda)", "s": t_tl, "gbs": nbytes / t_tl / 1e9},
        {"what": "ckptzip.load (cuda)", "s": t_cl, "gbs": nbytes / t_cl / 1e9},
        {"what": "manager delta save", "s": t_md, "gbs": nbytes / t_md / 1e9},
        {"what": f"manager restore of step {step} (cuda)", "s": t_mr, "gbs": nbytes / t_mr / 1e9},
    ]
    print_table(
        f"{args.numel / 1e6:.0f}M fp32 on {torch.cuda.get_device_name()}: device-to-host "
        f"{host / nbytes:.3f} of the tensor's bytes, file ratio {ratio:.2f}x",
        rows,
        [("what", "what", ""), ("s", "seconds", ".3f"), ("gbs", "GB/s", ".2f")],
    )
    write_json(
        args.json,
        {
            "numel": args.numel,
            "device": torch.cuda.get_device_name(),
            "host_fraction": host / nbytes,
            "ratio": ratio,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
