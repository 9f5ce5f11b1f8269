"""Benchmark: bits and Adam-step error of Adam's first moment stored as its step, offline.

A workload is trained exactly; at a few steps (``--at``) its Adam moments are coded as error
feedback codes them and as the codec ``"step"`` would, with the library's quantizer and index
coder (bytes of the four ``quant`` chunks; no container):

* ``m{B}u``: ``exp_avg`` at ``B`` levels fitted to the step (``QuantConfig(fit="update")``,
  :data:`ckptzip.plan.FEEDBACK_MOMENTS` before the codec ``"step"``);
* ``u{B}v`` / ``u{B}l``: the step ``u = m / (sqrt(v̂) + eps)`` at ``B`` levels, ``v̂`` the
  second moment as error feedback stores it (16 log-domain levels), the levels fitted to the
  values (count and magnitude: what ``QuantConfig(fit="step")`` does) or by plain L2 k-means.

Error: ``||(m̂ − m) / r|| / ||m / r||`` with the exact ``r = sqrt(v) + eps``: how far the first
step after a restore moves from the exact one, relative to its size. The second table is
where that error lies (:func:`step_groups`): entries grouped by the exact step's size and by
their second moment, the coded step's length, error and sign against the exact one's. The
third is the weights' residual of error feedback (4 levels, a keyframe at 16 levels at the
first ``--at`` step, then one residual per ``--every`` steps): the order-0 entropy of its
indices alone and given a context a decoder could know (the sign of the first moment of the
same file, the previous residual's index): what a context-modelling entropy stage could save.

Run ``python benchmarks/step_coding.py --model llm`` (about 1-2 minutes on a shared 2-core
machine). Writes ``benchmarks/results/step_coding-<model>.json``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads

from ckptzip._types import QuantizedTensor
from ckptzip.codecs.quantized import encode_quantized
from ckptzip.codecs.residual import reconstruct
from ckptzip.config import QuantConfig
from ckptzip.plan import ADAM_EPS, RESIDUAL, state_indices
from ckptzip.quantize import dequantize, quantize

MIN_NUMEL = 4096
V_CONFIG = QuantConfig(bins=16, protect=0.0005, log_domain=True)
KEYFRAME = QuantConfig(bins=16, protect=0.005)


def _entropy(a: np.ndarray) -> float:
    c = np.bincount(a.astype(np.int64))
    p = c[c > 0] / a.size
    return float(-(p * np.log2(p)).sum())


def _conditional(a: np.ndarray, ctx: np.ndarray) -> float:
    return sum(float((ctx == c).mean()) * _entropy(a[ctx == c]) for c in np.unique(ctx))


def moments(states: list[dict[str, Any]], bins: list[int]) -> list[dict[str, Any]]:
    """Bits per entry and step error of each coding of ``exp_avg``, over every state; also the
    error of the step a restored Adam takes, ``m̂ / r̂`` with ``r̂`` from the stored second
    moment (``restored_step_error``; the row ``m exact`` is that of ``v̂`` alone)."""
    bits: dict[str, float] = defaultdict(float)
    err: dict[str, float] = defaultdict(float)
    rest: dict[str, float] = defaultdict(float)
    norm = n = 0.0
    for st in states:
        for row in st["optimizer"]["state"].values():
            m, v = row["exp_avg"], row["exp_avg_sq"]
            if m.numel() < MIN_NUMEL:
                continue
            r = v.sqrt() + ADAM_EPS
            rh = dequantize(quantize(v, V_CONFIG)).sqrt() + ADAM_EPS
            norm += float((m / r).square().sum())
            n += m.numel()

            def record(
                name: str,
                q: Any,
                mh: torch.Tensor,
                m: torch.Tensor = m,
                r: torch.Tensor = r,
                rh: torch.Tensor = rh,
            ) -> None:
                if q is not None:
                    bits[name] += 8 * sum(len(c) for c in encode_quantized(q, 3)[1])
                err[name] += float(((mh - m) / r).square().sum())
                rest[name] += float((mh / rh - m / r).square().sum())

            record("m exact", None, m)

            for b in bins:
                cfg = QuantConfig(bins=b, protect=0.0005, fit="update")
                q = quantize(m, cfg, fit_weights=1 / (r * r))
                record(f"m{b}u", q, dequantize(q))
                u = m / rh
                for tag, fit in (("v", None), ("l", torch.ones_like(u))):
                    q = quantize(u, QuantConfig(bins=b, protect=0.0005), fit_weights=fit)
                    record(f"u{b}{tag}", q, dequantize(q) * rh)
    return [
        {
            "coding": k,
            "bits_per_entry": bits[k] / n,
            "step_error": math.sqrt(err[k] / norm),
            "restored_step_error": math.sqrt(rest[k] / norm),
        }
        for k in err
    ]


def centroid_levels(q: QuantizedTensor, step: torch.Tensor) -> QuantizedTensor:
    """``q`` with each non-zero level moved to the mean of the steps assigned to it (same
    indices, same bytes; the smallest squared error for those indices). The codec ``"step"``
    did this at commit e902abd, reverted after the full protocol (README, "Adam's first moment
    as its step"). Protected positions are left out; a level at exactly zero, an empty one, or
    a result that would not be strictly increasing keeps the fit's levels.

    Examples
    --------
    >>> from ckptzip.config import QuantConfig
    >>> from ckptzip.quantize import quantize
    >>> x = torch.tensor([1.0, 2.0, 3.0, 10.0, 20.0])
    >>> q = quantize(x, QuantConfig(bins=2, protect=0.0))
    >>> q.levels.round(2).tolist(), centroid_levels(q, x).levels.tolist()
    ([6.21, 19.89], [4.0, 20.0])
    """
    levels = np.asarray(q.levels, dtype=np.float64)
    if levels.size < 2:
        return q
    idx = torch.from_numpy(q.indices.reshape(-1).astype(np.int64))
    keep = torch.ones(idx.numel(), dtype=torch.bool)
    if q.protected_positions.size:
        keep[torch.from_numpy(q.protected_positions)] = False
    values = step.reshape(-1).to(torch.float64)
    keep &= torch.isfinite(values)
    sums = torch.bincount(idx[keep], weights=values[keep], minlength=levels.size)
    counts = torch.bincount(idx[keep], minlength=levels.size)
    sums, counts = sums[: levels.size].numpy(), counts[: levels.size].numpy()
    moved = np.where((counts > 0) & (levels != 0.0), sums / np.maximum(counts, 1), levels)
    if not bool(np.all(np.isfinite(moved))) or not bool(np.all(moved[1:] > moved[:-1])):
        return q
    return replace(q, levels=moved)


GROUP_QUANTILES = (0.1, 0.5, 0.9)


def step_groups(states: list[dict[str, Any]], bins: int = 4) -> list[dict[str, Any]]:
    """Where each coding of ``exp_avg`` moves the step: entries grouped by the exact step's
    size ``|m/r|`` and by ``r`` over its tensor's median (quantiles over every entry of every
    state); per group its share of ``||m/r||²``, the coded step's length and error relative to
    the exact one's, and the fraction of entries whose sign differs. Codings: ``m`` at
    ``bins`` levels fitted to the step (error feedback's default), the step at ``bins``
    levels as the quantizer fits them, and with each level at its members' mean."""
    s_all, r_all, coded = [], [], defaultdict(list)
    for st in states:
        for row in st["optimizer"]["state"].values():
            m, v = row["exp_avg"].reshape(-1), row["exp_avg_sq"].reshape(-1)
            if m.numel() < MIN_NUMEL:
                continue
            r = v.sqrt() + ADAM_EPS
            rh = dequantize(quantize(v, V_CONFIG)).reshape(-1).sqrt() + ADAM_EPS
            s_all.append(m / r)
            r_all.append(r / r.median())
            q = quantize(
                m, QuantConfig(bins=bins, protect=0.0005, fit="update"), fit_weights=1 / (r * r)
            )
            coded[f"m{bins}u"].append(dequantize(q).reshape(-1) / r)
            u = m / rh
            q = quantize(u, QuantConfig(bins=bins, protect=0.0005))
            for name, qq in ((f"u{bins}v", q), (f"u{bins}v, level means", centroid_levels(q, u))):
                mh = dequantize(qq).reshape(-1) * rh
                pos = torch.from_numpy(qq.protected_positions)
                mh[pos] = m[pos]
                coded[name].append(mh / r)
    s = torch.cat(s_all)
    total = float(s.square().sum())
    rows = []
    for key, label in ((s.abs(), "|m/r|"), (torch.cat(r_all), "r / median r")):
        sample = key[
            torch.randperm(key.numel(), generator=torch.Generator().manual_seed(0))[:200_000]
        ]
        cuts = torch.quantile(sample.double(), torch.tensor(GROUP_QUANTILES, dtype=torch.float64))
        edges = [-math.inf, *cuts.tolist(), math.inf]
        names = ["<p10", "p10-p50", "p50-p90", ">p90"]
        for gname, lo, hi in zip(names, edges[:-1], edges[1:], strict=True):
            g = (key > lo) & (key <= hi)
            sg = s[g]
            row: dict[str, Any] = {
                "by": label,
                "group": gname,
                "share": float(sg.square().sum()) / total,
            }
            for name, parts in coded.items():
                x = torch.cat(parts)[g]
                row[f"{name}: length"] = float(x.norm() / sg.norm())
                row[f"{name}: error"] = float((x - sg).norm() / sg.norm())
                row[f"{name}: sign"] = float((torch.sign(x) != torch.sign(sg)).float().mean())
            rows.append(row)
    return rows


def residual_contexts(w: _workloads.Workload, states: list[dict[str, Any]]) -> dict[str, float]:
    """Order-0 and conditional entropies (bits per weight) of error feedback's residual
    indices, weighted by tensor size, over the chain of ``states``."""
    index = state_indices(w.optimizer)
    seen: set[int] = set()
    pairs = []
    for name, p in w.model.named_parameters():
        if id(p) not in seen and p.numel() >= MIN_NUMEL:
            seen.add(id(p))
            pairs.append((name, index[id(p)]))
    sums: dict[str, float] = defaultdict(float)
    total = 0.0
    recon: dict[str, torch.Tensor] = {}
    previous: dict[str, np.ndarray] = {}
    for k, st in enumerate(states):
        for name, i in pairs:
            x = st["model"][name].float()
            if k == 0:
                recon[name] = dequantize(quantize(x, KEYFRAME))
                continue
            q = quantize(x - recon[name], RESIDUAL)
            recon[name] = reconstruct(recon[name], q)
            a = q.indices
            m = st["optimizer"]["state"][i]["exp_avg"].reshape(-1).numpy()
            size = float(a.size)
            sums["alone"] += size * _entropy(a)
            sums["given the sign of exp_avg"] += size * _conditional(a, (m > 0).astype(np.int64))
            if name in previous:
                sums["given the previous residual"] += size * _conditional(a, previous[name])
                sums["alone, where a previous one exists"] += size * _entropy(a)
            previous[name] = a
            total += size
    later = sum(
        st["model"][n].numel() for st in states[2:] for n, _ in pairs
    )  # the residuals that have a previous one
    return {k: v / (later if "previous" in k else total) for k, v in sums.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="llm", choices=sorted(_workloads.WORKLOADS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--at", type=int, nargs="+", default=[20, 100, 190])
    ap.add_argument("--bins", type=int, nargs="+", default=[3, 4, 5])
    ap.add_argument("--chain", type=int, default=10, help="residuals after the keyframe")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    chain = [args.at[0] + k * args.every for k in range(args.chain + 1)]
    steps = sorted(set(args.at) | set(chain))
    w, states = _workloads.states_at(args.model, args.seed, steps)
    by_step = dict(zip(steps, states, strict=True))
    rows = moments([by_step[s] for s in args.at], args.bins)
    _report.print_table(
        f"{args.model}: exp_avg codings at steps {args.at}",
        rows,
        [("coding", "coding", ""), ("bits_per_entry", "bits/entry", ".3f"),
         ("step_error", "step error", ".3f"),
         ("restored_step_error", "over v̂", ".3f")],
    )  # fmt: skip
    groups = step_groups([by_step[s] for s in args.at])
    keys = [k for k in groups[0] if k not in ("by", "group", "share")]
    _report.print_table(
        f"{args.model}: the coded step against the exact one, by group (length, error, sign)",
        groups,
        [("by", "by", ""), ("group", "group", ""), ("share", "share of |s|²", ".3f")]
        + [(k, k, ".2f") for k in keys],
    )
    contexts = residual_contexts(w, [by_step[s] for s in chain])
    _report.print_table(
        f"{args.model}: error feedback's weight residual (4 levels), steps {chain[0]}-{chain[-1]}",
        [{"entropy of the indices": k, "bits/weight": v} for k, v in contexts.items()],
        [("entropy of the indices", "entropy of the indices", ""), ("bits/weight", "bits", ".3f")],
    )
    out = _report.results_path(args.out, f"step_coding-{args.model}.json")
    _report.write_json(
        out, {"meta": vars(args), "exp_avg": rows, "groups": groups, "residual": contexts}
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
