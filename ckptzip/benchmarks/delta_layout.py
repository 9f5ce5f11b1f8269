"""Benchmark: what a delta chain's layout costs in bytes and buys in restore time.

A delta file names one parent; its layout is which. Restoring a file decodes it and every
ancestor back to the keyframe, one link after the other, so the restore time grows with the
file's *depth* and the bytes with the distance from each delta to its parent. Layouts
measured here (``n`` is a file's position after the keyframe, ``0`` the keyframe itself):

* ``chain``: each delta against the previous file (``n - 1``), what ``CheckpointManager``
  writes by default; the last of ``k`` deltas decodes ``k + 1`` files;
* ``skip``: a skip list, each delta against ``n - lowbit(n)`` (1→0, 2→0, 3→2, 4→0, 5→4, 6→4,
  7→6, 8→0, 9→8): half the deltas keep the previous file as parent, and no file is deeper
  than ``log2(k) + 1`` deltas (``CheckpointManager(layout="skip")``);
* ``stride3``: every third file against the third before it (3→0, 6→3, 9→6), the others
  against the previous one;
* ``star``: every delta against the keyframe (two files whatever the position).

All are written with ``ckptzip.save`` and its ``parent=`` argument at the default config,
from the same training states of ``throughput.py``'s model (7.4M-parameter GPT-style
transformer + AdamW, ``--quick``'s state), ``--every`` training steps apart. Restores are
``ckptzip.load``: of the last file, best of ``--repeat`` (wall and CPU seconds), and of every
file once (the mean: what restoring the latest step costs when a failure can come at any
position), beside the keyframe's own load.

    python benchmarks/delta_layout.py                  # 9 deltas, 1 and 10 steps apart
    python benchmarks/delta_layout.py --every 5 --deltas 4 --layouts chain skip

Prints a table per spacing and writes ``benchmarks/results/delta_layout.json``.

``--runs`` measures whole runs instead, through ``CheckpointManager``: each ``LAYOUT:K``
(``layout=``, ``keyframe_every=K``) saves the same ``--states`` states, ``--every`` steps
apart (keyframes included, so the bytes are a run's), then a fresh manager restores every
step once, the variants alternating; the table gives bytes per file, the delta saves' CPU
seconds and the restores (mean, the worst, and the run's last step)::

    python benchmarks/delta_layout.py --runs chain:10 skip:10 skip:16 skip:32 --states 32
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_table, results_path, write_json
from throughput import Run

import ckptzip

#: position after the keyframe (>= 1) -> the position of its parent
LAYOUTS: dict[str, Callable[[int], int]] = {
    "chain": lambda n: n - 1,
    "skip": lambda n: n - (n & -n),
    "stride3": lambda n: n - 3 if n % 3 == 0 else n - 1,
    "star": lambda n: 0,
}


def depth(layout: str, n: int) -> int:
    """Delta files restoring position ``n`` decodes (the keyframe not counted)."""
    parent, d = LAYOUTS[layout], 0
    while n:
        n, d = parent(n), d + 1
    return d


def _load(path: Path) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    ckptzip.load(path)
    return time.perf_counter() - t0, time.process_time() - c0


def _best_load(path: Path, repeat: int) -> tuple[float, float]:
    """Fastest of ``repeat`` loads of ``path``: (wall seconds, CPU seconds)."""
    return min(_load(path) for _ in range(repeat))


def layouts(every: int, deltas: int, repeat: int, names: list[str]) -> dict[str, Any]:
    """A keyframe and ``deltas`` later states ``every`` steps apart, written in each layout;
    their sizes per delta, and the restores (the last file; every file, once each)."""
    run = Run(8192, 256, 4)
    for _ in range(3):
        run.step()
    d = Path(tempfile.mkdtemp(prefix="ckptzip-delta-layout-"))
    try:
        keyframe = d / "k0.ckz"
        ckptzip.save(run.state(), keyframe)

        def file(name: str, n: int) -> Path:
            return keyframe if n == 0 else d / f"{name}{n}.ckz"

        rows = []
        for i in range(1, deltas + 1):
            for _ in range(every):
                run.step()
            state = run.state()
            row: dict[str, Any] = {"delta": i}
            for name in names:
                ckptzip.save(state, file(name, i), parent=file(name, LAYOUTS[name](i)))
                row[f"{name} MB"] = os.path.getsize(file(name, i)) / 1e6
            rows.append(row)
        k_bytes = os.path.getsize(keyframe)
        out: dict[str, Any] = {"every": every, "deltas": rows, "keyframe MB": k_bytes / 1e6}
        base = sum(r[f"{names[0]} MB"] for r in rows) * 1e6
        summary = []
        for name in names:
            total = sum(r[f"{name} MB"] for r in rows) * 1e6
            # interleaved: each layout's loads of position i follow each other
            summary.append(
                {
                    "layout": name,
                    "depth of the last": depth(name, deltas),
                    "deepest": max(depth(name, n) for n in range(1, deltas + 1)),
                    "deltas MB": total / 1e6,
                    f"all files / {names[0]}": (k_bytes + total) / (k_bytes + base),
                }
            )
        for _ in range(repeat):
            for s in summary:
                w, c = _load(file(s["layout"], deltas))
                if w < s.get("restore last s", float("inf")):
                    s["restore last s"], s["restore last cpu s"] = w, c
        for s in summary:
            s["restore any s"] = s["restore any cpu s"] = 0.0
        for n in range(1, deltas + 1):
            for s in summary:
                w, c = _load(file(s["layout"], n))
                s["restore any s"] += w / deltas
                s["restore any cpu s"] += c / deltas
        out["layouts"] = summary
        out["load keyframe (s, cpu s)"] = _best_load(keyframe, repeat)
        return out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def runs(
    variants: list[str], states: int, every: int, error_feedback: bool = False
) -> dict[str, Any]:
    """Whole runs of ``states`` saves through ``CheckpointManager``, one per ``LAYOUT:K``
    (``error_feedback=False`` unless asked: the README's figures were measured so, before
    error feedback became the manager's default)."""
    from ckptzip import CheckpointManager

    run = Run(8192, 256, 4)
    for _ in range(3):
        run.step()
    d = Path(tempfile.mkdtemp(prefix="ckptzip-delta-runs-"))
    try:
        mgrs = {}
        for v in variants:
            layout, k = v.split(":")
            mgrs[v] = CheckpointManager(
                d / v.replace(":", "-"),
                keyframe_every=int(k),
                layout=layout,  # type: ignore[arg-type]
                error_feedback=error_feedback,
            )
        save_cpu: dict[str, list[float]] = {v: [] for v in variants}
        for step in range(states):
            if step:
                for _ in range(every):
                    run.step()
            state = run.state()
            for v, mgr in mgrs.items():
                c0 = time.process_time()
                mgr.save(step, state)
                save_cpu[v].append(time.process_time() - c0)
        rows = []
        for v, mgr in mgrs.items():
            files = sorted(Path(mgr.directory).glob("step-*.ckz"))
            total = sum(f.stat().st_size for f in files)
            depths = [len(mgr.chain(s)) for s in range(states)]
            delta_cpu = [c for c, n in zip(save_cpu[v], depths, strict=True) if n > 1]
            rows.append(
                {
                    "variant": v,
                    "MB per file": total / len(files) / 1e6,
                    "files in the longest chain": max(depths),
                    "mean files per restore": sum(depths) / states,
                    "delta save cpu s": sum(delta_cpu) / max(1, len(delta_cpu)),
                    "restore s": [],
                    "restore cpu s": [],
                }
            )
            mgr.close()
        for step in range(states):
            for row in rows:
                v = row["variant"]
                c0, t0 = time.process_time(), time.perf_counter()
                CheckpointManager(d / v.replace(":", "-")).load(step)
                row["restore s"].append(time.perf_counter() - t0)
                row["restore cpu s"].append(time.process_time() - c0)
        base = rows[0]["MB per file"]
        for row in rows:
            row[f"bytes / {rows[0]['variant']}"] = row["MB per file"] / base
            for k in ("restore s", "restore cpu s"):
                row[f"{k} mean"] = sum(row[k]) / states
                row[f"{k} max"] = max(row[k])
                row[f"{k} last"] = row[k][-1]
        return {"every": every, "states": states, "variants": rows}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--every", type=int, nargs="+", default=[1, 10], help="steps between files")
    ap.add_argument("--deltas", type=int, default=9, help="delta files after the keyframe")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--layouts",
        nargs="+",
        choices=sorted(LAYOUTS),
        default=list(LAYOUTS),
        help="the first is the reference of the bytes column",
    )
    ap.add_argument(
        "--runs", nargs="+", metavar="LAYOUT:K", help="whole manager runs instead (see above)"
    )
    ap.add_argument("--states", type=int, default=32, help="saves of each --runs run")
    ap.add_argument(
        "--error-feedback",
        action="store_true",
        help="--runs with the manager's error feedback (its default; off here by default)",
    )
    ap.add_argument("--out", default=None, help="JSON path (default results/delta_layout.json)")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"load average before": os.getloadavg()[0], "runs": []}
    if args.runs:
        for every in args.every:
            res = runs(args.runs, args.states, every, args.error_feedback)
            res["error_feedback"] = args.error_feedback
            out["runs"].append(res)
            first = args.runs[0]
            print_table(
                f"{args.states} saves {every} step(s) apart, fresh-manager restores of each step",
                res["variants"],
                [("variant", "variant", ""), ("MB per file", "MB/file", ".3f"),
                 (f"bytes / {first}", f"/ {first}", ".3f"),
                 ("files in the longest chain", "longest", "d"),
                 ("mean files per restore", "mean files", ".2f"),
                 ("delta save cpu s", "delta save cpu", ".3f"),
                 ("restore s mean", "restore mean s", ".3f"),
                 ("restore cpu s mean", "cpu", ".3f"), ("restore s max", "worst s", ".3f"),
                 ("restore s last", "last s", ".3f"), ("restore cpu s last", "cpu", ".3f")],
            )  # fmt: skip
        out["load average after"] = os.getloadavg()[0]
        print(f"load average {out['load average before']:.1f} before, "
              f"{out['load average after']:.1f} after")  # fmt: skip
        write_json(results_path(args.out, "delta_layout-runs.json"), out)
        return 0
    ref = args.layouts[0]
    for every in args.every:
        res = layouts(every, args.deltas, args.repeat, args.layouts)
        out["runs"].append(res)
        print_table(
            f"{every} step(s) between files; keyframe {res['keyframe MB']:.2f} MB",
            res["deltas"],
            [("delta", "delta", "d")] + [(f"{n} MB", f"{n} MB", ".3f") for n in args.layouts],
        )
        kw, kc = res["load keyframe (s, cpu s)"]
        print_table(
            f"restores ({every} step(s) apart); the keyframe alone {kw:.3f} s (CPU {kc:.3f})",
            res["layouts"],
            [("layout", "layout", ""), ("depth of the last", "depth last", "d"),
             ("deepest", "deepest", "d"), ("deltas MB", "deltas MB", ".2f"),
             (f"all files / {ref}", f"all files / {ref}", ".3f"),
             ("restore last s", "last s", ".3f"), ("restore last cpu s", "last cpu s", ".3f"),
             ("restore any s", "mean s", ".3f"), ("restore any cpu s", "mean cpu s", ".3f")],
        )  # fmt: skip
    out["load average after"] = os.getloadavg()[0]
    before, after = out["load average before"], out["load average after"]
    print(f"load average {before:.1f} before, {after:.1f} after")
    write_json(results_path(args.out, "delta_layout.json"), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
