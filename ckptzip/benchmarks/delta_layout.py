"""Benchmark: what a delta chain's layout costs in bytes and buys in restore time.

Today a delta file is coded against the previous file (a *chain*), so restoring the end of a
chain of ``k`` deltas decodes ``k + 1`` files. The alternative measured here codes every delta
against the keyframe (a *star*): a restore decodes two files whatever the position, but each
delta holds all the change since the keyframe. Both layouts are written with ``ckptzip.save``
and its ``parent=`` argument at the default config, from the same training states of
``throughput.py``'s model (7.4M-parameter GPT-style transformer + AdamW, ``--quick``'s state),
``--every`` training steps apart; the restore is ``ckptzip.load`` of the last file, best of 3
(wall and CPU seconds), beside the keyframe's own load.

    python benchmarks/delta_layout.py                  # 9 deltas, 1 and 10 steps apart
    python benchmarks/delta_layout.py --every 5 --deltas 4

Prints a table per spacing and writes ``benchmarks/results/delta_layout.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import print_table, results_path, write_json
from throughput import Run

import ckptzip


def _best_load(path: Path, repeat: int) -> tuple[float, float]:
    """Fastest of ``repeat`` loads of ``path``: (wall seconds, CPU seconds)."""
    times = []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        ckptzip.load(path)
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    return min(times)


def layouts(every: int, deltas: int, repeat: int) -> dict[str, Any]:
    """A keyframe and ``deltas`` later states ``every`` steps apart, written as a chain and as
    a star; their sizes per delta and the restore of the last one."""
    run = Run(8192, 256, 4)
    for _ in range(3):
        run.step()
    d = Path(tempfile.mkdtemp(prefix="ckptzip-delta-layout-"))
    try:
        keyframe = d / "k0.ckz"
        ckptzip.save(run.state(), keyframe)
        rows = []
        for i in range(1, deltas + 1):
            for _ in range(every):
                run.step()
            state = run.state()
            chain_parent = keyframe if i == 1 else d / f"c{i - 1}.ckz"
            ckptzip.save(state, d / f"c{i}.ckz", parent=chain_parent)
            ckptzip.save(state, d / f"s{i}.ckz", parent=keyframe)
            c, s = (os.path.getsize(d / f"{x}{i}.ckz") for x in ("c", "s"))
            rows.append({"delta": i, "chain MB": c / 1e6, "star MB": s / 1e6, "star x": s / c})
        k_bytes = os.path.getsize(keyframe)
        chain_bytes = sum(r["chain MB"] for r in rows) * 1e6
        star_bytes = sum(r["star MB"] for r in rows) * 1e6
        return {
            "every": every,
            "deltas": rows,
            "keyframe MB": k_bytes / 1e6,
            "deltas, star over chain": star_bytes / chain_bytes,
            "all files, star over chain": (k_bytes + star_bytes) / (k_bytes + chain_bytes),
            "restore end, chain (s, cpu s)": _best_load(d / f"c{deltas}.ckz", repeat),
            "restore end, star (s, cpu s)": _best_load(d / f"s{deltas}.ckz", repeat),
            "load keyframe (s, cpu s)": _best_load(keyframe, repeat),
        }
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--every", type=int, nargs="+", default=[1, 10], help="steps between files")
    ap.add_argument("--deltas", type=int, default=9, help="delta files after the keyframe")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON path (default results/delta_layout.json)")
    args = ap.parse_args(argv)
    out: dict[str, Any] = {"load average before": os.getloadavg()[0], "runs": []}
    for every in args.every:
        res = layouts(every, args.deltas, args.repeat)
        out["runs"].append(res)
        print_table(
            f"{every} step(s) between files; keyframe {res['keyframe MB']:.2f} MB",
            res["deltas"],
            [("delta", "delta", "d"), ("chain MB", "chain MB", ".3f"),
             ("star MB", "star MB", ".3f"), ("star x", "star / chain", ".2f")],
        )  # fmt: skip
        (cw, cc), (sw, sc), (kw, kc) = (
            res[k]
            for k in (
                "restore end, chain (s, cpu s)",
                "restore end, star (s, cpu s)",
                "load keyframe (s, cpu s)",
            )
        )
        print(
            f"bytes, star over chain: deltas {res['deltas, star over chain']:.2f}x, all files "
            f"{res['all files, star over chain']:.2f}x\nrestore of the last file: chain {cw:.3f} s "
            f"(CPU {cc:.3f}), star {sw:.3f} s (CPU {sc:.3f}); the keyframe alone {kw:.3f} s "
            f"(CPU {kc:.3f})"
        )
    out["load average after"] = os.getloadavg()[0]
    before, after = out["load average before"], out["load average after"]
    print(f"load average {before:.1f} before, {after:.1f} after")
    write_json(results_path(args.out, "delta_layout.json"), out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
