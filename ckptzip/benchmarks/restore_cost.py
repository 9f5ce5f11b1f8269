"""Benchmark: what one restore costs training, part by part (weights, ``exp_avg``, ``exp_avg_sq``).

Train a workload exactly for ``--at`` steps, then resume it ``--steps`` more steps from that
state with one part replaced by its quantized form (everything else exact), on the same
batches as the exact continuation. Reported per variant: the held-out loss right after the
restore and after the resumed steps against the exact continuation, the training loss gap of
the first resumed step and its mean over them, and the largest relative L2 error of a
quantized weight. It shows what ``eval_fn`` on held-out data right after quantizing does not:
a perturbation of the weights that held-out data hardly sees can cost the *training* loss for
many steps (pruning half of each weight), and training does not win it back quickly.

Variants (comma-separated ``--variants``): ``m`` / ``v`` (``exp_avg`` / ``exp_avg_sq`` at
:class:`ckptzip.MomentPolicy`'s defaults), ``bBpP`` (every weight the search may touch at
``B`` bins with ``P``/10 pruned by magnitude, e.g. ``b8p5``), ``mv`` (both moments),
``mBpP`` (``exp_avg`` alone at ``B`` levels with ``P``/10 of it pruned: the policy's
``first_bins`` / ``first_prune``, e.g. ``m3p5``; ``m0`` sets it to zero) and ``vB``
(``exp_avg_sq`` alone at ``B`` log-domain levels).

Run ``python benchmarks/restore_cost.py --model lm --at 140 --steps 25`` (about 3 minutes on
a shared 2-core machine). Writes ``benchmarks/results/restore_cost-<model>-<at>.json``.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _report
import _workloads

from ckptzip.config import QuantConfig
from ckptzip.plan import MomentPolicy
from ckptzip.quantize import dequantize, quantize

MIN_NUMEL = 4096  # the manager's min_numel: smaller tensors stay exact
DEFAULT_VARIANTS = "v,m,mv,b8p5,b256p5,b8p0,b16p0,b32p0,b64p0"


_MOMENT = re.compile(r"([mv])(\d+)(?:p(\d))?$")


def _variant(state: dict[str, Any], model: torch.nn.Module, name: str) -> tuple[Any, float]:
    """``state`` with the parts ``name`` asks for quantized; the largest weight error."""
    st = copy.deepcopy(state)
    policy = MomentPolicy()
    worst = 0.0
    weight = None
    if name.startswith("b"):
        bins, prune = name[1:].split("p")
        weight = QuantConfig(bins=int(bins), prune=int(prune) / 10)
    elif (one := _MOMENT.match(name)) is not None:  # one moment at the given levels
        kind, levels, prune = one[1], int(one[2]), int(one[3] or 0) / 10
        if kind == "m" and levels > 0:
            policy = MomentPolicy(levels, first_prune=prune)
        elif kind == "v":
            policy = MomentPolicy(second_bins=levels)
        name = kind if levels > 0 else "m0"
    for i, (pname, p) in enumerate(model.named_parameters()):
        if p.numel() < MIN_NUMEL:
            continue
        if weight is not None:
            q = quantize(st["model"][pname], weight)
            st["model"][pname] = dequantize(q).reshape(p.shape)
            worst = max(worst, q.rel_error)
        row = st["optimizer"]["state"][i]
        if name == "m0":
            row["exp_avg"] = torch.zeros_like(row["exp_avg"])
        elif "m" in name and not name.startswith("b"):
            m = row["exp_avg"]
            cfg = policy.first(QuantConfig(), float((m == 0).float().mean()))
            if cfg is not None:
                row["exp_avg"] = dequantize(quantize(m, cfg)).reshape(m.shape)
        if "v" in name and not name.startswith("b"):
            v = row["exp_avg_sq"]
            row["exp_avg_sq"] = dequantize(quantize(v, policy.second())).reshape(v.shape)
    return st, worst


def main(argv: list[str] | None = None) -> int:
    args = _workloads.offline_parser(
        __doc__.split("\n")[0],
        model="lm",
        at=(140, "exact training steps before"),
        then=("--steps", 25, "steps resumed after"),
        variants=DEFAULT_VARIANTS,
    ).parse_args(argv)
    torch.set_num_threads(1)
    w, (state,) = _workloads.states_at(args.model, args.seed, [args.at])

    def resume(st: Any) -> tuple[float, float, list[float]]:
        # a copy: the optimizer's load_state_dict keeps the given tensors, which its steps
        # then update in place
        st = copy.deepcopy(st)
        x = _workloads.make(args.model, args.seed)
        x.model.load_state_dict(st["model"])
        x.optimizer.load_state_dict(st["optimizer"])
        at_once = x.eval_fn(x.model)
        losses = [x.train_step(s) for s in range(args.at, args.at + args.steps)]
        return at_once, x.eval_fn(x.model), losses

    ref_once, ref_after, ref_losses = resume(state)
    rows = []
    for name in args.variants.split(","):
        st, worst = _variant(state, w.model, name)
        once, after, losses = resume(st)
        gaps = [a / b - 1 for a, b in zip(losses, ref_losses, strict=True)]
        rows.append(
            {
                "variant": name,
                "weight_rel_error": worst,
                "heldout_at_once": once / ref_once - 1,
                "heldout_after": after / ref_after - 1,
                "train_gap_first": gaps[0],
                "train_gap_mean": sum(gaps) / len(gaps),
            }
        )
        r = rows[-1]
        print(
            f"{name:8s} weight error {worst:.3f}  held-out at once {r['heldout_at_once']:+.2%}"
            f"  after {args.steps}: {r['heldout_after']:+.2%}  training loss gap first "
            f"{gaps[0]:+.2%}, mean {r['train_gap_mean']:+.2%}",
            flush=True,
        )
    out = _report.results_path(args.out, f"restore_cost-{args.model}-{args.at}.json")
    _report.write_json(out, {"meta": vars(args), "exact_heldout": ref_after, "rows": rows})
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
