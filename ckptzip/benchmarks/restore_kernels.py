"""Benchmark: the compiled decoders of a chain-end restore, replayed alone on one thread.

The ``throughput.py --quick`` state (7.4M parameters + AdamW) is saved by a
``CheckpointManager`` ten times, one training step apart (a keyframe and nine deltas, error
feedback on: the manager's defaults); a fresh manager restores the last step while every call
of the entropy stage's decoders is recorded (``kernels.ans_lanes_decode``,
``kernels.ans_wide_ctx_decode``, the ``"rle+ans"`` pair ``kernels.ans_decode_pair``, and the
``"rle"`` back ends' zero runs). Each kind of call
is then replayed on one thread, best of ``--repeat`` by the process's CPU time (the figure
another process on the machine moves least), in nanoseconds per symbol; the sha256 of all
the decoded outputs says whether two trees decode the same symbols from the same files
(``--chain DIR``: the chain is written there once and read by every later run; a new chain
is not the same bytes, the manager's rounding draws are not seeded).

``python benchmarks/restore_kernels.py [--chain DIR]`` (about a minute); prints a table and
writes ``benchmarks/results/restore_kernels.json``.

``--phases N``: instead, N restores of the chain's last step by fresh managers in this
process (every thread as it runs), each timed in its phases: resolving the chain (reading,
hashing and parsing every file's manifest: serial), walking the parents (the lossy tensors
through the links, on the pool), the last link's entries, and building the state (levels
gathered into tensors); the wall milliseconds of each, least and median over the restores;
and Python's garbage collections during them (from a load's start to its manager's close,
where one the load put off runs), per generation: how many, and their ms a restore
(``benchmarks/results/restore_phases.json``).

``--stages N``: instead, N restores with the Python-side stages of :data:`STAGES` (an
entry's decode, a delta's, a residual's straight into the tensor, a quantized entry's side
parts, a stream's bounds, a file's manifest) each timed by the CPU time of the thread that
runs it: calls and ms a restore, least and median (``benchmarks/results/restore_stages.json``;
a tree before/after by ``PYTHONPATH``, the same chain).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _replay import Call, copy_args, least_cpu_row
from _report import RESULTS, print_table, write_json
from throughput import Run

from ckptzip import CheckpointManager, api, chains, entropy, kernels


def record(d: Path) -> dict[str, list[Call]]:
    """Each decoder call of a restore of the chain in ``d``: (function, copies of its
    arguments, symbols); the restore itself runs as it would."""
    calls: dict[str, list[Call]] = {
        "ans lanes": [],
        "ans wide lanes by context": [],
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

    # the wide lanes by context came after 4681e96: an older tree has no such kernel
    wide = getattr(kernels, "ans_wide_ctx_decode", None)

    def spy_wide(*args: Any) -> Any:
        calls["ans wide lanes by context"].append((wide, copy_args(args), {}, int(args[4])))
        return wide(*args)

    kernels.ans_lanes_decode, kernels.ans_decode_pair = spy_lanes, spy_pair
    if wide is not None:
        kernels.ans_wide_ctx_decode = spy_wide
    setattr(owner, name, spy_runs)
    try:
        CheckpointManager(d, keyframe_every=10).load(9)
    finally:
        kernels.ans_lanes_decode, kernels.ans_decode_pair = lanes, pair
        if wide is not None:
            kernels.ans_wide_ctx_decode = wide
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


PHASES = (
    ("chain", chains.ChainStore, "chain"),
    ("parents", api, "_parent_view"),
    ("last link", api, "_decode_entries"),
    ("state", api, "_materialize"),
)
"""A restore's phases: (name, the object whose function it is, the function), in order."""


def phases(d: Path, restores: int) -> list[dict[str, Any]]:
    """Restore the last step of the chain in ``d`` ``restores`` times, fresh managers; one
    row per phase and one for the whole ``load``: wall ms, least and median; then one row
    per generation of Python's garbage collector: its collections during the restores
    (``calls``, all of them) and their ms a restore."""
    times: dict[str, list[float]] = {name: [] for name, _, _ in PHASES}
    times["whole restore"] = []
    # per restore (its load and the manager's close, where a collection the load put off
    # runs): ms in each generation's collections
    collected: list[list[float]] = []
    counts = [0, 0, 0]
    clock = [0.0]
    active = [False]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            clock[0] = time.perf_counter()
        elif active[0]:
            collected[-1][info["generation"]] += 1e3 * (time.perf_counter() - clock[0])
            counts[info["generation"]] += 1

    originals = [(owner, fn, getattr(owner, fn)) for _, owner, fn in PHASES]

    def timed(name: str, fn: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                times[name].append(1e3 * (time.perf_counter() - t))

        return call

    with CheckpointManager(d) as mgr:
        last = mgr.steps()[-1]
    for (name, _, _), (owner, fn, original) in zip(PHASES, originals, strict=True):
        setattr(owner, fn, timed(name, original))
    gc.callbacks.append(on_gc)
    try:
        for _ in range(restores):
            mgr = CheckpointManager(d)
            collected.append([0.0, 0.0, 0.0])
            active[0] = True
            try:
                t = time.perf_counter()
                mgr.load(last)
                times["whole restore"].append(1e3 * (time.perf_counter() - t))
            finally:
                mgr.close()
                active[0] = False
    finally:
        gc.callbacks.remove(on_gc)
        for owner, fn, original in originals:
            setattr(owner, fn, original)
    rows = [
        {
            "phase": name,
            "calls": len(ms),
            "least ms": min(ms),
            "median ms": statistics.median(ms),
        }
        for name, ms in times.items()
        if ms
    ]
    for generation, name in enumerate(("young", "middle", "full")):
        ms = [c[generation] for c in collected]
        rows.append(
            {
                "phase": f"garbage collections, {name} (generation {generation})",
                "calls": counts[generation],
                "least ms": min(ms),
                "median ms": statistics.median(ms),
                "mean ms": statistics.fmean(ms),
            }
        )
    return rows


STAGES = (
    ("api", "_decode_entry", "every entry's decode (all of the stages below)"),
    ("bindiff", "decode_delta", "a bin-index delta (its entropy decoding included)"),
    ("codecs.quantized", "decode_values", "a residual or values entry, straight into the tensor"),
    ("codecs.quantized", "decode_side", "a quantized entry's side parts and index check"),
    ("entropy", "_bounds", "a stream's context bounds"),
    ("container", "Reader.__init__", "a file's header and manifest"),
)
"""Python-side stages of a restore: (module under ``ckptzip``, function, what it does). Nested
stages are not additive."""


def stages(d: Path, restores: int) -> list[dict[str, Any]]:
    """Restore the last step of the chain in ``d`` ``restores`` times, fresh managers, each
    of :data:`STAGES` timed by the CPU time of the thread that runs it (every thread, the
    pool's included): its calls and ms of thread CPU a restore (the least and the median
    over the restores). A function imported by name into another ckptzip module is timed
    there too; one a tree does not have is left out."""
    import importlib

    found = []
    for mod, qual, what in STAGES:
        owner: Any = importlib.import_module(f"ckptzip.{mod}")
        *outer, fn = qual.split(".")
        for part in outer:
            owner = getattr(owner, part)
        if hasattr(owner, fn):
            found.append((qual, what, owner, fn, getattr(owner, fn)))
    per: dict[str, list[float]] = {qual: [] for qual, *_ in found}
    calls = {qual: 0 for qual, *_ in found}
    spent = dict.fromkeys(per, 0.0)
    lock = threading.Lock()

    def timed(qual: str, original: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            t = time.thread_time()
            try:
                return original(*args, **kw)
            finally:
                with lock:
                    spent[qual] += time.thread_time() - t
                    calls[qual] += 1

        return call

    patched = []  # (owner, name, original): every place each original is reachable by name
    for qual, _, owner, fn, original in found:
        wrapper = timed(qual, original)
        places = [(owner, fn)] + [
            (m, fn)
            for name, m in list(sys.modules.items())
            if name.startswith("ckptzip.") and m is not owner and getattr(m, fn, None) is original
        ]
        for place, name in places:
            patched.append((place, name, original))
            setattr(place, name, wrapper)
    with CheckpointManager(d) as mgr:
        last = mgr.steps()[-1]
    try:
        for _ in range(restores):
            for qual in spent:
                spent[qual] = 0.0
            mgr = CheckpointManager(d)
            try:
                mgr.load(last)
            finally:
                mgr.close()
            for qual in per:
                per[qual].append(1e3 * spent[qual])
    finally:
        for place, name, original in patched:
            setattr(place, name, original)
    return [
        {
            "stage": qual,
            "what": what,
            "calls": calls[qual] // restores,
            "least ms": min(per[qual]),
            "median ms": statistics.median(per[qual]),
        }
        for qual, what, *_ in found
    ]


def write_chain(d: Path) -> None:
    """The --quick state saved ten times, one training step apart, by a default manager."""
    run = Run(8192, 256, 4)
    mgr = CheckpointManager(d, keyframe_every=10)
    mgr.save(0, run.state())
    for step in range(1, 10):
        run.step()
        mgr.save(step, run.state())
    mgr.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--chain", type=Path, help="the chain's directory, written when it holds none")
    ap.add_argument("--phases", type=int, metavar="N", help="time N restores' phases instead")
    ap.add_argument(
        "--stages", type=int, metavar="N", help="N restores' Python-side stages' thread CPU instead"
    )
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = args.chain or Path(tmp) / "chain"
        if not any(d.glob("*.ckz")):
            write_chain(d)
        if args.stages:
            _report(
                f"the Python-side stages of a chain-end restore, {args.stages} restores, "
                "thread CPU ms a restore",
                stages(d, args.stages),
                [
                    ("stage", ""),
                    ("calls", "d"),
                    ("least ms", ".2f"),
                    ("median ms", ".2f"),
                    ("what", ""),
                ],
                args.json or RESULTS / "restore_stages.json",
            )
            return
        if args.phases:
            _report(
                f"the phases of a chain-end restore, {args.phases} restores, wall ms",
                phases(d, args.phases),
                [
                    ("phase", ""),
                    ("calls", "d"),
                    ("least ms", ".1f"),
                    ("median ms", ".1f"),
                    ("mean ms", ".1f"),
                ],
                args.json or RESULTS / "restore_phases.json",
            )
            return
        recorded = record(d)
    rows = [
        {"decoder": name, **least_cpu_row(calls, replay, args.repeat, "symbol")}
        for name, calls in recorded.items()
        if calls
    ]
    _report(
        "the decoders of a chain-end restore, replayed on one thread",
        rows,
        [
            ("decoder", ""),
            ("calls", "d"),
            ("symbols", "d"),
            ("cpu s", ".4f"),
            ("ns/symbol", ".2f"),
            ("sha256", ""),
        ],
        args.json or RESULTS / "restore_kernels.json",
    )


def _report(
    title: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]], out: Path
) -> None:
    """The table (columns: (key, format), headed by their keys), then the JSON."""
    print_table(f"{title} ({kernels.IMPLEMENTATION})", rows, [(k, k, fmt) for k, fmt in columns])
    write_json(out, {"kernels": kernels.IMPLEMENTATION, "rows": rows})


if __name__ == "__main__":
    main()
