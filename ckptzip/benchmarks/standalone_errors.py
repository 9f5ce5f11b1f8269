"""Benchmark: what one file standing alone puts back into training, part by part.

A workload is trained ``--steps`` steps and its state saved once with plain ``ckptzip.save``
under each config: ``standalone=None`` (16 levels everywhere, the default before
``StandaloneConfig``), the default ``StandaloneConfig()``, and any ``--standalone W,M,V,FIT``.
For each, over the weights of at least 4096 entries (the lossy ones): the bytes of the
weights, ``exp_avg`` and ``exp_avg_sq``; the relative L2 error of the restored weights, of
the restored first moment, and of the Adam step a restore resumes with, ``m/(sqrt(v)+eps)``
(both moments restored), with only ``m`` or only ``v`` restored (the other exact), the
weights' error in units of the last training step's update (its norm), and how much larger
a step the restored second moment makes: the mean of ``(sqrt(v)+eps)/(sqrt(v̂)+eps)`` over
the entries weighted by ``|m/(sqrt(v)+eps)|``. Deterministic: one seed, one file.

Run ``python benchmarks/standalone_errors.py --models chargru gru --steps 100`` (seconds).
Writes ``benchmarks/results/standalone_errors.json``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads
import torch

import ckptzip
from ckptzip import CompressionConfig, StandaloneConfig

EPS = 1e-8  # Adam's


def measure(model: str, seed: int, steps: int, configs: dict[str, CompressionConfig]) -> list[Any]:
    torch.manual_seed(seed)
    w = _workloads.make(model, seed)
    before: dict[str, torch.Tensor] = {}
    for s in range(steps):
        if s == steps - 1:
            before = {k: v.clone() for k, v in w.model.state_dict().items()}
        w.train_step(s)
    state = {"model": w.model.state_dict(), "optimizer": w.optimizer.state_dict()}
    by_id = {id(p): n for n, p in w.model.named_parameters()}
    names = [by_id[id(p)] for g in w.optimizer.param_groups for p in g["params"]]
    rows = []
    for label, config in configs.items():
        with tempfile.TemporaryDirectory() as tmp:
            r = ckptzip.save(state, os.path.join(tmp, "f.ckz"), config=config)
            back = ckptzip.load(os.path.join(tmp, "f.ckz"))
        nbytes = {"weights": 0, "exp_avg": 0, "exp_avg_sq": 0}
        for e in r.entries:
            kind = "weights" if e.path.startswith("model/") else e.path.rsplit("/", 1)[-1]
            if kind in nbytes:
                nbytes[kind] += e.bytes
        num = dict.fromkeys(("w", "w_steps", "m", "u", "u_m", "u_v"), 0.0)
        den = dict.fromkeys(num, 0.0)
        lean = {"num": 0.0, "den": 0.0}
        for i, n in enumerate(names):
            x, xh = state["model"][n], back["model"][n]
            if x.numel() < 4096:
                continue
            st, sh = state["optimizer"]["state"][i], back["optimizer"]["state"][i]
            m, v, mh, vh = st["exp_avg"], st["exp_avg_sq"], sh["exp_avg"], sh["exp_avg_sq"]
            u = m / (v.sqrt() + EPS)
            for key, got, ref in (
                ("w", xh, x),
                ("m", mh, m),
                ("u", mh / (vh.sqrt() + EPS), u),
                ("u_m", mh / (v.sqrt() + EPS), u),
                ("u_v", m / (vh.sqrt() + EPS), u),
            ):
                num[key] += float((got - ref).norm() ** 2)
                den[key] += float(ref.norm() ** 2)
            num["w_steps"] += float((xh - x).norm() ** 2)
            den["w_steps"] += float((x - before[n]).norm() ** 2)
            # how much larger a step the restored second moment makes, on average over the
            # entries weighted by their step |u| (what moves the weights)
            factor = (v.sqrt() + EPS) / (vh.sqrt() + EPS)
            lean["num"] += float((factor * u.abs()).sum())
            lean["den"] += float(u.abs().sum())
        rows.append(
            {
                "model": model,
                "config": label,
                "ratio": r.bytes_in / r.bytes_out,
                "bytes": nbytes,
                **{k: (num[k] / den[k]) ** 0.5 for k in num},
                "step_size": lean["num"] / lean["den"],
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["chargru", "gru"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--standalone", nargs="*", default=[], metavar="W,M,V,FIT")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    configs = {
        "standalone=None": CompressionConfig(standalone=None),
        "default": CompressionConfig(),
    }
    for spec in args.standalone:
        wb, mb, vb, fit = spec.split(",")
        configs[spec] = CompressionConfig(
            standalone=StandaloneConfig(int(wb), int(mb), fit, int(vb))
        )
    rows = [r for m in args.models for r in measure(m, args.seed, args.steps, configs)]
    print(
        f"\n{'model':<9}{'config':<22}{'ratio':>7}{'w KB':>7}{'m KB':>7}{'v KB':>7}"
        f"{'w err':>7}{'w/step':>8}{'m err':>7}{'step':>7}{'step m':>7}{'step v':>7}"
        f"{'v: size':>8}"
    )
    for r in rows:
        b = r["bytes"]
        print(
            f"{r['model']:<9}{r['config']:<22}{r['ratio']:>6.2f}x{b['weights'] / 1e3:>7.0f}"
            f"{b['exp_avg'] / 1e3:>7.0f}{b['exp_avg_sq'] / 1e3:>7.0f}{r['w']:>7.3f}"
            f"{r['w_steps']:>8.1f}{r['m']:>7.3f}{r['u']:>7.3f}{r['u_m']:>7.3f}{r['u_v']:>7.3f}"
            f"{r['step_size']:>8.3f}"
        )
    meta = {"seed": args.seed, "steps": args.steps, "models": args.models}
    out = _report.results_path(args.out, "standalone_errors.json")
    _report.write_json(out, {"meta": meta, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
