"""Benchmark: delta chains against full quantized checkpoints over one training run.

Trains a workload from ``_workloads`` in-process, checkpointing every ``--every`` steps, and
for every checkpoint measures the bytes of

* ``full``: a full quantized checkpoint (``ckptzip.save`` without a parent);
* ``delta``: a delta against the previous checkpoint, every time (no keyframes): bin-index
  differences rearranged by the parent's bin, run-length + LZMA;
* ``delta_norearrange``: the same files with every delta-coded index payload replaced by the
  payload coded in position order (everything else equal; a tensor falls back to its full
  encoding when that is smaller, exactly as the codec decides);
* ``manager``: what :class:`ckptzip.CheckpointManager` writes with ``--keyframe-every``
  (its delta files are the ``delta`` files above; at its keyframes a separate delta save
  measures the keyframe-free chain);

for the whole checkpoint (model + optimizer: file sizes) and for the weights only (the model
tensors' bytes in those files, against ``torch.save`` of the state dict). Ratios are
``torch.save`` bytes / bytes written. The entropy stage is set against the order-0 entropy
of the rearranged symbol stream, the entropy given the previous bin, and the other back ends
of :mod:`ckptzip.bindiff`.

Run ``python benchmarks/delta.py`` (full) or ``--quick``; writes JSON and a PNG plot under
``benchmarks/results/``. Timings on a shared machine are noisy; sizes are deterministic.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _workloads
from _measure import conditional_entropy_bits, measure_methods
from _report import RESULTS, torch_save_bytes

import ckptzip
from ckptzip import CheckpointManager, storage
from ckptzip._types import QuantizedTensor
from ckptzip.api import read_manifest
from ckptzip.bindiff import DEFAULT_METHOD, cyclic_difference, encode_delta, rearrangement
from ckptzip.entropy import order0_entropy_bits


def _ratio(num: float, den: float) -> float:
    return num / den if den else float("inf")


def _entry_meta(path: str) -> dict[str, dict[str, Any]]:
    return {e.path: e.meta for e in read_manifest(path).tensors}


def measure_run(
    workload: str,
    *,
    checkpoints: int,
    every: int,
    keyframe_every: int,
    seed: int,
    methods: bool,
    quant: ckptzip.QuantConfig,
    workdir: Path,
) -> dict[str, Any]:
    """Train, checkpoint and measure; returns the JSON-able result of one run."""
    w = _workloads.make(workload, seed)
    config = ckptzip.CompressionConfig(quant=quant)
    # bin-index deltas, this benchmark's subject: without error feedback (the manager's
    # default), whose deltas store the weights' residual instead (error_feedback.py measures it)
    manager = CheckpointManager(
        workdir / "manager", keyframe_every=keyframe_every, config=config, error_feedback=False
    )
    rows: list[dict[str, Any]] = []
    prev_path: str | None = None
    prev_hash = ""
    prev_q: dict[str, QuantizedTensor] = {}
    cache: dict[str, Any] = {}
    entropy_totals = {"payload": 0, "order0": 0.0, "conditional": 0.0, "symbols": 0}
    method_totals: dict[str, int] = {}
    t_train = t_full = t_manager = 0.0
    t0 = time.perf_counter()
    for i, (step, state) in enumerate(_workloads.train(w, checkpoints * every, every=every)):
        t_train += time.perf_counter() - t0
        full_path = str(workdir / f"full-{i:04d}.ckz")
        ts = time.perf_counter()
        # The cache receives the file's quantized tensors, so the next delta's parent and the
        # index comparisons below need no decoding (quantization is deterministic, so the
        # manager's files hold the same quantized values as these).
        full = ckptzip.save(state, full_path, config=config, cache=cache)
        t_full += time.perf_counter() - ts
        full_hash = storage.sha256_file(full_path)
        ts = time.perf_counter()
        report = manager.save(step, state)
        t_manager += time.perf_counter() - ts
        manager_kind = "full" if read_manifest(report.path).parent is None else "delta"
        if manager_kind == "delta":
            delta, delta_path = report, report.path
        elif prev_path is None:
            delta, delta_path = full, full_path
        else:  # a keyframe of the manager: measure the keyframe-free chain's delta too
            delta_path = str(workdir / f"delta-{i:04d}.ckz")
            delta = ckptzip.save(state, delta_path, config=config, parent=prev_path, cache=cache)
        q_now = cache[full_hash]
        metas = _entry_meta(delta_path)
        full_bytes = {e.path: e.bytes for e in full.entries}
        # Per tensor: bytes as full, as delta, and as delta with the index payload coded in
        # position order (min with full, as the codec decides). The weights-only figures
        # sum the model's tensors; the whole-checkpoint ones are the files' sizes.
        norearr_bytes: dict[str, int] = {}
        for e in delta.entries:
            meta = metas[e.path]
            norearr_bytes[e.path] = e.bytes
            if e.codec != "delta" or meta.get("mode") != "delta":
                continue
            now, prev = q_now[e.path], prev_q[e.path]
            assert isinstance(now, QuantizedTensor)
            bins = int(meta["delta"]["bins"])
            plain = encode_delta(prev.indices, now.indices, bins, rearrange=False)
            grouped = encode_delta(prev.indices, now.indices, bins, rearrange=True)
            norearr_bytes[e.path] = min(e.bytes - grouped.nbytes + plain.nbytes, full_bytes[e.path])
            if e.path.startswith("model/"):
                d = cyclic_difference(prev.indices, now.indices, bins)
                sym = d[rearrangement(prev.indices)]
                entropy_totals["payload"] += grouped.nbytes
                entropy_totals["order0"] += order0_entropy_bits(sym) / 8
                entropy_totals["conditional"] += conditional_entropy_bits(d, prev.indices) / 8
                entropy_totals["symbols"] += int(sym.size)
                if methods:
                    for name, b in measure_methods(sym).items():
                        method_totals[name] = method_totals.get(name, 0) + b
                    for name, b in measure_methods(d).items():
                        key = f"{name} (no rearrangement)"
                        method_totals[key] = method_totals.get(key, 0) + b
        prev_q = {p: q for p, q in q_now.items() if isinstance(q, QuantizedTensor)}

        def weights(entries: Any, sizes: dict[str, int] | None = None) -> int:
            return sum(
                (e.bytes if sizes is None else sizes[e.path])
                for e in entries
                if e.path.startswith("model/")
            )

        row: dict[str, Any] = {
            "step": step,
            "manager": report.bytes_out,
            "manager_kind": manager_kind,
            "whole": {
                "torch_save": full.bytes_in,
                "full": full.bytes_out,
                "delta": delta.bytes_out,
                "delta_norearrange": delta.bytes_out
                + sum(norearr_bytes.values())
                - sum(e.bytes for e in delta.entries),
            },
            "weights": {
                "torch_save": torch_save_bytes(state["model"]),
                "full": weights(full.entries),
                "delta": weights(delta.entries),
                "delta_norearrange": weights(delta.entries, norearr_bytes),
            },
        }
        # The next delta names this step's full file as its parent: it holds the same
        # quantized values as the delta file and decodes without a chain.
        if prev_path is not None:
            os.unlink(prev_path)
            cache.pop(prev_hash, None)
        if delta_path not in (full_path, report.path):
            os.unlink(delta_path)
        prev_path, prev_hash = full_path, full_hash
        rows.append(row)
        print(
            f"step {step:6d}  whole: full {row['whole']['full']:>9,d}  "
            f"delta {row['whole']['delta']:>9,d}  no-rearr {row['whole']['delta_norearrange']:>9,d}"
            f"  manager {row['manager']:>9,d} ({row['manager_kind']})",
            flush=True,
        )
        t0 = time.perf_counter()

    summary: dict[str, Any] = {}
    for scope in ("whole", "weights"):
        tot = {k: sum(r[scope][k] for r in rows) for k in rows[0][scope]}
        s = {
            f"ratio_{k}": _ratio(tot["torch_save"], v) for k, v in tot.items() if k != "torch_save"
        }
        s["bytes"] = tot
        # the first checkpoint has no parent in any scheme: compare the chain after it too
        later = {k: sum(r[scope][k] for r in rows[1:]) for k in rows[0][scope]}
        s["delta_vs_full"] = _ratio(tot["full"], tot["delta"])
        s["delta_vs_full_after_first"] = _ratio(later["full"], later["delta"])
        s["rearrangement_gain"] = _ratio(tot["delta_norearrange"], tot["delta"])
        summary[scope] = s
    total_manager = sum(r["manager"] for r in rows)
    summary["whole"]["ratio_manager"] = _ratio(
        sum(r["whole"]["torch_save"] for r in rows), total_manager
    )
    summary["whole"]["manager_vs_full"] = _ratio(
        sum(r["whole"]["full"] for r in rows), total_manager
    )
    summary["entropy_stage_weights"] = {
        "method": DEFAULT_METHOD,
        "symbols": entropy_totals["symbols"],
        "payload_bytes": entropy_totals["payload"],
        "order0_bytes": round(entropy_totals["order0"]),
        "conditional_on_prev_bin_bytes": round(entropy_totals["conditional"]),
        "payload_over_order0": _ratio(entropy_totals["payload"], entropy_totals["order0"]),
        "all_methods_bytes": method_totals,
    }
    # Wall time, on whatever else the machine was doing: indicative only.
    summary["seconds"] = {
        "train": round(t_train, 1),
        "full_saves": round(t_full, 1),
        "manager_saves": round(t_manager, 1),
    }
    return {
        "workload": workload,
        "checkpoints": checkpoints,
        "every": every,
        "keyframe_every": keyframe_every,
        "seed": seed,
        "config": config.to_json(),
        "rows": rows,
        "summary": summary,
    }


def plot(result: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    rows = result["rows"]
    steps = [r["step"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharex=True)
    for ax, scope in zip(axes, ("whole", "weights"), strict=True):
        for key, label in (
            ("full", "full quantized"),
            ("delta_norearrange", "delta, no rearrangement"),
            ("delta", "delta, rearranged"),
        ):
            ax.plot(steps, [r[scope]["torch_save"] / r[scope][key] for r in rows], label=label)
        if scope == "whole":
            ax.plot(
                steps,
                [r["whole"]["torch_save"] / r["manager"] for r in rows],
                ":",
                label=f"CheckpointManager (keyframe every {result['keyframe_every']})",
            )
        ax.set_title(
            f"{result['workload']}: {'model + optimizer' if scope == 'whole' else 'weights only'}"
        )
        ax.set_xlabel("training step")
        ax.set_ylabel("ratio (torch.save bytes / bytes written)")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _print_summary(result: dict[str, Any]) -> None:
    s = result["summary"]
    print()
    print(
        f"{'scope':8s} {'full':>8s} {'delta':>8s} {'no-rearr':>9s} "
        f"{'delta/full':>11s} {'rearr gain':>11s}"
    )
    for scope in ("whole", "weights"):
        t = s[scope]
        print(
            f"{scope:8s} {t['ratio_full']:8.2f} {t['ratio_delta']:8.2f} "
            f"{t['ratio_delta_norearrange']:9.2f} {t['delta_vs_full']:10.2f}x "
            f"{t['rearrangement_gain']:10.3f}x"
        )
    print(
        f"manager (keyframe every {result['keyframe_every']}): "
        f"ratio {s['whole']['ratio_manager']:.2f}, "
        f"{s['whole']['manager_vs_full']:.2f}x smaller than full checkpoints"
    )
    e = s["entropy_stage_weights"]
    print(
        f"entropy stage ({e['method']}, weights): {e['payload_bytes']:,d} bytes vs order-0 "
        f"{e['order0_bytes']:,d} (x{e['payload_over_order0']:.3f}), "
        f"entropy given previous bin {e['conditional_on_prev_bin_bytes']:,d}"
    )
    for name, b in sorted(e["all_methods_bytes"].items(), key=lambda kv: kv[1]):
        print(f"  {name:28s} {b:>10,d}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run: cnn, 20 checkpoints")
    ap.add_argument("--workload", choices=sorted(_workloads.WORKLOADS), default=None)
    ap.add_argument("--checkpoints", type=int, default=None)
    ap.add_argument("--every", type=int, default=None, help="training steps per checkpoint")
    ap.add_argument("--keyframe-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bins", type=int, default=ckptzip.QuantConfig().bins)
    ap.add_argument("--prune", type=float, default=ckptzip.QuantConfig().prune)
    ap.add_argument("--no-methods", action="store_true", help="skip the back-end comparison")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    workload = args.workload or ("cnn" if args.quick else "lm")
    checkpoints = args.checkpoints or (20 if args.quick else 30)
    every = args.every or (10 if args.quick else 20)
    if checkpoints < 2:
        ap.error(f"--checkpoints={checkpoints} must be at least 2")
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        result = measure_run(
            workload,
            checkpoints=checkpoints,
            every=every,
            keyframe_every=args.keyframe_every,
            seed=args.seed,
            methods=not args.no_methods,
            quant=ckptzip.QuantConfig(bins=args.bins, prune=args.prune),
            workdir=Path(tmp),
        )
    result["command"] = "python benchmarks/delta.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    default_quant = (args.bins, args.prune) == (
        ckptzip.QuantConfig().bins,
        ckptzip.QuantConfig().prune,
    )
    variant = "" if default_quant else f"-b{args.bins}-p{args.prune:g}"
    stem = f"delta-{workload}{variant}{'-quick' if args.quick else ''}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    plot(result, args.out / f"{stem}.png")
    _print_summary(result)
    print(f"\nwrote {args.out / (stem + '.json')} and {args.out / (stem + '.png')}")


if __name__ == "__main__":
    main()
