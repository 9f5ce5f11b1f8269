"""Benchmark: bytes and Adam-step error of ways to store the optimizer's moments, offline.

A workload is trained exactly for ``--at`` steps and ``--every`` more; its two states are
saved with ckptzip (weights exact, the moments as each variant says), the first as a keyframe
and the second as a delta against it, and the moments of the first are decoded again. What a
restore hands Adam is judged in the units of its update ``u = m_hat / (sqrt(v_hat) + eps)``
(bias-corrected, the optimizer's own betas and eps):

* ``m`` error: ``||(m_dec - m) / r|| / ||u||`` with the exact ``r = sqrt(v_hat) + eps``: how
  far the first step after a restore moves from the exact one, relative to its size (the
  error then decays with ``beta1``);
* ``v`` error: the mean ``|log(r_dec / r)|``, the relative error of each weight's step size,
  which lasts as long as ``exp_avg_sq`` remembers (``beta2`` 0.999: most of a short run).

A variant is ``M:V``. ``M`` is ``mB`` or ``mBpP`` (``exp_avg`` at ``B`` levels, ``P`` % of it
pruned by magnitude: :class:`ckptzip.MomentPolicy`'s ``first_bins`` / ``first_prune``),
``V`` is ``vB`` (``exp_avg_sq`` at ``B`` log-domain levels). A trailing ``r`` on ``M``
(``m3p50r``) or ``f`` on ``V`` (``v8f``) is a prototype that ckptzip does not implement: the
moment of a 2-D weight divided by a per-row RMS (``m``) or by a factored row-times-column scale
fitted in the log domain (``v``, Adafactor's shape), quantized, and multiplied back; its
scales are counted as fp16 rows plus columns. The prototypes say whether building such a
codec would pay.

Run ``python benchmarks/moment_codings.py --model llm`` (about 2 minutes on a shared 2-core
machine). Writes ``benchmarks/results/moment_codings-<model>-<at>.json``.
"""

from __future__ import annotations

import copy
import math
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads

import ckptzip
from ckptzip.config import CompressionConfig, QuantConfig
from ckptzip.plan import MomentPolicy, zero_fraction

MIN_NUMEL = 4096  # the manager's min_numel: smaller tensors and their moments stay exact
DEFAULT_VARIANTS = (
    "m8:v16,m8:v12,m8:v8,m8:v6,m8:v4,m4:v16,m3p50:v16,m3p50:v8,m3p70:v8,m3p80:v8,m4p50:v8,"
    "m3p50r:v8,m8r:v16,m3p50:v16f,m3p50:v8f,m3p50:v6f,m3p50:v4f"
)
_M = re.compile(r"m(\d+)(?:p(\d+))?(r?)$")
_V = re.compile(r"v(\d+)(f?)$")


def parse(variant: str) -> tuple[MomentPolicy, bool, bool]:
    """``"m3p50r:v8f"`` -> (the policy, first moment row-scaled, second moment factored)."""
    first, _, second = variant.partition(":")
    m, v = _M.match(first), _V.match(second)
    if m is None or v is None:
        raise SystemExit(f"variant {variant!r}: expected mB[pP][r]:vB[f], e.g. m3p50:v8")
    policy = MomentPolicy(int(m[1]), second_bins=int(v[1]), first_prune=int(m[2] or 0) / 100)
    return policy, bool(m[3]), bool(v[2])


def _scale(x: torch.Tensor, factored: bool) -> torch.Tensor:
    """The prototypes' positive scale of a 2-D moment (``x / scale`` is what is quantized)."""
    if factored:  # log v ~ row + column, fitted by their means (least squares)
        log = x.clamp_min(torch.finfo(x.dtype).tiny).log()
        return (log.mean(1, keepdim=True) + log.mean(0, keepdim=True) - log.mean()).exp()
    return x.square().mean(1, keepdim=True).sqrt().clamp_min(torch.finfo(x.dtype).tiny)


def _moments(state: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    return [
        (i, row)
        for i, row in state["optimizer"]["state"].items()
        if row["exp_avg"].numel() >= MIN_NUMEL
    ]


def measure(
    states: tuple[dict[str, Any], dict[str, Any]],
    variant: str,
    betas: tuple[float, float],
    eps: float,
) -> dict[str, Any]:
    """Bytes (keyframe, delta) and errors of ``variant`` on the two ``states``."""
    policy, row_m, fac_v = parse(variant)
    scaled = [copy.deepcopy(s) for s in states]
    scales: dict[tuple[int, str], torch.Tensor] = {}
    extra = {"exp_avg": 0, "exp_avg_sq": 0}  # bytes of the prototypes' scales, per save
    for k, st in enumerate(scaled):
        for i, row in _moments(st):
            for key, on in (("exp_avg", row_m), ("exp_avg_sq", fac_v)):
                if on and row[key].dim() == 2:
                    s = _scale(row[key], key == "exp_avg_sq")
                    row[key] = row[key] / s
                    extra[key] += 2 * sum(row[key].shape) if k == 0 else 0
                    if k == 0:
                        scales[i, key] = s
    # the policy's configs, each moment's own zeros kept exact as the planner does
    overrides = []
    for i, row in _moments(scaled[0]):
        first = policy.first(QuantConfig(), zero_fraction(row["exp_avg"]))
        overrides.append((f"optimizer/state/{i}/exp_avg", first or QuantConfig()))
        overrides.append((f"optimizer/state/{i}/exp_avg_sq", policy.second()))
    config = CompressionConfig(exact=("model/*",), overrides=tuple(overrides))
    ratios: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as d:
        key_path, delta_path = f"{d}/key.ckz", f"{d}/delta.ckz"
        reports = (
            ckptzip.save(scaled[0], key_path, config=config),
            ckptzip.save(scaled[1], delta_path, config=config, parent=key_path),
        )
        decoded = ckptzip.load(key_path)
    for tag, r in zip(("keyframe", "delta"), reports, strict=True):
        for key in ("exp_avg", "exp_avg_sq"):
            es = [e for e in r.entries if e.path.endswith("/" + key) and e.config is not None]
            ratios[f"{key}_{tag}"] = sum(e.nbytes for e in es) / (
                sum(e.bytes for e in es) + extra[key]
            )
    b1, b2 = betas
    num = den = 0.0
    logs: list[float] = []
    for i, row in _moments(states[0]):
        m, v, t = row["exp_avg"], row["exp_avg_sq"], float(row["step"])
        dec = decoded["optimizer"]["state"][i]
        m_dec = dec["exp_avg"] * scales.get((i, "exp_avg"), 1.0)
        v_dec = dec["exp_avg_sq"] * scales.get((i, "exp_avg_sq"), 1.0)
        r = (v / (1 - b2**t)).sqrt() + eps
        r_dec = (v_dec / (1 - b2**t)).sqrt() + eps
        num += float(((m_dec - m) / (1 - b1**t) / r).square().sum())
        den += float((m / (1 - b1**t) / r).square().sum())
        logs.append(float((r_dec / r).log().abs().mean()))
    chain = 10  # a keyframe then nine deltas (the benchmarks' keyframe_every)
    out: dict[str, Any] = {"variant": variant, **ratios}
    for key in ("exp_avg", "exp_avg_sq"):
        per_chain = 1 / ratios[f"{key}_keyframe"] + (chain - 1) / ratios[f"{key}_delta"]
        out[f"{key}_chain"] = chain / per_chain
    out["m_error"] = math.sqrt(num / den)
    out["v_error"] = sum(logs) / len(logs)
    return out


def main(argv: list[str] | None = None) -> int:
    args = _workloads.offline_parser(
        __doc__.split("\n")[0],
        model="llm",
        at=(100, "exact training steps to the keyframe"),
        then=("--every", 10, "steps from the keyframe to the delta"),
        variants=DEFAULT_VARIANTS,
    ).parse_args(argv)
    torch.set_num_threads(1)
    w, states = _workloads.states_at(args.model, args.seed, [args.at, args.at + args.every])
    group = w.optimizer.param_groups[0]
    rows = []
    for variant in args.variants.split(","):
        r = measure((states[0], states[1]), variant, tuple(group["betas"]), group["eps"])
        rows.append(r)
        print(
            f"{variant:12s} exp_avg {r['exp_avg_keyframe']:6.1f}x key {r['exp_avg_delta']:6.1f}x"
            f" delta {r['exp_avg_chain']:6.1f}x chain | exp_avg_sq {r['exp_avg_sq_keyframe']:6.1f}x"
            f" key {r['exp_avg_sq_delta']:6.1f}x delta {r['exp_avg_sq_chain']:6.1f}x chain | "
            f"m error {r['m_error']:.3f}  v error {r['v_error']:.3f}",
            flush=True,
        )
    out = _report.results_path(args.out, f"moment_codings-{args.model}-{args.at}.json")
    _report.write_json(out, {"meta": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
