"""Benchmark: the compiled decoders of a chain-end restore, replayed alone on one thread.

The ``throughput.py --quick`` state (7.4M parameters + AdamW) is saved by a
``CheckpointManager`` ten times, one training step apart (a keyframe and nine deltas, error
feedback on: the manager's defaults); a fresh manager restores the last step while every call
of the entropy stage's decoders is recorded (``kernels.ans_lanes_decode``, the ``"rle+ans"``
pair ``kernels.ans_decode_pair``, and the ``"rle"`` back ends' zero runs). Each kind of call
is then replayed on one thread, best of ``--repeat`` by the process's CPU time (the figure
another process on the machine moves least), in nanoseconds per symbol; the sha256 of all
the decoded outputs says whether two trees decode the same symbols from the same files
(``--chain DIR``: the chain is written there once and read by every later run; a new chain
is not the same bytes, the manager's rounding draws are not seeded).

``python benchmarks/restore_kernels.py [--chain DIR]`` (about a minute); prints a table and
writes ``benchmarks/results/restore_kernels.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _replay import Call, copy_args, least_cpu_row
from _report import RESULTS, print_table, write_json
from throughput import Run

from ckptzip import CheckpointManager, entropy, kernels


def record(d: Path) -> dict[str, list[Call]]:
    """Each decoder call of a restore of the chain in ``d``: (function, copies of its
    arguments, symbols); the restore itself runs as it would."""
    calls: dict[str, list[Call]] = {
        "ans lanes": [],
        "ans pair (rle+ans)": [],
        "zero runs (rle)": [],
    }
    lanes, pair = kernels.ans_lanes_decode, kernels.ans_decode_pair
    # the zero runs were decoded in entropy before they had a kernel: this tree's, either way
    owner: Any = kernels if hasattr(kernels, "zero_runs_decode") else entropy
    name = "zero_runs_decode" if owner is kernels else "_from_zero_runs"
    runs = getattr(owner, name)

    def spy_lanes(*args: Any, **kw: Any) -> Any:
        mine = {k: copy_args(v) for k, v in kw.items()}
        mine["threads"] = 1
        if kw.get("out") is not None:  # its own output: the replay writes no restore's tensor
            mine["out"] = torch.empty_like(kw["out"])
        calls["ans lanes"].append((lanes, copy_args(args), mine, int(args[4])))
        return lanes(*args, **kw)

    def spy_pair(a: Any, b: Any) -> Any:
        calls["ans pair (rle+ans)"].append((pair, copy_args((a, b)), {}, int(a[3]) + int(b[3])))
        return pair(a, b)

    def spy_runs(data: Any, n: int, nonzero: int) -> Any:
        calls["zero runs (rle)"].append((runs, (copy_args(data), n, nonzero), {}, n))
        return runs(data, n, nonzero)

    kernels.ans_lanes_decode, kernels.ans_decode_pair = spy_lanes, spy_pair
    setattr(owner, name, spy_runs)
    try:
        CheckpointManager(d, keyframe_every=10).load(9)
    finally:
        kernels.ans_lanes_decode, kernels.ans_decode_pair = lanes, pair
        setattr(owner, name, runs)
    return calls


def replay(calls: list[Call], digest: bool = False) -> str:
    """Run every call once; with ``digest``, a sha256 of what they decoded (over the calls'
    own digests, sorted: the pool's threads record them in any order)."""
    digests = []
    for fn, args, kw, _ in calls:
        out = fn(*args, **kw)
        if digest:
            h = hashlib.sha256()
            parts = out if isinstance(out, tuple) else (kw["out"] if out is None else out,)
            for part in parts:
                h.update(
                    part.numpy().tobytes() if isinstance(part, torch.Tensor) else part.tobytes()
                )
            digests.append(h.hexdigest())
    return hashlib.sha256("".join(sorted(digests)).encode()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--chain", type=Path, help="the chain's directory, written when it holds none")
    ap.add_argument("--json", type=Path, default=RESULTS / "restore_kernels.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.chain or Path(tmp) / "chain"
        if not any(d.glob("*.ckz")):
            run = Run(8192, 256, 4)
            mgr = CheckpointManager(d, keyframe_every=10)
            mgr.save(0, run.state())
            for step in range(1, 10):
                run.step()
                mgr.save(step, run.state())
            mgr.close()
        recorded = record(d)
    rows = []
    for name, calls in recorded.items():
        if not calls:
            continue
        rows.append({"decoder": name, **least_cpu_row(calls, replay, args.repeat, "symbol")})
    print_table(
        f"the decoders of a chain-end restore, replayed on one thread ({kernels.IMPLEMENTATION})",
        rows,
        [
            ("decoder", "decoder", ""),
            ("calls", "calls", "d"),
            ("symbols", "symbols", "d"),
            ("cpu s", "cpu s", ".4f"),
            ("ns/symbol", "ns/symbol", ".2f"),
            ("sha256", "sha256", ""),
        ],
    )
    write_json(args.json, {"kernels": kernels.IMPLEMENTATION, "rows": rows})


if __name__ == "__main__":
    main()
